"""ddpdoctor.watch end to end: the reference trainer on 2 CPU ranks with planted faults.

Few launches, each checking several things through the JSON events file (every rank
appends to it). ``DDPDOCTOR_WATCH_EVERY=1`` runs the cross-rank checks every step.
"""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest
from train_helpers import launch

from ddpdoctor.watch.events import read_events

pytestmark = pytest.mark.slow
BOOTSTRAP = str(Path(__file__).resolve().parents[2] / "ddpdoctor" / "watch" / "bootstrap")


def _run(tmp: Path, args: list[str], env: dict | None = None, timeout: float = 90):
    events = tmp / "events.jsonl"
    env = {"DDPDOCTOR_WATCH_EVERY": "1", "DDPDOCTOR_EVENTS": str(events), **(env or {})}
    with launch(args, 2, tmp, env=env) as run:
        codes = run.wait(timeout)
        out = run.all_output()
        records = run.records()
    found = read_events(str(events)) if events.exists() else []
    return codes, out, records, found


def _one(events: list[dict], fid: str) -> list[dict]:
    return [e for e in events if e.get("id") == fid]


def _losses(records: list[dict]) -> list[tuple]:
    return [(r["strategy"], r["step"], [float(x).hex() for x in r["rank_loss"]])
            for r in records]


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("base")
    return _run(tmp, ["--strategy", "ddp,fsdp", "--steps", "5"], env={"DDPDOCTOR_EVENTS": ""})


@pytest.mark.timeout(200)
def test_training_bitwise_unchanged_and_quiet(baseline, tmp_path):
    codes, out, records, events = _run(
        tmp_path, ["--strategy", "ddp,fsdp", "--steps", "5", "--watch"],
        env={"DDPDOCTOR_HEARTBEAT_DIR": str(tmp_path / "hb")})
    assert codes == [0, 0] and baseline[0] == [0, 0], out
    assert len(records) == 10
    assert _losses(records) == _losses(baseline[2])  # DDP and FSDP2, every rank, bitwise
    assert events == [] and "DDPDoctorWarning" not in out
    beat = json.loads((tmp_path / "hb" / "rank1.json").read_text())
    assert beat["rank"] == 1 and beat["step"] == 5 and beat["status"] == "closed"


@pytest.mark.timeout(120)
def test_desync_straggler_memory_growth(tmp_path):
    codes, out, _, events = _run(tmp_path, [
        "--strategy", "ddp", "--steps", "12", "--watch", "--inject", "desync@1:3",
        "--inject", "straggler@1:1", "--inject", "leak@0:1", "--inject", "no-set-epoch",
        "--dataset-size", "64"])  # 4 steps per epoch: epochs start at steps 1, 5, 9
    assert codes == [0, 0], out
    [desync] = _one(events, "PARAM_DESYNC")
    # two replicas that disagree: no majority says which drifted, both are named
    assert desync["ranks"] == [0, 1] and desync["step"] == 3
    assert desync["evidence"]["differs"] == "parameters" and desync["evidence"]["why both"]
    assert desync["evidence"]["last_agreeing_step"] == 2 and desync["evidence"]["parameter"]
    [slow] = _one(events, "STRAGGLER")
    assert slow["ranks"] == [1] and slow["evidence"]["per_rank"]["1"]["slow_by_s"] > 0.25
    [leak] = _one(events, "MEMORY_GROWTH")
    assert leak["ranks"] == [0] and leak["rank"] == 0 and leak["evidence"]["mb_per_step"] >= 16
    epoch = _one(events, "SAMPLER_EPOCH_NOT_SET")  # the 2nd epoch starts at step 5
    assert sorted(e["rank"] for e in epoch) == [0, 1] and {e["step"] for e in epoch} == {5}
    assert {e["id"] for e in events} == {"PARAM_DESYNC", "STRAGGLER", "MEMORY_GROWTH",
                                         "SAMPLER_EPOCH_NOT_SET"}


@pytest.mark.timeout(120)
def test_slow_data_and_find_unused_overhead(tmp_path):
    codes, out, _, events = _run(tmp_path, [
        "--strategy", "ddp", "--steps", "8", "--watch", "--find-unused",
        "--inject", "slow-data@1"])
    assert codes == [0, 0], out
    waits = _one(events, "DATALOADER_BOTTLENECK")
    assert waits and all(e["ranks"] == [1] for e in waits)
    assert waits[0]["evidence"]["data_share"]["1"] > 0.3
    overhead = _one(events, "DDP_FIND_UNUSED_OVERHEAD")
    assert sorted(e["rank"] for e in overhead) == [0, 1]
    assert {e["id"] for e in events} == {"DATALOADER_BOTTLENECK", "DDP_FIND_UNUSED_OVERHEAD"}


@pytest.mark.timeout(120)
def test_zero_code_change_nan_and_missing_sampler(tmp_path):
    # no --watch: the bootstrap sitecustomize wraps DistributedDataParallel
    codes, out, _, events = _run(
        tmp_path, ["--strategy", "ddp", "--steps", "5", "--inject", "nan@1:3",
                   "--inject", "no-sampler"],
        env={"PYTHONPATH": BOOTSTRAP, "DDPDOCTOR_WATCH": "1"})
    assert codes == [0, 0], out
    [nan] = _one(events, "GRAD_NONFINITE")
    assert nan["ranks"] == [1] and nan["step"] == 3
    assert nan["evidence"]["source"].startswith("loss") and nan["evidence"]["parameter"]
    [same] = _one(events, "SAMPLER_MISSING")
    assert same["ranks"] == [0, 1] and same["step"] == 1
    assert same["evidence"]["samplers"] == ["RandomSampler"]
    assert "DDPDoctorWarning: ddpdoctor GRAD_NONFINITE" in out


@pytest.mark.timeout(120)
def test_unused_parameters_named_before_ddp_fails(tmp_path):
    codes, out, _, events = _run(tmp_path, [
        "--strategy", "ddp", "--steps", "3", "--watch", "--inject", "unused-param"])
    assert "Expected to have finished reduction" in out and set(codes) != {0}
    unused = _one(events, "DDP_UNUSED_PARAMETERS")
    assert sorted(e["rank"] for e in unused) == [0, 1]
    for e in unused:
        assert e["ranks"] == [e["rank"]] and e["step"] == 1
        assert e["evidence"]["parameters"] == ["unused_head.weight", "unused_head.bias"]


@pytest.mark.timeout(120)
def test_hang_watchdog_stacks_and_flight_recorder_on_signal(tmp_path):
    fr = tmp_path / "fr"
    events = tmp_path / "events.jsonl"
    env = {"DDPDOCTOR_EVENTS": str(events), "DDPDOCTOR_HANG_TIMEOUT": "2",
           "DDPDOCTOR_FR_DIR": str(fr), "DDPDOCTOR_HEARTBEAT_DIR": str(tmp_path / "hb")}
    with launch(["--strategy", "ddp", "--steps", "5", "--watch", "--inject",
                 "hang-compute@1:2"], 2, tmp_path, env=env) as run:
        deadline = time.monotonic() + 60
        stalls: list[dict] = []
        while time.monotonic() < deadline and len(stalls) < 2:
            time.sleep(0.5)
            if events.exists():
                stalls = [e for e in read_events(str(events)) if e["kind"] == "stall"]
        assert sorted(e["rank"] for e in stalls) == [0, 1], run.all_output()
        for pid in run.pids:
            os.kill(pid, signal.SIGUSR2)
        for r in (0, 1):
            path = fr / f"ddpdoctor-fr-rank{r}.json"
            while time.monotonic() < deadline and not path.exists():
                time.sleep(0.2)
            trace = json.loads(path.read_text())
            assert trace.get("entries"), trace.keys()
        # attach's way: the file contract (no signal, so unwatched ranks are never hurt)
        from ddpdoctor.attach.flight_recorder import (
            collect_dumps,
            request_dumps,
            serving_ranks,
        )

        assert serving_ranks(str(fr), dict(enumerate(run.pids))) == [0, 1]
        since = request_dumps(str(fr))
        traces, problems = collect_dumps(str(fr), [0, 1], since, timeout=30)
        assert sorted(traces) == [0, 1], problems
        assert run.alive() == [True, True]  # neither way disturbed the ranks
    stuck = (fr / "ddpdoctor-stacks-rank1.txt").read_text()
    assert "_compute_forever" in stuck and all(e["step"] == 2 for e in stalls)
    beat = json.loads((tmp_path / "hb" / "rank1.json").read_text())
    assert beat["status"] == "stalled" and beat["step"] == 1


@pytest.mark.timeout(120)
def test_host_oom_names_rank_step_and_memory(tmp_path):
    """A real CPU allocator failure in rank 1's forward at step 3: the watch reports it
    from the exception on its way out, with the memory the rank had and the host had."""
    codes, out, _, events = _run(tmp_path, ["--strategy", "ddp", "--steps", "6", "--watch",
                                            "--inject", "oom@1:3"])
    assert codes[1] == 1 and "can't allocate memory" in out, out
    [oom] = _one(events, "OOM")
    assert (oom["ranks"], oom["rank"], oom["step"]) == ([1], 1, 3)
    ev = oom["evidence"]
    assert ev["kind"] == "host" and "DefaultCPUAllocator" in ev["error"]
    assert ev["requested_mb"] > ev["host_total_mb"] >= ev["host_available_mb"] > 0
    assert [s for s, _ in ev["history_mb"]] == [1, 2, 3]  # sampled every step here
    assert all(t["mb"] < 1 for t in ev["largest_tensors"])  # not the watch's own buffers


@pytest.mark.timeout(120)
def test_pause_on_every_rank_keeps_them_in_step_and_is_no_stall(tmp_path):
    """A 1.5 s evaluation, paused, under a 0.5 s hang timeout: no stall; the ranks' watched
    steps stay equal, so the gathers after it still line up and see rank 1's drift at
    step 4 (the paused forwards are not steps; two replicas: both are named)."""
    from ddpdoctor.check.launcher import launch as launch_fn

    import launch_fns

    events = tmp_path / "ev.jsonl"
    res = launch_fn(launch_fns.watched_pause, nproc=2, args=(str(events),), backend="gloo",
                 deadline_s=90)
    assert res.ok, res
    values = res.values()
    assert [values[r]["step"] for r in (0, 1)] == [6, 6]
    assert values[0]["findings"] == [("PARAM_DESYNC", [0, 1], 4)]
    assert [e for e in read_events(str(events)) if e["kind"] == "stall"] == []
