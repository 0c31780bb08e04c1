"""The plan against the reference trainer: predicted vs measured bytes on every rank.

Two launches (all 2-rank strategies in one, tp-dp on 4 ranks), each measuring its last
step (DDPDOCTOR_TRAIN_MEMORY=1): the exact bytes of the parameter, gradient and
optimizer-state tensors each rank holds (local shards), and the peak of the step.
Model states must agree within 2%, the peak within 15%.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from jobs import run_job

from ddpdoctor.plan import PRECISIONS, Setup, from_preset
from ddpdoctor.plan.verify import STATES_TOLERANCE, TOTAL_TOLERANCE, compare, table

pytestmark = [pytest.mark.slow, pytest.mark.matrix]

TWO_RANK = ["ddp", "zero1", "zero2", "zero3", "fsdp", "tp", "pp"]
BATCH = 8


def _measure(tmp: Path, nproc: int, strategies: list[str]) -> dict[str, dict]:
    jlog = tmp / "train.jsonl"
    cmd = [sys.executable, "-m", "ddpdoctor", "train", "--nproc", str(nproc), "--strategy",
           ",".join(strategies), "--steps", "3", "--batch-size", str(BATCH),
           "--device", "cpu", "--json-log", str(jlog)]
    env = {**os.environ, "TMPDIR": str(tmp), "DDPDOCTOR_TRAIN_MEMORY": "1"}
    rc, out = run_job(cmd, 200, env=env, cwd=tmp)
    assert rc == 0, out[-3000:]
    recs = [json.loads(line) for line in jlog.read_text().splitlines()]
    return {r["strategy"]: r for r in recs if r["event"] == "summary"}


def _rows(summaries: dict[str, dict], strategies: list[str], nproc: int) -> list:
    shape = from_preset("tiny")
    # the trainer on CPU: fp32, single-tensor AdamW (no foreach temporaries)
    setup = Setup(world=nproc, precision=PRECISIONS["fp32"], batch_size=BATCH,
                  microbatches=2, schedule="gpipe", tp=2, margin=0.0, foreach=False)
    rows = []
    for name in strategies:
        measured = summaries[name]["rank_memory"]
        assert len(measured) == nproc
        rows += compare(name, shape, setup, measured)
    print(table(rows))
    return rows


def _check(summaries: dict[str, dict], strategies: list[str], nproc: int) -> None:
    for c in _rows(summaries, strategies, nproc):
        assert c.measured_states > 0 and c.measured_peak > 0
        assert abs(c.states_error) <= STATES_TOLERANCE, (c.strategy, c.rank, c.states_error)
        assert abs(c.total_error) <= TOTAL_TOLERANCE, (c.strategy, c.rank, c.total_error)


# A pipeline stage's peak holds the activations it received and has not yet used, and how
# many those are depends on how the two stages' steps interleave, which a loaded machine
# changes (pp's last stage: 2,223,264 bytes on every idle run, 2,023,328 once beside another
# job). Its model states are exact whatever the load; a peak off by more than the tolerance
# is measured once more, alone, before it counts as a miss.
_INTERLEAVED = {"pp"}


def test_two_rank_strategies_match_the_measurement(tmp_path: Path) -> None:
    summaries = _measure(tmp_path, 2, TWO_RANK)
    off = {c.strategy for c in _rows(summaries, TWO_RANK, 2)
           if abs(c.total_error) > TOTAL_TOLERANCE} & _INTERLEAVED
    for name in off:
        (tmp_path / name).mkdir()
        summaries[name] = _measure(tmp_path / name, 2, [name])[name]
    _check(summaries, TWO_RANK, 2)
    # what the shards are, independently of the plan: zero3 holds half of ddp's params
    ddp, z3 = summaries["ddp"]["rank_memory"][0], summaries["zero3"]["rank_memory"][0]
    assert z3["params_bytes"] == ddp["params_bytes"] / 2
    assert summaries["zero1"]["rank_memory"][0]["optimizer_bytes"] < ddp["optimizer_bytes"] * 0.6


def test_tp_dp_on_four_ranks_matches_the_measurement(tmp_path: Path) -> None:
    _check(_measure(tmp_path, 4, ["tp-dp"]), ["tp-dp"], 4)
