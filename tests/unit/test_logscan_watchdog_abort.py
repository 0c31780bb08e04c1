"""NCCL's watchdog takes a process down by abort after a collective timed out, by design:
the abort's own lines (C++ ``terminate called`` with the watchdog's message as ``what()``,
faulthandler's ``Fatal Python error: Aborted`` and the thread dump after it) are the
timeout's, not a crash in native code (blind run 33: a forum log of a two-rank FSDP job
called a native crash). Real log, URL in its sidecar."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

LOG = Path("tests/fixtures/reallogs/X13_fsdp_2rank_allgather_base_watchdog_timeout_llama2_"
           "forum.log")


def test_the_watchdogs_abort_is_the_timeouts():
    lead = findings_of(LOG)[0]
    assert (lead.id, lead.ranks) == ("COLLECTIVE_TIMEOUT", [])
    assert "_ALLGATHER_BASE #388923" in lead.title


def test_an_abort_with_no_watchdog_timeout_is_still_a_native_crash(tmp_path):
    text = "".join(x for x in LOG.read_text().splitlines(True) if "Watchdog" not in x)
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "RANK_CRASHED" and "native code: Aborted" in lead.title


def test_a_segfault_beside_a_watchdog_timeout_is_a_crash(tmp_path):
    # a segmentation fault is no watchdog's doing: the timeout is its fallout
    text = LOG.read_text().replace("Fatal Python error: Aborted",
                                   "Fatal Python error: Segmentation fault")
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "RANK_CRASHED" and "Segmentation fault" in lead.title
