"""Zero-code watching of loops that neither DDP nor fully_shard builds: the watch attaches
at the first step of the model's optimizer (watch/optim_attach.py), and replicas are
compared only where they started equal (watch/desync.py)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from run_helpers import PY, RunJob, findings, run_all

from ddpdoctor.core.attachment import Attachment
from ddpdoctor.run.watch_events import describe_attachments
from ddpdoctor.watch import optim_attach

# Its process-starting tests run in `make test-e2e` (docs/development.md, "Two tiers").
pytestmark = pytest.mark.matrix

LOOP = str(Path(__file__).parents[1] / "fixtures" / "userjobs" / "any_loop.py")


def _mlp():
    import torch

    return torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.Linear(4, 1))


def test_the_model_is_found_in_the_training_loops_frame():
    import torch

    model = _mlp()
    wrapper = torch.nn.Sequential(model)  # a wrapper in an outer frame holds the model
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    params = {id(p) for p in model.parameters()}

    def step_inside():
        other = _mlp()  # a module this optimizer does not train
        assert other is not None
        return optim_attach.find_model(opt, params, sys._getframe())

    assert step_inside() is wrapper  # the outermost module that holds the trained one
    assert optim_attach.find_model(opt, params, None) is None


def test_an_engine_that_holds_the_optimizer_is_the_model():
    """ZeRO keeps flat fp32 copies: the engine owns none of the optimizer's parameters,
    but holds the optimizer (inside its own optimizer wrapper)."""
    import torch

    class Zero:
        def __init__(self, inner):
            self.optimizer = inner

    class Engine(torch.nn.Module):
        def __init__(self, module, inner):
            super().__init__()
            self.module, self.optimizer = module, Zero(inner)

    flat = torch.zeros(5, requires_grad=True)
    opt = torch.optim.SGD([flat], lr=0.1)
    engine = Engine(_mlp(), opt)
    assert optim_attach.trains(engine, opt, {id(flat)})
    assert optim_attach.find_model(opt, {id(flat)}, sys._getframe()) is engine


def test_two_disjoint_models_are_not_guessed():
    a, b = _mlp(), _mlp()
    assert optim_attach.outermost([a, b]) is None
    assert optim_attach.outermost([a]) is a


def test_the_report_says_what_was_watched_or_that_nothing_was():
    assert describe_attachments([]).startswith("no model was watched")
    text = describe_attachments([Attachment(r, "Sequential", "module", "at X") for r in (0, 1, 2)])
    assert text == "watching Sequential (module, attached at X) on rank 0-2"


def test_replicas_are_compared_only_where_they_started_equal():
    from ddpdoctor.watch.desync import _HEAD, DesyncCheck

    d = DesyncCheck()
    d.tensors = [("a", None), ("b", None)]
    d.start = None
    assert d.replicas_at_start([0, 1]) == [True, True]
    d.start = [[0] * _HEAD + [5, 7], [0] * _HEAD + [5, 8], [0] * _HEAD + [5, 7]]
    assert d.replicas_at_start([0, 1]) == [True, False]
    assert d.replicas_at_start([0, 2]) == [True, True]


def _job(tmp: Path, name: str, *args: str, nproc: int = 2,
         run_args: tuple[str, ...] = ()) -> RunJob:
    cmd = [PY, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), LOOP, *args]
    return RunJob(name, tmp / name, cmd, ["--hang-timeout", "60", *run_args])


@pytest.fixture(scope="module")
def loops(tmp_path_factory):
    base = tmp_path_factory.mktemp("any-loop")
    jobs = {j.name: j for j in (
        _job(base, "drift", "handrolled", "drift", nproc=3),
        _job(base, "handrolled", "handrolled", run_args=("--profile", "10:5")),
        _job(base, "fsdp1-nan", "fsdp1", "nan"),
        _job(base, "fsdp1-orig", "fsdp1-orig"),
        _job(base, "stages", "stages"),
        _job(base, "recompile", "compiled", "recompile"),
        _job(base, "slowback", "ddp", "slowback"),
    )}
    run_all(list(jobs.values()), deadline_s=200)
    return jobs


def _watch_line(job: RunJob) -> str:
    return job.report()["probes"]["watch"]["summary"]


@pytest.mark.slow
@pytest.mark.timeout(260)
def test_hand_rolled_data_parallel_drift_names_the_rank(loops):
    job = loops["drift"]
    assert job.returncode == 0, job.output
    assert findings(job.report()) == [("PARAM_DESYNC", [1])], job.output
    assert "attached at the first step of its optimizer (AdamW)" in _watch_line(job)


@pytest.mark.slow
@pytest.mark.timeout(260)
@pytest.mark.parametrize("name", ["handrolled", "fsdp1-orig"])
def test_healthy_loops_are_watched_and_clean(loops, name):
    job = loops[name]
    assert job.returncode == 0, job.output
    assert findings(job.report()) == [], job.output
    wrapper = "fsdp1" if name.startswith("fsdp1") else "module"
    assert f"({wrapper}, attached at the first step of its optimizer" in _watch_line(job)


@pytest.mark.slow
@pytest.mark.timeout(260)
def test_fsdp1_nan_names_the_rank_and_its_shards_are_no_desync(loops):
    """FSDP1's FlatParameters (no use_orig_params): the watch reads each backward's
    first gradient on the flat parameter, before the reduce-scatter (first_grad.py)."""
    job = loops["fsdp1-nan"]
    report = job.report()
    assert findings(report) == [("GRAD_NONFINITE", [1])], job.output
    [f] = report["findings"]
    assert "first gradient of the backward" in json.dumps(f), f


@pytest.mark.slow
@pytest.mark.timeout(260)
def test_same_shaped_models_that_start_different_are_not_called_a_desync(loops):
    job = loops["stages"]
    assert job.returncode == 0, job.output
    assert findings(job.report()) == [], job.output
    line = _watch_line(job)
    assert "already differed across ranks 0,1 when the watch attached" in line, line


def test_findings_each_rank_made_alone_keep_the_earliest_step(tmp_path):
    """A NaN after the last check step: every rank says it at exit; the rank that had it
    first is named, the others are listed as later."""
    import json

    from ddpdoctor.run.watch_events import watch_findings

    lines = [{"kind": "finding", "id": "GRAD_NONFINITE", "rank": r, "step": s, "time": 1.0,
              "title": f"non-finite loss on rank {r} at step {s}", "ranks": [r],
              "severity": "error", "evidence": {"step": s, "scope": "rank"}}
             for r, s in ((0, 27), (1, 26), (2, 27))]
    path = tmp_path / "events.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    [f] = watch_findings(path)
    assert (f.id, f.ranks, f.evidence["ranks_later"]) == ("GRAD_NONFINITE", [1], [0, 2])


def test_ranks_meet_in_the_store_and_share_one_decision(monkeypatch):
    """Every rank that comes attaches with cross-rank checks; a rank that trains a model
    alone waits MEET_S once and watches locally, and so does any rank coming later."""
    import datetime
    import threading
    import types

    import torch.distributed as dist
    import torch.distributed.distributed_c10d as c10d

    store = dist.TCPStore("127.0.0.1", 0, 1, True, timeout=datetime.timedelta(seconds=10))
    monkeypatch.setattr(c10d, "_get_default_store", lambda: store)
    world2 = types.SimpleNamespace(get_world_size=lambda: 2)
    # both ranks come: each meets the other
    got: list[bool] = []
    threads = [threading.Thread(target=lambda: got.append(
        optim_attach.meet(world2, "Net-1", wait_s=20, meetings={}))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert got == [True, True]
    # rank 0 alone (an "earlier run" on rank 0): local, and a late rank reads the same
    assert optim_attach.meet(world2, "Net-2", wait_s=0.2, meetings={}) is False
    assert optim_attach.meet(world2, "Net-2", wait_s=0.2, meetings={}) is False


@pytest.mark.slow
@pytest.mark.timeout(260)
def test_a_rank_that_keeps_recompiling_is_the_straggler_and_the_cause_is_said(loops):
    job = loops["recompile"]
    assert job.returncode == 0, job.output
    report = job.report()
    assert findings(report) == [("STRAGGLER", [1])], job.output
    f = report["findings"][0]
    assert f["evidence"]["cause"] == "recompiling" and "recompiling" in f["title"], f


@pytest.mark.slow
@pytest.mark.timeout(260)
def test_run_profile_takes_a_window_on_every_rank(loops):
    """`run --profile 10:5`: every rank's trace in the run directory, its top operators
    and step split in the report, no code change."""
    job = loops["handrolled"]
    profile = job.report()["probes"]["profile"]
    assert "ranks 0-1 profiled steps 10-14" in profile["summary"], profile
    for rank in ("0", "1"):
        mine = profile["data"]["ranks"][rank]
        assert mine["top"] and mine["step_ms"] > 0, mine
        assert Path(mine["trace"]).is_file() and Path(mine["trace"]).parent == job.run_dir


def test_profile_window_parsing_and_top_operators():
    import types

    from ddpdoctor.core.profiled import parse_window
    from ddpdoctor.watch.profile import top_ops

    assert parse_window("20:5") == (20, 5)
    for bad in ("20", "0:5", "a:b", "5:0", ""):
        with pytest.raises(ValueError):
            parse_window(bad)
    evts = [types.SimpleNamespace(key="aten::addmm", count=10, self_cpu_time_total=5000.0,
                                  self_device_time_total=0.0),
            types.SimpleNamespace(key="aten::relu", count=10, self_cpu_time_total=200.0)]
    top = top_ops(evts, limit=1)
    assert [(o.name, o.calls, o.self_cpu_ms) for o in top] == [("aten::addmm", 10, 5.0)]


@pytest.mark.slow
@pytest.mark.timeout(260)
def test_a_rank_slow_in_its_own_backward_is_the_straggler(loops):
    """Its extra time is in the backward, which DDP's all-reduce overlaps: every rank's
    step is as slow, but only rank 1's own backward (first gradient to last) is."""
    job = loops["slowback"]
    assert job.returncode == 0, job.output
    report = job.report()
    assert findings(report) == [("STRAGGLER", [1])], job.output
    f = report["findings"][0]
    assert "own backward" in f["title"], f
    assert f["evidence"]["per_rank"]["1"]["backward_slow_by_s"] > 0.03, f
