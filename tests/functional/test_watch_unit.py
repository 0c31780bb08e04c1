"""ddpdoctor.watch: settings, event output, the pure analysis rules, and single-process
watching of plain modules (no process group: the cross-rank rules see one row)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.config import CHECKS, from_env, parse_checks
from ddpdoctor.watch.desync import Divergence, compare, diverged
from ddpdoctor.watch.device import local_mismatch, shared_devices
from ddpdoctor.watch.events import DDPDoctorWarning, EventSink, read_events
from ddpdoctor.watch.memory import growth, oom_kind, requested_bytes
from ddpdoctor.watch.nonfinite import GRADIENT, LOSS, OUTPUT, first_nonfinite
from ddpdoctor.watch.sampler import epoch_not_advanced
from ddpdoctor.watch.straggler import slow_ranks
from ddpdoctor.watch.unused import missing_grads

ROOT = Path(__file__).resolve().parents[2]
BOOTSTRAP = ROOT / "ddpdoctor" / "watch" / "bootstrap"


# ---- settings and events

def test_config_precedence_and_checks():
    env = {"DDPDOCTOR_WATCH_EVERY": "5", "DDPDOCTOR_WATCH_CHECKS": "-memory,-hang"}
    cfg = from_env(env)
    assert cfg.every == 5 and "memory" not in cfg.checks and "unused" in cfg.checks
    assert from_env(env, every=7).every == 7  # an explicit argument wins
    assert parse_checks("all") == CHECKS and parse_checks("none") == ()
    assert parse_checks("nonfinite,desync") == ("nonfinite", "desync")
    with pytest.raises(ValueError, match="unknown watch checks"):
        from_env({}, checks="nonfinite,bogus")
    with pytest.raises(ValueError, match="DDPDOCTOR_WATCH_EVERY"):
        from_env({"DDPDOCTOR_WATCH_EVERY": "x"})


def test_event_sink_warns_logs_and_writes_once(tmp_path):
    sink = EventSink(str(tmp_path / "ev-{rank}.jsonl"), rank=3)
    f = Finding("PARAM_DESYNC", "rank 3 differs", ranks=[3], evidence={"parameter": "w"})
    with pytest.warns(DDPDoctorWarning, match="PARAM_DESYNC"):
        assert sink.finding(f, step=7)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not sink.finding(f, step=8)  # the same id and ranks: dropped, no warning
    [ev] = read_events(str(tmp_path / "ev-3.jsonl"))
    assert (ev["kind"], ev["id"], ev["rank"], ev["step"], ev["ranks"]) == (
        "finding", "PARAM_DESYNC", 3, 7, [3])
    assert ev["evidence"]["parameter"] == "w" and ev["schema"] == "ddpdoctor.event/1"


# ---- pure rules

def test_first_nonfinite_names_the_rank_whose_loss_went_first():
    # rank 1's loss went NaN at step 3; the all-reduce made rank 0's grads NaN too
    assert first_nonfinite([(3, GRADIENT, 0), (3, LOSS, 0)]) == (3, LOSS, [1])
    assert first_nonfinite([(5, OUTPUT, 0), (4, GRADIENT, 2)]) == (4, GRADIENT, [1])
    assert first_nonfinite([(0, 0, -1), (0, 0, -1)]) is None


def test_diverged_majority_and_two_rank_tie():
    assert diverged([[1, 2, 3], [1, 9, 3], [1, 2, 3]], [0, 1, 2]) == ([1], 1)
    # two replicas that disagree: neither is the reference, both are named
    assert diverged([[1, 2], [1, 5]], [4, 5]) == ([4, 5], 1)
    d = compare([[1, 2], [1, 5]], [4, 5])
    assert d.no_majority and d.differing == [1]
    # 2-2: no majority either; 3-1: the odd one out only
    assert compare([[1], [1], [2], [2]], [0, 1, 2, 3]).ranks == [0, 1, 2, 3]
    assert compare([[1], [1], [1], [2]], [0, 1, 2, 3]) == Divergence([3], 0, [0], False)
    assert diverged([[1, 2], [1, 2]], [0, 1]) is None


def test_slow_ranks_straggler_and_data_bottleneck():
    fast = [(0.4, 0.001, 0.01)] * 6
    slow = [(0.4, 0.001, 0.31)] * 6
    [(fid, ranks, ev)] = slow_ranks({0: fast, 1: slow}, 0.02, 0.25, 0.6, 3, 0.3)
    assert (fid, ranks) == ("STRAGGLER", [1]) and ev["per_rank"]["1"]["slow_by_s"] == 0.3
    starving = [(0.4, 0.3, 0.01)] * 6
    [(fid, ranks, _)] = slow_ranks({0: fast, 1: starving, 2: fast}, 0.02, 0.25, 0.6, 3, 0.3)
    assert (fid, ranks) == ("DATALOADER_BOTTLENECK", [1])
    # without a DataLoader tap the "data" time is just the gap between steps: a straggler
    [(fid, ranks, _)] = slow_ranks({0: fast, 1: starving, 2: fast}, 0.02, 0.25, 0.6, 3, 0.3,
                                   loader_timed=set())
    assert (fid, ranks) == ("STRAGGLER", [1])
    # extra time in its own backward (hidden by DDP's overlapped all-reduce): said so
    backward = [(0.4, 0.001, 0.01, 0.3)] * 6
    [(fid, ranks, ev)] = slow_ranks({0: [(0.4, 0.001, 0.01, 0.01)] * 6, 1: backward,
                                     2: [(0.4, 0.001, 0.01, 0.02)] * 6}, 0.02, 0.25, 0.6, 3, 0.3)
    assert (fid, ranks) == ("STRAGGLER", [1])
    assert ev["per_rank"]["1"]["backward_slow_by_s"] == 0.285
    from ddpdoctor.watch.straggler import _where_slow

    assert "own backward" in _where_slow(ev["per_rank"], ranks)
    noisy = [(0.05, 0.001, 0.01 + 0.002 * (i % 2)) for i in range(8)]
    assert slow_ranks({0: noisy, 1: list(reversed(noisy))}, 0.02, 0.25, 0.6, 3, 0.3) == []
    assert slow_ranks({0: fast[:2], 1: slow[:2]}, 0.02, 0.25, 0.6, 3, 0.3) == []
    # a loaded host left rank 1 behind by ~23 ms in two of three 59 ms steps (CI beside a
    # 2-rank job, the healthy watch e2e run): two blips are no straggler; three in a row are
    steady = [(0.059, 0.0, 0.012, 0.010)] * 3
    blips = [(0.059, 0.0, 0.035, 0.022), (0.059, 0.0, 0.012, 0.010), (0.059, 0.0, 0.035, 0.022)]
    assert slow_ranks({0: steady, 1: blips}, 0.02, 0.25, 0.6, 3, 0.3) == []
    behind = [(0.059, 0.0, 0.035, 0.022)] * 3
    assert slow_ranks({0: steady, 1: behind}, 0.02, 0.25, 0.6, 3, 0.3)[0][:2] == \
        ("STRAGGLER", [1])
    # the defaults: a loaded host left a healthy rank 0 behind by ~30 ms of an 83 ms step
    # in 3 of a 4-step history (make test beside a 2-rank trainer): not judged; a rank slow
    # in 5 steps is
    from ddpdoctor.watch.config import WatchConfig

    cfg = WatchConfig()
    judge = (cfg.straggler_abs_s, cfg.straggler_rel, cfg.straggler_fraction,
             cfg.straggler_min_steps, cfg.data_share)
    calm, late = (0.083, 0.0, 0.012, 0.010), (0.083, 0.0, 0.042, 0.010)
    assert slow_ranks({0: [late, late, calm, late], 1: [calm] * 4}, *judge) == []
    assert slow_ranks({0: [late] * 5, 1: [calm] * 5}, *judge)[0][:2] == ("STRAGGLER", [0])


def test_memory_growth_rule():
    mb = 2**20
    leak = [(s, 400 * mb + 16 * mb * s) for s in range(3, 11)]
    ev = growth(leak, 64 * mb)
    assert ev and ev["mb_per_step"] == 16.0 and ev["from_step"] == 3
    flat = [(s, 400 * mb + (s % 2) * mb) for s in range(3, 11)]
    assert growth(flat, 64 * mb) is None
    # a leak under noise: the floor still rises at most samples
    noisy = [(s, 400 * mb + 16 * mb * s + (s % 3) * 4 * mb) for s in range(3, 11)]
    assert growth(noisy, 64 * mb)


def test_memory_given_back_is_not_growth():
    """Rank 1's RSS every 20 steps in a clean 200 ms-step job (bench_run_overhead.py,
    2026-11-26): high peaks, each given back. Before the floor rule this window read
    5/7 rising and +100 MB: a false MEMORY_GROWTH."""
    mb = 2**20
    series = [444, 488, 537, 489, 531, 467, 508, 544, 585, 630, 467]
    for start in range(len(series) - 7):
        window = [(20 * (start + i), series[start + i] * mb) for i in range(8)]
        assert growth(window, 64 * mb) is None, window
    # a sawtooth whose floor does not move, however high its teeth
    saw = [(20 * i, (400 + 60 * (i % 5)) * mb) for i in range(8)]
    assert growth(saw, 64 * mb) is None


def test_nonfinite_step_values_keep_no_small_tensors():
    """The per-step sums live in one buffer (a list of small tensors pinned the heap);
    rows of a skipped step are forgotten; the first non-finite row is found."""
    import torch

    from ddpdoctor.watch.nonfinite import GRADIENT, LOSS, OUTPUT, StepValues

    vals = StepValues(4)
    for step in range(1, 3):
        vals.append(step, OUTPUT, torch.tensor(1.0))
        vals.append(step, LOSS, torch.tensor(2.0, dtype=torch.bfloat16))
    buffer = vals.values
    vals.append(4, LOSS, torch.tensor(float("nan")))  # grows the buffer past 4 rows
    assert vals.values.numel() == 8 and buffer.data_ptr() != vals.values.data_ptr()
    vals.drop_step(4)  # a skipped optimizer step
    assert vals.last_step() == 2 and vals.first_nonfinite() is None and len(vals) == 0
    vals.append(5, LOSS, torch.tensor(1e300, dtype=torch.float64))  # finite in float64
    vals.append(6, GRADIENT, torch.tensor(float("inf")))
    vals.append(6, LOSS, torch.tensor(float("nan")))
    assert vals.first_nonfinite() == (6, GRADIENT)


def test_device_rules_and_small_rules():
    assert local_mismatch("cuda", 0, 1, visible=8) == "model on cuda:0 but LOCAL_RANK is 1"
    assert local_mismatch("cuda", 0, 1, visible=1) is None  # one GPU per process
    assert local_mismatch("cpu", None, 1, visible=0) is None
    assert shared_devices([(7, 0), (7, 0), (7, 1), (8, 0)]) == [[0, 1]]
    assert missing_grads(["a", "b", "c"], [True, True, False], {0}) == ["b"]
    assert epoch_not_advanced(0, 0) and not epoch_not_advanced(None, 0)
    assert not epoch_not_advanced(0, 1)


# ---- single-process watching of plain modules

def _train(steps: int, watched: bool, nan_at: int = 0, unused: bool = False, tmp=None,
           **settings):
    import torch
    from torch import nn

    import ddpdoctor

    class Net(nn.Sequential):
        def forward(self, x):  # `extra` is registered but never used
            return self[2](self[1](self[0](x)))

    torch.manual_seed(0)
    model = Net(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    if unused:
        model.extra = nn.Linear(4, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    data = torch.Generator().manual_seed(1)
    handle = None
    if watched:
        handle = ddpdoctor.watch(model, opt, every=1, events_path=str(tmp / "ev.jsonl"),
                                 **settings)
    losses = []
    for step in range(1, steps + 1):
        x = torch.randn(32, 8, generator=data)
        loss = model(x).pow(2).mean()
        if step == nan_at:
            loss = loss * float("nan")
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        losses.append(loss.item())
    return model, handle, losses


def test_plain_module_unchanged_and_quiet(tmp_path):
    _, _, base = _train(8, watched=False)
    with warnings.catch_warnings():
        warnings.simplefilter("error", DDPDoctorWarning)
        model, handle, watched = _train(8, watched=True, tmp=tmp_path)
    assert [x.hex() for x in base] == [x.hex() for x in watched]  # bitwise
    assert handle.findings == [] and handle.step == 8
    handle.close()
    assert not model._forward_pre_hooks and not model[2]._forward_hooks
    assert not (tmp_path / "ev.jsonl").exists()
    # what was watched, beside it (run's report names it)
    from ddpdoctor.core.attachment import read_all

    [attached] = read_all(str(tmp_path))
    assert (attached.rank, attached.wrapper, attached.how) == (0, "module", "watch()")


def test_plain_module_nan_and_unused(tmp_path):
    with pytest.warns(DDPDoctorWarning) as rec:
        _, handle, _ = _train(5, watched=True, nan_at=3, unused=True, tmp=tmp_path)
        handle.close()
    ids = {str(w.message).split()[1] for w in rec}
    assert ids == {"GRAD_NONFINITE", "DDP_UNUSED_PARAMETERS"}
    ev = {e["id"]: e for e in read_events(str(tmp_path / "ev.jsonl"))}
    nan = ev["GRAD_NONFINITE"]
    assert nan["ranks"] == [0] and nan["evidence"]["step"] == 3
    assert nan["evidence"]["source"].startswith("loss")
    un = ev["DDP_UNUSED_PARAMETERS"]
    assert un["evidence"]["parameters"] == ["extra.weight", "extra.bias"]
    assert un["step"] == 1 and un["ranks"] == [0]


def test_sampler_epoch_not_set_and_context_manager(tmp_path):
    import torch
    from torch import nn
    from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

    import ddpdoctor

    ds = TensorDataset(torch.randn(16, 4))
    loader = DataLoader(ds, batch_size=4, sampler=DistributedSampler(ds, num_replicas=2,
                                                                     rank=0, shuffle=True))
    model = nn.Linear(4, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.warns(DDPDoctorWarning, match="SAMPLER_EPOCH_NOT_SET"):
        with ddpdoctor.watch(model, opt, loader, events_path=str(tmp_path / "e.jsonl")) as w:
            for _epoch in range(2):  # set_epoch never called
                for (x,) in loader:
                    model(x).sum().backward()
                    opt.step()
                    opt.zero_grad()
    assert w.closed and "_get_iterator" not in vars(loader)
    [ev] = read_events(str(tmp_path / "e.jsonl"))
    assert ev["id"] == "SAMPLER_EPOCH_NOT_SET" and ev["step"] == 3 and ev["ranks"] == [0]


def test_memory_growth_on_a_leaking_loop(tmp_path):
    import torch

    keep = []
    with pytest.warns(DDPDoctorWarning, match="MEMORY_GROWTH"):
        model, handle, _ = _train(1, watched=True, tmp=tmp_path, memory_min_growth_mb=40,
                                  memory_window=6, checks="memory")
        opt = handle.optimizer
        for _ in range(10):
            keep.append(torch.ones(8 << 20 // 4 * 4))  # 32 MB kept every step
            model(torch.randn(2, 8)).sum().backward()
            opt.step()
        handle.close()
    [ev] = read_events(str(tmp_path / "ev.jsonl"))
    assert ev["id"] == "MEMORY_GROWTH" and ev["ranks"] == [0]
    assert ev["evidence"]["mb_per_step"] >= 25 and ev["evidence"]["largest_tensors"]


def _fp16_watched(tmp_path, **settings):
    """A small model, SGD, a CPU GradScaler and a nonfinite-only watch."""
    import torch
    from torch import nn

    import ddpdoctor

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**16)
    events = tmp_path / "ev.jsonl"
    handle = ddpdoctor.watch(model, opt, events_path=str(events), checks="nonfinite",
                             **settings)
    return model, opt, scaler, torch.randn(16, 4), handle, events


@pytest.mark.parametrize("by_output", [False, True])
def test_gradscaler_skipped_step_is_no_nonfinite_but_accumulated_nan_is(tmp_path, by_output):
    """fp16 training's routine overflow: GradScaler finds inf gradients, skips the
    optimizer step, lowers its scale; the gradients are cleared. Not a fault. A NaN in
    the first micro-batch of an accumulated step still is."""
    model, opt, scaler, x, handle, events = _fp16_watched(tmp_path, every=1,
                                                          nonfinite_output=by_output)
    for it in range(4):
        loss = model(x).pow(2).mean()
        if it == 1:
            loss = loss * float("inf")  # the scaled loss overflowed
        scaler.scale(loss).backward()
        scaler.step(opt)  # skipped when it == 1
        scaler.update()
        opt.zero_grad(set_to_none=True)
    assert handle.step == 3 and handle.checks[0].skipped == 1
    assert not events.exists()
    for micro in range(2):  # accumulation: two forwards, one optimizer step
        loss = model(x).pow(2).mean()
        (loss * float("nan") if micro == 0 else loss).backward()
    with pytest.warns(DDPDoctorWarning, match="GRAD_NONFINITE"):
        opt.step()
    handle.close()
    [ev] = read_events(str(events))
    assert ev["id"] == "GRAD_NONFINITE" and ev["evidence"]["step"] == 4


def test_straggler_packs_each_step_once_with_uneven_check_steps():
    """Check steps at 10, 50, 100 (early ones, then every 100): each pack holds the steps
    since the previous one, never a step twice."""
    import math
    from types import SimpleNamespace

    from ddpdoctor.watch.config import WatchConfig
    from ddpdoctor.watch.straggler import StragglerCheck

    w = SimpleNamespace(cfg=WatchConfig(), window=[], loaders=[])
    check = StragglerCheck()
    check.attach(w)
    packed = []
    for step in range(1, 101):
        w.window = (w.window + [(step, 0.1, 0.01, 0.02)])[-w.cfg.every:]
        if step in (10, 50, 100):
            row = check.pack(w, step).tolist()
            n = int(row[0])
            assert all(math.isnan(v) for v in row[2 + n:2 + check.k])
            packed.append(n)
    assert packed == [9, 40, 50]  # step 1 is warm-up; then 11-50 and 51-100


def test_oom_rules():
    cpu = RuntimeError("[enforce fail at alloc_cpu.cpp:127] err == 0. DefaultCPUAllocator: "
                       "can't allocate memory: you tried to allocate 4398046511104 bytes. "
                       "Error code 12 (Cannot allocate memory)")
    assert oom_kind(cpu) == "host" and requested_bytes(str(cpu)) == 4 << 40
    cuda = RuntimeError("CUDA out of memory. Tried to allocate 20.00 MiB. GPU 0 has a total "
                        "capacity of 79.11 GiB of which 3.19 MiB is free.")
    assert oom_kind(cuda) == "cuda" and requested_bytes(str(cuda)) == 20 << 20
    assert oom_kind(MemoryError()) == "host"
    assert oom_kind(RuntimeError("shape mismatch")) is None and oom_kind(ValueError()) is None


def test_oom_leaving_a_with_block_is_reported_and_raised(tmp_path):
    """The context-manager form sees the exception that leaves it: a real CPU allocator
    failure gives OOM with the memory evidence, and the exception still propagates."""
    import torch

    model, handle, _ = _train(2, watched=True, tmp=tmp_path, checks="memory")
    with pytest.warns(DDPDoctorWarning, match="OOM"), pytest.raises(RuntimeError,
                                                                    match="allocate memory"):
        with handle:
            torch.empty(1 << 50, dtype=torch.uint8)  # 1 PiB: the allocator refuses
    assert handle.closed
    [ev] = read_events(str(tmp_path / "ev.jsonl"))
    assert (ev["id"], ev["ranks"], ev["step"]) == ("OOM", [0], 3)
    e = ev["evidence"]
    assert e["kind"] == "host" and e["requested_mb"] == 2**30 and e["history_mb"][-1][0] == 3
    assert e["rss_mb"] > 0 and e["host_total_mb"] > 0 and e["largest_tensors"]
    # plan's view of the job rides along: this tiny model is below what plan models
    assert e["plan"]["skipped"].startswith("ddpdoctor plan cannot model this job")


def test_oom_plan_advice_names_the_strategy_that_fits():
    from torch import nn

    from ddpdoctor.watch.oom_plan import plan_advice, strategy_of

    assert strategy_of(nn.parallel.DistributedDataParallel.__new__(
        nn.parallel.DistributedDataParallel)) == "ddp"
    assert strategy_of(nn.Linear(2, 2)) == "ddp"
    advice = plan_advice(7_000_000_000, 8, "ddp", 80 << 30, "the GPU's total memory", "mixed")
    assert advice["fits"] == "zero1" and advice["capacity_of"] == "the GPU's total memory"
    assert advice["command"].startswith("ddpdoctor plan --params 7e+09 --nproc 8 --gpu-mem 80G")
    assert "--strategy zero1" in advice["fix"]
    assert float(advice["predicted_ddp_per_rank"].split()[0]) > 80  # ddp itself did not fit


def test_cuda_oom_observer_writes_the_snapshot_and_one_finding(tmp_path):
    """The CUDA path with a stand-in for torch's allocator hooks (no GPU here): the
    observer fires with the allocator's real arguments before the exception exists; the
    snapshot lands next to the events file; the exception that follows adds no repeat."""
    import pickle
    from types import SimpleNamespace

    _, handle, _ = _train(2, watched=True, tmp=tmp_path, checks="memory")
    [mem] = handle.checks
    seen = {}
    fake = SimpleNamespace(
        _C=SimpleNamespace(_cuda_attach_out_of_memory_observer=lambda fn: seen.update(fn=fn)),
        cuda=SimpleNamespace(memory=SimpleNamespace(_snapshot=lambda: {"segments": []})))
    mem._attach_oom(handle, fake)
    with pytest.warns(DDPDoctorWarning, match="CUDA out of memory on rank 0 in step 3"):
        seen["fn"](0, 2 << 30, 78 << 30, 1 << 30)  # device, asked, allocated, free
    err = RuntimeError("CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
                       "capacity of 79.10 GiB of which 1.00 GiB is free.")
    handle.exception(err)
    [ev] = read_events(str(tmp_path / "ev.jsonl"))
    e = ev["evidence"]
    assert (ev["id"], ev["ranks"], e["kind"], e["requested_mb"]) == ("OOM", [0], "cuda", 2048)
    assert e["gpu_free_mb"] == 1024 and e["device"] == 0 and e["history_mb"]
    assert pickle.loads(open(e["snapshot"], "rb").read()) == {"segments": []}
    handle.close()


# ---- import cost and the zero-code-change bootstrap

@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_import_ddpdoctor_and_watch_package_without_torch():
    code = ("import sys, ddpdoctor, ddpdoctor.watch; "
            "assert callable(ddpdoctor.watch) and ddpdoctor.DDPDoctorWarning; "
            "print('torch' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, cwd=ROOT)
    assert out.stdout.strip() == "False", out.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_bootstrap_chains_existing_sitecustomize_and_never_breaks(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (other / "sitecustomize.py").write_text("import os\nos.environ['CHAINED'] = 'yes'\n")
    code = ("import os, sys; from ddpdoctor.watch import autowatch; "
            "print(os.environ.get('CHAINED'), autowatch._installed.get('done'), "
            "'torch' in sys.modules)")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(BOOTSTRAP), str(other)]),
           "DDPDOCTOR_WATCH": "1"}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, env=env, cwd=tmp_path)
    assert out.stdout.split() == ["yes", "True", "False"], out.stderr
    # a broken shadowed sitecustomize is reported, the program still runs
    (other / "sitecustomize.py").write_text("raise RuntimeError('boom')\n")
    out = subprocess.run([sys.executable, "-c", "print('ran')"], capture_output=True,
                         text=True, timeout=60, env=env, cwd=tmp_path)
    assert out.stdout.strip() == "ran" and "boom" in out.stderr
    assert json.dumps  # keep the import used


@pytest.mark.parametrize("by_output, source", [
    (True, "model output (forward)"),
    (False, "loss or model output (the first gradient of the backward, 1.bias)")])
def test_nonfinite_source_and_huge_finite_gradients(tmp_path, by_output, source):
    """By default the signal is the first gradient of the backward (here the last layer's
    bias: the smallest of the first three). With nonfinite_output the output is summed
    too, and while the loop holds it (as nearly every loop does) a NaN made by the forward
    is named as such. Gradients of ~1e20 overflow the 2-norm used on check steps but are
    finite: no finding."""
    import torch
    from torch import nn

    import ddpdoctor

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.0)
    events = tmp_path / "ev.jsonl"
    handle = ddpdoctor.watch(model, opt, every=1, events_path=str(events), checks="nonfinite",
                             nonfinite_output=by_output)
    x = torch.randn(16, 4)
    for _ in range(2):
        out = model(x)
        (out.pow(2).mean() * 1e20).backward()  # gradients ~1e20: finite, 2-norm inf
        opt.step()
        opt.zero_grad(set_to_none=True)
    assert not events.exists()
    bad = x.clone()
    bad[3, 1] = float("nan")  # a bad sample: the forward makes the NaN
    out = model(bad)
    out.pow(2).mean().backward()
    with pytest.warns(DDPDoctorWarning, match="GRAD_NONFINITE"):
        opt.step()
    handle.close()
    [ev] = read_events(str(events))
    assert ev["id"] == "GRAD_NONFINITE" and ev["step"] == 3 and ev["ranks"] == [0]
    assert ev["evidence"]["source"] == source
    assert ev["evidence"]["parameter"] == "0.weight"  # the first non-finite in model order


# ---- the first gradient: the hot path without module hooks

def test_first_gradient_pick_prefers_the_small_tensor_near_the_loss():
    from ddpdoctor.watch.first_grad import pick

    # arrival order: head weight (huge), final norm (small), ..., repeats ignored
    assert pick([7, 6, 7, 5, 1, 0], numel=[10, 10, 10, 10, 10, 3, 64, 10**6]) == 5
    assert pick([2], numel=[1, 1, 4]) == 2


def test_hot_path_keeps_two_gradient_hooks_and_module_hooks_only_on_check_steps(tmp_path):
    """After the first backward two parameters keep one tensor hook each (the first
    gradient, and the last: the rank's own backward time) and the module hooks come off;
    they come back for the steps the straggler check times (the last
    ``straggler_samples`` before a check step) and for a check step's forward (the sampler
    fingerprints the input there). Only timed steps enter the window, with their data
    wait (a 30 ms sleep before each forward) measured."""
    import time

    import torch
    from torch import nn

    import ddpdoctor

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handle = ddpdoctor.watch(model, opt, every=4, early_checks=(), straggler_samples=2,
                             events_path=str(tmp_path / "ev.jsonl"))
    hooked_at_forward = []
    for _ in range(8):
        time.sleep(0.03)
        hooked_at_forward.append(bool(model._forward_pre_hooks))
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    # step 1 learns the model; then the 2 steps up to each check step (4 and 8)
    assert hooked_at_forward == [True, False, True, True, False, False, True, True]
    hooks = [len(p._backward_hooks or {}) for p in model.parameters()]
    assert sorted(hooks) == [0, 0, 1, 1] and model[2].bias._backward_hooks
    assert model[0].weight._backward_hooks or model[0].bias._backward_hooks  # the last
    # the emptied hook dicts are gone: autograd would still call into Python for them
    assert sum(p._backward_hooks is None for p in model.parameters()) == 2
    assert handle.first_grad.name == "2.bias"
    assert [t[0] for t in handle.window] == [3, 4, 7, 8]  # timed steps (the last `every`)
    assert min(t[2] for t in handle.window) >= 0.03  # data wait: the gap before forward
    assert all(t[4] > 0 for t in handle.window)  # its own backward, first gradient to last
    handle.close()
    assert all(not p._backward_hooks for p in model.parameters())
    assert not model._forward_pre_hooks and not model[2]._forward_hooks


def test_module_hooks_stay_when_a_check_needs_the_output(tmp_path):
    import torch
    from torch import nn

    import ddpdoctor

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handle = ddpdoctor.watch(model, opt, every=100, nonfinite_output=True,
                             events_path=str(tmp_path / "ev.jsonl"))
    for _ in range(3):
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        opt.zero_grad()
    assert model._forward_hooks and model._forward_pre_hooks
    handle.close()


@pytest.mark.parametrize("by_output", [False, True])
def test_gradscaler_skipping_every_step_is_nonfinite(tmp_path, by_output):
    """A loss that stays inf: GradScaler skips every optimizer step (its scale collapses),
    so no check step ever comes. After `nonfinite_skips` skips in a row: GRAD_NONFINITE for
    the whole job, once."""
    model, opt, scaler, x, handle, events = _fp16_watched(
        tmp_path, every=100, nonfinite_output=by_output, nonfinite_skips=5)
    with pytest.warns(DDPDoctorWarning, match="GRAD_NONFINITE"):
        for it in range(12):
            loss = model(x).pow(2).mean()
            if it >= 2:
                loss = loss * float("inf")  # from step 3 on, every step overflows
            scaler.scale(loss).backward()
            scaler.step(opt)
            scaler.update()
            opt.zero_grad(set_to_none=True)
    handle.close()
    assert handle.step == 2
    [ev] = read_events(str(events))
    assert ev["id"] == "GRAD_NONFINITE" and ev["ranks"] == []
    assert ev["evidence"]["skipped_in_a_row"] == 5 and ev["evidence"]["last_completed_step"] == 2


def _step(model, opt, x, nan: bool = False) -> None:
    loss = model(x).pow(2).mean()
    (loss * float("nan") if nan else loss).backward()
    opt.step()
    opt.zero_grad(set_to_none=True)


def _hook_count(model, opt) -> int:
    from torch.optim.optimizer import (
        _global_optimizer_post_hooks,
        _global_optimizer_pre_hooks,
    )

    return (sum(len(p._backward_hooks or {}) for p in model.parameters())
            + len(model._forward_pre_hooks) + sum(len(m._forward_hooks) for m in model.modules())
            + len(opt._optimizer_step_pre_hooks) + len(opt._optimizer_step_post_hooks)
            + len(_global_optimizer_pre_hooks) + len(_global_optimizer_post_hooks))


@pytest.mark.parametrize("give_optimizer", [True, False])
def test_pause_removes_every_hook_and_counts_nothing(tmp_path, give_optimizer):
    """Paused steps run with no hook of the watch at all (a NaN planted there is not seen
    and they are not counted); after resume the same checks see the next NaN, at the
    watched step number."""
    import torch
    from torch import nn

    import ddpdoctor

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    x = torch.randn(4, 8)
    before = _hook_count(model, opt)
    handle = ddpdoctor.watch(model, opt if give_optimizer else None, every=1,
                             events_path=str(tmp_path / "ev.jsonl"))
    for _ in range(3):
        _step(model, opt, x)
    hooked = _hook_count(model, opt)
    assert hooked > before and handle.step == 3
    with handle.paused():
        assert handle.is_paused and _hook_count(model, opt) == before
        with ddpdoctor.watch.paused():  # nests: still paused after the inner block
            _step(model, opt, x, nan=True)
        assert handle.is_paused and _hook_count(model, opt) == before
        _step(model, opt, x, nan=True)
    assert handle.step == 3 and handle.findings == [] and not handle.is_paused
    assert _hook_count(model, opt) == hooked
    with torch.no_grad():  # the NaN reached the weights while paused: start clean
        for p in model.parameters():
            p.copy_(torch.randn_like(p))
    _step(model, opt, x)
    with pytest.warns(DDPDoctorWarning, match="GRAD_NONFINITE"):
        _step(model, opt, x, nan=True)
    [nan] = [e for e in read_events(str(tmp_path / "ev.jsonl")) if e["id"] == "GRAD_NONFINITE"]
    assert nan["evidence"]["step"] == 5 and handle.step == 5
    handle.close()
    assert _hook_count(model, opt) == before
    assert all(p._backward_hooks is None for p in model.parameters())


def test_optimizer_given_after_the_model_counts_each_step_once(tmp_path):
    """``watch(model)`` (as ``ddpdoctor run`` does) then ``watch(model, opt)`` in the
    script: the global step hooks give way to the optimizer's own."""
    import torch
    from torch import nn

    import ddpdoctor

    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    handle = ddpdoctor.watch(model, events_path=str(tmp_path / "ev.jsonl"))
    assert ddpdoctor.watch(model, opt) is handle
    for _ in range(4):
        _step(model, opt, torch.randn(4, 8))
    assert handle.step == 4
    handle.close()
    assert _hook_count(model, opt) == 0


def test_hang_watchdog_waits_while_paused_and_heartbeat_says_so(tmp_path):
    import time

    import torch
    from torch import nn

    import ddpdoctor

    model = nn.Linear(8, 1)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    events, hb = tmp_path / "ev.jsonl", tmp_path / "hb" / "rank0.json"
    handle = ddpdoctor.watch(model, opt, events_path=str(events), hang_timeout_s=0.4,
                             heartbeat_interval_s=0.05, heartbeat_dir=str(hb.parent))
    for _ in range(2):
        _step(model, opt, torch.randn(4, 8))
    with ddpdoctor.watch.paused():  # an evaluation longer than the hang timeout
        time.sleep(1.2)
        assert json.loads(hb.read_text())["status"] == "paused"
    _step(model, opt, torch.randn(4, 8))
    time.sleep(0.2)
    stalls = lambda: [e for e in read_events(str(events)) if e["kind"] == "stall"]  # noqa: E731
    assert not events.exists() or stalls() == []
    assert json.loads(hb.read_text())["status"] == "running"
    time.sleep(1.2)  # the same wait unpaused is a stall
    assert [e["step"] for e in stalls()] == [4]
    handle.close()


def test_bit_sum_is_exact_and_layout_free():
    import torch

    from ddpdoctor.watch.base import bit_sum

    torch.manual_seed(0)
    for t in (torch.randn(64, 32), torch.randn(3), torch.randn(5)[1:5], torch.randn(6).half(),
              torch.randn(8, dtype=torch.complex64), torch.ones(5, dtype=torch.bool)):
        same = t.clone()
        assert int(bit_sum(t)) == int(bit_sum(same))
        raw = same.view(torch.uint8).view(-1)
        raw[-1] ^= 1  # one bit of the last element
        assert int(bit_sum(t)) != int(bit_sum(same)), t.dtype
    w = torch.randn(16, 8)
    assert int(bit_sum(w.t())) == int(bit_sum(w.t().contiguous()))  # layout-free
    assert int(bit_sum(w)) == int(bit_sum(w[torch.randperm(16)]))  # order-free


def test_steps_are_optimizer_steps_and_forwards_only_a_late_fallback():
    from ddpdoctor.watch.steps import FALLBACK_AFTER, StepCounter

    class FakeDDP:
        require_backward_grad_sync = True

    ddp = FakeDDP()
    c = StepCounter(ddp, counts_backward=True)
    # a skipped batch (forward, no backward) and a no_sync micro-batch: no boundary
    assert not c.forward_ends_step(optimizer_seen=False)
    c.on_forward()
    assert not c.forward_ends_step(optimizer_seen=False)
    c.on_forward()
    ddp.require_backward_grad_sync = False
    c.on_backward()
    ddp.require_backward_grad_sync = True
    c.on_forward()
    c.on_backward()
    shape = c.end_step()  # the optimizer's post-hook
    assert (shape.micro, shape.synced) == (2, True) and c.accumulates
    # no optimizer ever: after FALLBACK_AFTER forwards, a forward after a synced backward
    # ends the step; one after a skipped batch (no backward) does not
    for _ in range(FALLBACK_AFTER):
        c.forward_ends_step(optimizer_seen=False)
        c.on_forward()
        c.on_backward()
    assert c.fallback and c.forward_ends_step(optimizer_seen=False)
    c.on_forward()
    assert not c.forward_ends_step(optimizer_seen=False)
    # with an optimizer, never
    c.on_backward()
    assert not c.forward_ends_step(optimizer_seen=True)


def test_accumulation_out_of_step_needs_two_checks_and_names_the_odd_rank():
    from ddpdoctor.watch.accumulation import AccumulationCheck, odd_counts

    assert odd_counts([2, 2, 3], [0, 1, 2]) == [2]
    assert odd_counts([2, 3], [0, 1]) == [0, 1]  # no majority: both
    assert odd_counts([2, 2], [0, 1]) == []

    class Sink:
        def write(self, record, step):
            self.record = record

    class W:
        sink = Sink()

    check = AccumulationCheck()
    assert check.look(W, 10, [0, 1, 2], [2, 2, 3]) == []  # once could be a skipped batch
    [f] = check.look(W, 20, [0, 1, 2], [2, 2, 3])
    assert f.id == "GRAD_ACCUM_OUT_OF_STEP" and f.ranks == [2] and f.severity == "warning"
    assert f.evidence["micro_batches_per_step"] == {"0": 2, "1": 2, "2": 3}
    assert check.look(W, 30, [0, 1, 2], [2, 2, 3]) == []  # said once
    assert "compared only after synchronised steps" in W.sink.record["message"]


def test_the_first_gradient_hook_is_used_where_it_sees_the_ranks_own_gradient():
    """DDP and plain modules, and FSDP1's flat parameters (their tensor hook runs before
    FSDP's post-backward reduce-scatter); not FSDP1 with use_orig_params, FSDP2 or
    DTensor parameters."""
    import torch

    from ddpdoctor.watch.first_grad import FLAT_TAIL, FirstGradient, usable

    plain = [torch.nn.Parameter(torch.ones(3))]
    flat = torch.nn.Parameter(torch.ones(3))
    flat._is_flat_param = True  # what torch sets on every FSDP1 FlatParameter
    assert usable("ddp", plain) and usable("module", plain)
    assert usable("fsdp1", [flat]) and not usable("fsdp1", plain)  # use_orig_params=True
    assert not usable("fsdp2", plain) and not usable("ddp", [])

    class Local(torch.nn.Parameter):
        def to_local(self):
            return self

    assert not usable("module", [Local(torch.ones(2))])
    # a flat parameter's gradient is passed on as its last FLAT_TAIL elements
    seen = []
    big = torch.nn.Parameter(torch.zeros(FLAT_TAIL + 5))
    big._is_flat_param = True
    FirstGradient([("_flat_param", big)], seen.append, lambda fn: fn)
    (big * 2).sum().backward()
    assert len(seen) == 1 and seen[0].numel() == FLAT_TAIL and float(seen[0][0]) == 2.0
