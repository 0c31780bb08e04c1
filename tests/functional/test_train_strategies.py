"""Every strategy trains on 2 CPU ranks (tp-dp on 4) and the data-parallel math is right.

One `ddpdoctor train` launch (through torchrun) trains all 2-rank strategies one after
another and saves checkpoints; a second launch resumes each from step 2; a third runs tp-dp
on 4 ranks. Losses are compared with a single process training on the same global batch.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import pytest
from jobs import run_job
from train_helpers import launch

pytestmark = [pytest.mark.slow, pytest.mark.matrix]

TWO_RANK = ["ddp", "fsdp", "zero1", "zero2", "zero3", "pp", "tp"]
DATA_PARALLEL = ["ddp", "fsdp", "zero1", "zero2", "zero3"]
STEPS = 4
COMMON = ["--steps", str(STEPS)]


def _records(path: Path, event: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        rec = json.loads(line)
        if rec["event"] == event:
            out.setdefault(rec["strategy"], []).append(rec)
    return out


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """All 2-rank strategies in one torchrun launch, checkpointing every 2 steps."""
    work = tmp_path_factory.mktemp("train_all")
    jlog, ckpt = work / "train.jsonl", work / "ckpt"
    cmd = [sys.executable, "-m", "ddpdoctor", "train", "--nproc", "2",
           "--strategy", ",".join(TWO_RANK), *COMMON, "--json-log", str(jlog),
           "--checkpoint-dir", str(ckpt), "--save-every", "2"]
    env = {**os.environ, "TMPDIR": str(work)}
    rc, text = run_job(cmd, 150, env=env, cwd=work)
    return {"rc": rc, "out": text, "steps": _records(jlog, "step"),
            "summary": _records(jlog, "summary"), "ckpt": ckpt, "work": work}


def test_cli_launch_exits_zero_and_logs_every_step(trained: dict) -> None:
    assert trained["rc"] == 0, trained["out"][-3000:]
    for name in TWO_RANK:
        assert [r["step"] for r in trained["steps"][name]] == list(range(1, STEPS + 1))
        assert f"[{name}] summary: {STEPS} steps" in trained["out"]
    assert "tok/s" in trained["out"] and "peak" in trained["out"]


@pytest.mark.parametrize("name", TWO_RANK)
def test_loss_goes_down(trained: dict, name: str) -> None:
    summary = trained["summary"][name][0]
    assert summary["loss_down"], summary
    assert summary["final_loss"] < summary["first_loss"] - 0.05


def _reference(dp_world: int, steps: int = STEPS) -> list[float]:
    from ddpdoctor.train.options import configs, worker_parser

    mcfg, rcfg = configs(vars(worker_parser().parse_args(["--steps", str(steps)])))
    from ddpdoctor.train.reference import reference_losses

    return reference_losses(mcfg, rcfg, dp_world)


@pytest.fixture(scope="module")
def reference() -> dict[int, list[float]]:
    return {1: _reference(1), 2: _reference(2)}


@pytest.mark.parametrize("name", TWO_RANK)
def test_losses_match_single_process_on_global_batch(trained: dict, reference: dict,
                                                     name: str) -> None:
    # data-parallel ranks read disjoint shards: the global batch is both ranks' samples;
    # pp and tp ranks read the same batch, so the reference is one process on that batch
    ref = reference[2 if name in DATA_PARALLEL else 1]
    got = [r["loss"] for r in trained["steps"][name]]
    assert got == pytest.approx(ref, rel=1e-5, abs=1e-5), (name, got, ref)
    if name in DATA_PARALLEL:
        # and the ranks did see different data (the loss is a mean of different losses)
        assert all(len(set(r["rank_loss"])) == 2 for r in trained["steps"][name])


@pytest.fixture(scope="module")
def resumed(trained: dict) -> dict:
    """Drop the step-4 checkpoints and resume every strategy from step 2."""
    ckpt = trained["ckpt"]
    for name in TWO_RANK:
        assert (ckpt / name / "step-2" / ".metadata").exists(), name
        shutil.rmtree(ckpt / name / f"step-{STEPS}")
    with launch(["--strategy", ",".join(TWO_RANK), *COMMON, "--checkpoint-dir", str(ckpt),
                 "--resume"], 2, trained["work"] / "resume") as run:
        codes = run.wait(150)
        assert codes == [0, 0], run.all_output()[-3000:]
        steps = {}
        for rec in run.records():
            steps.setdefault(rec["strategy"], []).append(rec)
        return {"steps": steps, "out": run.output(0)}


@pytest.mark.parametrize("name", TWO_RANK)
def test_resume_gives_the_same_next_losses(trained: dict, resumed: dict, name: str) -> None:
    assert f"[{name}] resumed from step 2" in resumed["out"]
    after = [(r["step"], r["loss"]) for r in resumed["steps"][name]]
    before = [(r["step"], r["loss"]) for r in trained["steps"][name] if r["step"] > 2]
    assert [s for s, _ in after] == [3, 4]
    assert [loss for _, loss in after] == pytest.approx([loss for _, loss in before],
                                                         rel=1e-6, abs=1e-6)


@pytest.mark.timeout(150)
def test_tp_dp_on_four_ranks(tmp_path: Path, reference: dict) -> None:
    with launch(["--strategy", "tp-dp", *COMMON], 4, tmp_path) as run:
        codes = run.wait(120)
        assert codes == [0, 0, 0, 0], run.all_output()[-3000:]
        steps = run.records()
        summary = run.records("summary")[0]
    assert summary["loss_down"]
    # 2 data-parallel groups of 2 TP ranks: the global batch is the two groups' shards
    assert [r["loss"] for r in steps] == pytest.approx(reference[2], rel=1e-5, abs=1e-5)
