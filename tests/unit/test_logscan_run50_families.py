"""Blind run 50's lesson (batches X44, X45, X46): a start-up that never ended leaves no
error line, only a census.

Lightning prints "initializing ddp: GLOBAL_RANK: r, MEMBER: m/w" on every rank as the
process group starts. A log that ends among those lines with only the low ranks of the
world announced (each once: too few processes started; some twice: each node numbered its
own from 0) is a start-up waiting for ranks that do not exist (rules_census). An excerpt
cut mid-start-up of a job that did start, or a start-up that went on (a loss, "All
distributed processes registered"), is no finding.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.core.next_step import Action, decide

DIR = Path("tests/fixtures/reallogs")
TWICE = DIR / "X44_lightning_slurm_ntasks_mismatch_duplicate_ranks_init_hang.log"
NO_SRUN = DIR / "K1_lightning_slurm_no_srun_multinode_init_hang.log"
CUT_STARTUP = DIR / "F5_lightning_slurm_16gpu_startup.log"


def test_ranks_announced_twice_and_the_high_ones_never_is_a_launch_that_overlapped():
    found = findings_of(TWICE)
    lead = found[0]
    assert (lead.id, lead.ranks, lead.severity) == ("HANG_RANK_MISSING_COLLECTIVE", [], "error")
    assert lead.evidence["missing"] == [2, 3] and lead.evidence["announced_twice"] == [0, 1]
    assert decide(found).action is Action.FIX_CONFIG


def test_one_rank_of_eight_and_nothing_more_is_ranks_never_started():
    found = findings_of(NO_SRUN)
    lead = found[0]
    assert (lead.id, lead.ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [])
    assert lead.evidence["missing"] == list(range(1, 8))
    assert "never started" in lead.title
    assert decide(found).action is Action.FIX_CONFIG


def test_an_excerpt_cut_while_ranks_still_announce_is_no_finding():
    # ranks 14, 1, 10 and 11 of 16: whichever printed first, not a launch that started few
    assert findings_of(CUT_STARTUP) == []


def test_a_start_up_that_went_on_is_no_finding(tmp_path):
    text = NO_SRUN.read_text()
    assert findings_in(tmp_path, text + "All distributed processes registered. Starting "
                                        "with 8 processes\n") == []
    assert findings_in(tmp_path, text + "Epoch 0: 12%| 3/25 [00:04<00:29, loss=2.31]\n"
                                        "{'loss': 2.3125, 'learning_rate': 1e-05}\n") == []


def test_a_census_followed_by_more_log_is_no_finding(tmp_path):
    lines = TWICE.read_text() + "".join(f"sample line {i}\n" for i in range(3))
    assert findings_in(tmp_path, lines) == []


def test_every_rank_announced_is_no_finding(tmp_path):
    text = "".join(f"initializing ddp: GLOBAL_RANK: {r}, MEMBER: {r + 1}/4\n" for r in range(4))
    assert findings_in(tmp_path, text) == []


def test_another_failure_is_the_finding_not_the_census(tmp_path):
    text = TWICE.read_text() + "[rank0]: RuntimeError: CUDA error: out of memory\n"
    assert findings_in(tmp_path, text)[0].id != "HANG_RANK_MISSING_COLLECTIVE"
