"""watch with no code change on ordinary DDP code (tests/fixtures/userjobs/ddp_accumulate.py,
under the watch bootstrap as `ddpdoctor run` starts it): steps are optimizer steps, so a
rank that skips a batch or accumulates more micro-batches is not a desync; uneven
accumulation is its own finding; BatchNorm buffers under broadcast_buffers=False are a
buffers-only desync that names both ranks (no majority on two replicas)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
from jobs import run_job

from ddpdoctor.watch.events import read_events

pytestmark = [pytest.mark.slow, pytest.mark.matrix]
ROOT = Path(__file__).resolve().parents[2]
JOB = ROOT / "tests" / "fixtures" / "userjobs" / "ddp_accumulate.py"
BOOTSTRAP = str(ROOT / "ddpdoctor" / "watch" / "bootstrap")


def _watched(tmp: Path, mode: str) -> tuple[str, list[dict]]:
    events = tmp / "events.jsonl"
    env = dict(os.environ, TMPDIR=str(tmp), PYTHONPATH=BOOTSTRAP, DDPDOCTOR_WATCH="1",
               DDPDOCTOR_WATCH_EVERY="1", DDPDOCTOR_EVENTS=str(events), OMP_NUM_THREADS="1")
    code, out = run_job([sys.executable, "-m", "torch.distributed.run", "--nproc-per-node",
                         "2", str(JOB), mode], timeout=90, env=env)
    assert code == 0 and "done 12 steps" in out, out
    return out, read_events(str(events)) if events.exists() else []


def _findings(events: list[dict]) -> list[tuple]:
    return [(e["id"], e["ranks"]) for e in events if e.get("kind") == "finding"]


@pytest.mark.timeout(120)
def test_skipped_first_batch_is_no_desync(tmp_path):
    # rank 1 runs one more forward than rank 0 (its first batch skipped before backward):
    # counted by forwards, the ranks were compared one step apart (PARAM_DESYNC, error)
    out, events = _watched(tmp_path, "skip-first")
    assert _findings(events) == [], out


@pytest.mark.timeout(120)
def test_uneven_accumulation_is_out_of_step_not_a_desync(tmp_path):
    out, events = _watched(tmp_path, "uneven-accum")
    found = [e for e in events if e.get("kind") == "finding"]
    assert [(e["id"], e["ranks"]) for e in found] == [("GRAD_ACCUM_OUT_OF_STEP", [0, 1])], out
    assert found[0]["evidence"]["micro_batches_per_step"] == {"0": 2, "1": 3}
    assert "accumulation out of step" in found[0]["title"]
    notes = [e["message"] for e in events if e.get("kind") == "note"]
    assert notes and "compared only after synchronised steps" in notes[0]


@pytest.mark.timeout(120)
def test_batchnorm_buffers_only_desync_names_both_ranks(tmp_path):
    out, events = _watched(tmp_path, "bn-buffers")
    [desync] = [e for e in events if e.get("id") == "PARAM_DESYNC"]
    assert desync["ranks"] == [0, 1], out
    ev = desync["evidence"]
    assert ev["differs"] == "buffers only" and ev["differing_parameters"] == []
    assert ev["differing_buffers"][0] == "1.running_mean"
    assert "SyncBatchNorm" in ev["fix"] and "no value is held by a majority" in ev["why both"]
    assert "buffers only" in desync["title"] and "neither replica" in desync["title"]
