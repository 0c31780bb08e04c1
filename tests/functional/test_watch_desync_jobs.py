"""The desync check on real 2-rank gloo jobs (tests/fixtures/userjobs/desync_patterns.py,
under the watch bootstrap as `ddpdoctor run` starts it, every step a check step):
replicas that may legitimately differ (DDP's Join for uneven inputs, no_sync
accumulation, optimizer steps skipped on every rank) give no error finding; a desync
after a Join is still found; a rank that did not restore its optimizer state from the
checkpoint is named; FSDP2 over a size-1 mesh dimension is found as never reduced."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from jobs import run_job

from ddpdoctor.watch.events import read_events

pytestmark = [pytest.mark.slow, pytest.mark.matrix]
ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "fixtures" / "userjobs" / "desync_patterns.py"
BOOTSTRAP = str(ROOT / "ddpdoctor" / "watch" / "bootstrap")


def _watched(tmp: Path, mode: str) -> tuple[str, list[dict]]:
    events = tmp / "events.jsonl"
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=BOOTSTRAP, DDPDOCTOR_WATCH="1",
               DDPDOCTOR_WATCH_EVERY="1", DDPDOCTOR_EVENTS=str(events), OMP_NUM_THREADS="1")
    code, out = run_job([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                         "2", str(JOB), mode, "--dir", str(tmp)], timeout=100, env=env)
    assert code == 0 and "done" in out, out
    return out, read_events(str(events)) if events.exists() else []


def _findings(events: list[dict]) -> list[dict]:
    return [e for e in events if e.get("kind") == "finding"]


def _notes(events: list[dict]) -> list[str]:
    return [e["message"] for e in events if e.get("kind") == "note"]


HEALTHY = {
    # rank 0 sits out 2 steps of every epoch in the Join; with momentum its optimizer
    # state then differs for good (before: PARAM_DESYNC on both ranks at step 6)
    "join": ["rank 0 sat out steps in DDP's Join",
             "optimizer state (momentum, Adam moments) of rank 0 (2) missed"],
    # 2 micro-batches per step under no_sync: rank 0 sits out 4 iterations of rank 1,
    # 2 of them synchronised: 2 shadow steps, 2 missed Adam updates (before: PARAM_DESYNC)
    "join-accum": ["rank 0 sat out steps in DDP's Join",
                   "optimizer state (momentum, Adam moments) of rank 0 (2) missed"],
    # ZeRO in the Join steps on the joined rank itself (its join hook): ordinary steps, no
    # shadow steps, and the replicas compared (and equal) on every step (before: a
    # GRAD_ACCUM_OUT_OF_STEP warning for the joined rank's steps with no micro-batch)
    "join-zero": [],
    # no_sync accumulation and optimizer steps skipped on every rank alike
    "accum-skip": ["3 micro-batches per optimizer step"],
}


@pytest.mark.timeout(150)
@pytest.mark.parametrize("mode", sorted(HEALTHY))
def test_replicas_that_may_differ_give_no_finding(tmp_path, mode):
    out, events = _watched(tmp_path, mode)
    assert _findings(events) == [], out
    notes = _notes(events)
    if not HEALTHY[mode]:
        assert not any("not compared" in n for n in notes), notes
    for text in HEALTHY[mode]:
        assert any(text in n for n in notes), notes


@pytest.mark.timeout(150)
def test_desync_after_a_join_is_still_found(tmp_path):
    # plain SGD: after each Join's final sync the replicas must match again; rank 1 then
    # changes a weight outside the optimizer (after step 21, the last Join's end)
    out, events = _watched(tmp_path, "join-drift")
    [f] = _findings(events)
    assert (f["id"], f["ranks"]) == ("PARAM_DESYNC", [0, 1]), out
    assert f["evidence"]["parameter"] == "0.bias" and f["step"] == 22
    # steps 20 and 21 were rank 0's shadow steps (lagging: not compared); 15-19 of the
    # third epoch were compared, and agreed
    assert f["evidence"]["last_agreeing_step"] == 19


@pytest.mark.timeout(150)
def test_rank_that_did_not_restore_the_optimizer_state_is_named(tmp_path):
    out, events = _watched(tmp_path, "resume-fresh")
    [f] = _findings(events)
    assert (f["id"], f["ranks"]) == ("PARAM_DESYNC", [1]), out
    assert f["title"].startswith("rank 1 did not resume the optimizer state (rank 1: "
                                 "optimizer step 1, resumed from 0, lr 0.01; rank 0: "
                                 "optimizer step 7, resumed from 6, lr 0.00125)")
    state = f["evidence"]["training_state"]
    assert state["0"]["resumed_from_step"] == 6 and state["1"]["resumed_from_step"] == 0


@pytest.mark.timeout(150)
def test_fsdp2_over_a_size_one_mesh_dimension_is_never_reduced(tmp_path):
    out, events = _watched(tmp_path, "fsdp2-solo")
    [f] = _findings(events)
    assert (f["id"], f["ranks"]) == ("PARAM_DESYNC", [0, 1]), out
    assert f["title"].startswith("gradients are never reduced across ranks: the "
                                 "parameters' DeviceMesh ('dp'=1) spans only its own rank")
    assert f["step"] == 1
