"""Evidence families learned from locked run 21 (batch X2_, scored blind first: 2/5): a
barrier (a one-element all-reduce) that timed out, seen from the ranks that timed out
alone, names no late rank (an excerpt of one rank of a 400-rank job shows nothing of the
others; three development-set logs agreed, one did not); every rank timing out in a
collective of its own kind at its own sequence number is ranks in different collectives.
Real logs (URLs in the sidecars)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
GB200 = REAL / "X2_gb200_rank368_allreduce_timeout_tp_comm_overlap_dgxc.log"
CROSSED = REAL / "X2_ranks_timeout_in_different_allgathers_zero3_qlora_2gpu.log"


def test_one_ranks_barrier_timeout_names_no_late_rank_but_says_what_barriers_wait_for():
    lead = findings_of(GB200)[0]
    assert (lead.id, lead.ranks) == ("COLLECTIVE_TIMEOUT", [])
    assert "barrier" in lead.evidence["hint"] and "preparing data" in lead.evidence["hint"]


def test_a_barrier_timeout_while_another_rank_is_seen_elsewhere_still_names_a_late_rank(
        tmp_path):
    # the GB200 rank's timeout beside a line of another rank that did not time out: now
    # the log shows a rank that never came to the barrier
    timeout = GB200.read_text().splitlines(True)[0]
    other = "[rank12]: Tokenizing train split: 41%|####      | 410/1000\n"
    lead = findings_in(tmp_path, timeout + other)[0]
    assert lead.id == "HANG_RANK_MISSING_COLLECTIVE"


def test_every_rank_in_a_different_collective_is_a_mismatch():
    lead = findings_of(CROSSED)[0]
    assert (lead.id, lead.ranks) == ("HANG_COLLECTIVE_MISMATCH", [])
    assert set(lead.evidence["collectives"]) == {"0", "1"}
    assert "ALLGATHER" in lead.evidence["collectives"]["0"]
    assert "_ALLGATHER_BASE" in lead.evidence["collectives"]["1"]


def test_one_rank_of_the_two_alone_is_no_mismatch(tmp_path):
    rank0 = "".join(x for x in CROSSED.read_text().splitlines(True)
                    if x.startswith("[rank0]:"))
    assert findings_in(tmp_path, rank0)[0].id != "HANG_COLLECTIVE_MISMATCH"
