"""Blind run 86's lesson (a committed .err of a 32-rank Megatron job that trained on; URL in
its sidecar). The batch script's own `python: command not found` came first, then every
rank printed, but only warnings no rule reads (numexpr's "Error.  nthreads ...", a
deprecation): the check that the script went on counted ranks only in lines that became
events, found none, and called the healthy job failed. Every rank a picked line names now
counts (an informational RANK_SEEN, once per rank)."""

from __future__ import annotations

import re
from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.diagnose.events import EventKind

ERR = Path("tests/fixtures/reallogs/"
           "XE7_healthy_megatron_32rank_nccl_env_deprecation_numexpr_warnings.log")


def test_a_script_line_after_which_the_ranks_printed_is_not_the_jobs_failure():
    assert not [f for f in findings_of(ERR) if f.severity == "error"]


def test_with_no_rank_after_it_the_command_not_found_is_the_failure(tmp_path):
    lines = ERR.read_text().splitlines(keepends=True)
    alone = [ln for ln in lines if not re.match(r"\s*\d+: ", ln)]
    lead = findings_in(tmp_path, "".join(alone))[0]
    assert (lead.id, lead.severity) == ("UNRECOGNIZED_FAILURE", "error")
    assert "command not found" in lead.title


def test_each_rank_is_seen_once(tmp_path):
    from ddpdoctor.diagnose import LogInput, scan_inputs

    events = scan_inputs([LogInput(str(ERR), rank_from_path=False)]).events
    seen = [e.rank for e in events if e.kind is EventKind.RANK_SEEN]
    assert len(seen) == len(set(seen)) >= 2
