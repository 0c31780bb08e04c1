"""Evidence families learned from locked run 19 (batch W1_, scored blind first: 0/2): a
traceback whose exception line was lost, ending in work before another rank's collective
timed out (that process failed first); NCCL's Init START lines, where a process starts a
communicator again under an id it used before while another starts a new one (process
groups made in a different order). Real logs (URLs in the sidecars)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
CUT = REAL / "W1_lightning_epoch_end_nvml_assert_allreduce_timeout.log"
STALE = REAL / "W1_mds_double_init_process_group_stale_comm.log"


def test_a_traceback_cut_before_its_exception_is_the_failure_the_timeout_waited_for():
    lead = findings_of(CUT)[0]
    assert lead.id == "RANK_CRASHED" and "roc.py:54" in lead.title
    assert "before rank 1 timed out" in lead.title


def test_the_timeout_alone_names_no_crash(tmp_path):
    timeout_lines = "".join(x for x in CUT.read_text().splitlines(True)
                            if x.startswith("[rank1]:"))
    assert not [f for f in findings_in(tmp_path, timeout_lines) if f.id == "RANK_CRASHED"]


def test_a_process_rejoining_an_old_communicator_is_a_mismatch():
    lead = findings_of(STALE)[0]
    assert (lead.id, lead.ranks) == ("HANG_COLLECTIVE_MISMATCH", [1])
    assert lead.evidence["stale_comm_id"] == "0x56bea185a98d5193"


def test_fresh_ids_for_every_communicator_are_no_finding(tmp_path):
    # the job's first communicator, started on both ranks under one new id: healthy
    first = "".join(x for x in STALE.read_text().splitlines(True)
                    if "Init START" in x and "0x56bea185a98d5193" in x)
    assert first.count("Init START") == 3
    once = "".join(first.splitlines(True)[:2])
    assert not [f for f in findings_in(tmp_path, once) if f.id == "HANG_COLLECTIVE_MISMATCH"]
