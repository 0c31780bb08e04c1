"""Blind run 79's lesson. Ranks that fall into groups, each stuck in a collective of its own
kind (op or element counts) at its own sequence number, crossed in one process group: no
rank can pass a collective another rank is stuck in, so the groups called different
collectives (a Qwen2-VL fine-tune on mixed image and text batches: rank 0 in a 545M-element
all-reduce #959, ranks 1-2 and 4-5 in a 2,560-element one #963; called a plain timeout).
Before, every rank had to be a group of its own. Real log, URL in its sidecar."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

MIXED = Path("tests/fixtures/reallogs/XD2_qwen2vl_mixed_modality_allreduce_mismatch.log")


def test_groups_stuck_at_their_own_numbers_called_different_collectives():
    lead = findings_of(MIXED)[0]
    assert (lead.id, lead.ranks) == ("HANG_COLLECTIVE_MISMATCH", [])
    assert "rank 0: ALLREDUCE" in lead.title and "#959" in lead.title
    assert "rank 1-2,4-5: ALLREDUCE" in lead.title and "#963" in lead.title


def test_numbers_of_different_process_groups_are_not_compared(tmp_path):
    text = MIXED.read_text()
    for rank in (1, 2, 4, 5):  # their lines name another process group than rank 0's
        text = text.replace(f"[Rank {rank}] Watchdog caught", f"[PG 2 Rank {rank}] Watchdog caught")
    assert "[PG 1 Rank 0]" in text
    lead = findings_in(tmp_path, text)[0]
    # every rank's timeout still read, and no mismatch concluded from it
    assert lead.id == "COLLECTIVE_TIMEOUT" and "rank 0-2,4-5" in lead.title, lead.title
