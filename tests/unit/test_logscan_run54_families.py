"""Blind run 54's lesson (batches X51, X54): gloo's size-mismatch enforce in its older
wording. The receiver posted a buffer smaller than the message its peer sent in the same
collective ("op.preamble.length <= op.nbytes. 256000 vs 128000"); newer gloo adds
"Received data size doesn't match expected size". Either is a collective mismatch: the
ranks passed tensors of different sizes.

Not learned: a hang shown only by a reporter's own prints ("Rank 0 tensor after
allreduce" and no other rank's "after"): no line of torch, NCCL or a launcher says it.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

DIR = Path("tests/fixtures/reallogs")
OLD_GLOO = DIR / "X51_gloo_allreduce_size_mismatch_enforce.log"


def test_gloos_enforce_alone_is_a_collective_size_mismatch():
    lead = findings_of(OLD_GLOO)[0]
    assert (lead.id, lead.severity) == ("HANG_COLLECTIVE_MISMATCH", "error")
    assert (lead.evidence["received_bytes"], lead.evidence["expected_bytes"]) == (256000, 128000)


def test_the_enforce_on_a_ranked_line_names_the_rank_that_detected_it(tmp_path):
    text = "".join(f"[rank2]: {line}" for line in OLD_GLOO.read_text().splitlines(keepends=True))
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("HANG_COLLECTIVE_MISMATCH", [2])


def test_another_gloo_enforce_is_not_a_size_mismatch(tmp_path):
    text = OLD_GLOO.read_text().replace("op.preamble.length <= op.nbytes. 256000 vs 128000",
                                        "rv != -1. -1 vs -1. writev: Broken pipe")
    assert findings_in(tmp_path, text)[0].id != "HANG_COLLECTIVE_MISMATCH"
