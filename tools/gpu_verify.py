"""Run every CUDA / NCCL / NVML path of ddpdoctor on one real GPU and record what happened.

    python tools/gpu_verify.py [--out gpu-verify] [--deadline 480] [--only a,b] [--list]
    make gpu-verify [GPU_PYTHON=python3] [GPU_VERIFY_DEADLINE=480] [GPU_VERIFY_OUT=gpu-verify]

Issue #30: a GPU machine is lent to some sessions only, for about 15 minutes. This script
spends one short run there. Each step has a hard deadline (its commands are killed with
their whole process group), a failing step is recorded and the next runs, and the whole
run stays inside ``--deadline``. Without a GPU the env step still runs and every GPU step
says "skipped: no GPU (why)"; the exit code is 0 then. With a GPU: 0 when no step failed,
1 otherwise. It writes OUT/RESULT.md, OUT/result.json and each command's output under
OUT/work/. The tool is not part of the wheel (setup.py packages ddpdoctor/ only).

ddpdoctor must be installed in the interpreter that runs this (``-m ddpdoctor`` is
started from OUT/work, never from the repository root, so the installed package with its
playbooks is what runs). docs/development.md says how to run it on a lent machine.
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import shutil
import sys
import time
from datetime import datetime, timezone
from pathlib import Path

# tools/ is no package (nothing here goes into the wheel): its sibling module is found
# through sys.path, also when this file is loaded by path in the tests.
sys.path.insert(0, str(Path(__file__).resolve().parent))

from gpu_verify_core import (
    FAIL,
    Session,
    Step,
    StepContext,
    StepFailed,
    bench_numbers,
    compare_nvml_smi,
    error_lines,
    finding,
    findings_in_events,
    jsonl,
    losses,
    result_json,
    run_steps,
    summaries,
    write_results,
)

DUPLICATE_GPU = "Duplicate GPU detected"
ONE_GPU_STRATEGIES = ("ddp", "fsdp", "zero1", "zero2", "zero3")
TWO_RANK_DEVICE = "cuda:0"  # both ranks on GPU 0 (the dry run of the script itself: cpu)
# The overhead job: ~20 ms steps on an H200; 200 of them pass two default check steps
# (100, 200) and the early ones (10, 50)
OVERHEAD_ARGS = ("--steps", "200", "--size", "small", "--seed", "1")
# ~20 ms steps on an H200 (1.0010 there, docs/gpu-verified.md), ~45 s for 2,200 of them
BENCH_ARGS = ("--dim", "4096", "--layers", "8", "--batch", "1024", "--steps", "2000",
              "--warmup", "200")
ROOT = Path(__file__).resolve().parent.parent

# cuBLAS workspaces as the caching allocator sees them (the way torch's own
# test_cublas_workspace_explicit_allocation measures them): a product on this thread, one
# on another thread (autograd's backward runs on its own), a backward
WORKSPACE_SNIPPET = r"""
import json, os, threading, torch
d = {"capability": list(torch.cuda.get_device_capability()),
     "env": {k: os.environ.get(k) for k in ("CUBLAS_WORKSPACE_CONFIG",
                                            "CUBLASLT_WORKSPACE_SIZE")}}
def active():
    torch.cuda.synchronize()
    return torch.cuda.memory_stats()["active_bytes.all.allocated"]
a = torch.randn(64, 64, device="cuda")
base = active()
with torch.no_grad():
    c = a @ a
del c
d["first_thread"] = active() - base
base = active()
def other():
    with torch.no_grad():
        c = a @ a
t = threading.Thread(target=other); t.start(); t.join()
d["second_thread"] = active() - base
w = torch.randn(64, 64, device="cuda", requires_grad=True)
x = torch.randn(64, 64, device="cuda")
base = active()
(x @ w).sum().backward()
w.grad = None
d["backward"] = active() - base
base = active()
with torch.autocast("cuda", dtype=torch.bfloat16):
    c = x @ w
del c
d["bf16"] = active() - base
print(json.dumps(d))
"""

# What the env step learns, in one interpreter start (torch's import is the slow part).
FACTS_SNIPPET = r"""
import json, platform
d = {"python": platform.python_version()}
try:
    import importlib.resources as r, ddpdoctor
    d["ddpdoctor"] = ddpdoctor.__file__
    d["playbooks"] = r.files("ddpdoctor.playbooks").joinpath("OOM.md").is_file()
except Exception as e:
    d["ddpdoctor_error"] = f"{type(e).__name__}: {e}"
import torch
d["torch"] = torch.__version__
d["cuda"] = torch.version.cuda
d["cuda_available"] = torch.cuda.is_available()
if d["cuda_available"]:
    d["device_count"] = torch.cuda.device_count()
    p = torch.cuda.get_device_properties(0)
    d["device"] = p.name
    d["capability"] = f"{p.major}.{p.minor}"
    d["gpu_memory_mib"] = p.total_memory // 2**20
    d["bf16"] = torch.cuda.is_bf16_supported()
    try:
        d["nccl"] = ".".join(map(str, torch.cuda.nccl.version()))
    except Exception as e:
        d["nccl"] = f"unknown ({e})"
try:
    import pynvml
    pynvml.nvmlInit()
    v = pynvml.nvmlSystemGetDriverVersion()
    d["driver"] = v.decode() if isinstance(v, bytes) else v
    pynvml.nvmlShutdown()
except Exception as e:
    d["nvml_error"] = f"{type(e).__name__}: {e}"
print(json.dumps(d))
"""

NVML_SNIPPET = r"""
import json
import os
from ddpdoctor.nvml.reader import read_snapshot
print(json.dumps(read_snapshot().to_dict(), default=str))
"""

# Two ranks on GPU 0. gloo carries CUDA tensors (staged through the host); NCCL refuses two
# ranks on one device ("Duplicate GPU detected"): that text goes to the knowledge base. The
# watch wraps the model so its GPU_DEVICE_MAPPING check sees both ranks on one GPU.
TWO_RANK_SCRIPT = r"""
import datetime, os, sys, torch, torch.distributed as dist
backend, events, dev = sys.argv[1], sys.argv[2], torch.device(sys.argv[3])
dist.init_process_group(backend, timeout=datetime.timedelta(seconds=30),
                        device_id=dev if backend == "nccl" else None)
rank = dist.get_rank()
if dev.type == "cuda":
    torch.cuda.set_device(dev)
model = torch.nn.Linear(64, 64).to(dev)
model = torch.nn.parallel.DistributedDataParallel(
    model, device_ids=[dev.index] if dev.type == "cuda" else None)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
import ddpdoctor
with ddpdoctor.watch(model, opt, events_path=events):
    for _ in range(4):
        model(torch.randn(8, 64, device=dev)).sum().backward()
        opt.step(); opt.zero_grad()
t = torch.full((1024,), float(rank + 1), device=dev)
dist.all_reduce(t)
print(f"rank {rank}: all_reduce on {t.device} -> {t[0].item():g} (expect 3)", flush=True)
dist.destroy_process_group()
"""


def ddpdoctor(ctx: StepContext, *args: str) -> list[str]:
    return [ctx.session.python, "-m", "ddpdoctor", *args]


def torchrun(ctx: StepContext, nproc: int, *args: str) -> list[str]:
    return [ctx.session.python, "-m", "torch.distributed.run", "--standalone",
            f"--nproc-per-node={nproc}", *args]


def fresh_events(ctx: StepContext, folder: str) -> Path:
    """An empty folder for one watched run (events file, series file, OOM snapshot): a
    rerun must not read an earlier run's findings."""
    shutil.rmtree(ctx.session.out / folder, ignore_errors=True)
    return ctx.path(f"{folder}/events.jsonl")


def last_line(text: str) -> str:
    """A traceback's last line: the exception, which is what a reason should say."""
    lines = [x for x in text.strip().splitlines() if x.strip()]
    return lines[-1].strip()[:300] if lines else "no output"


def tail(text: str, n: int = 600) -> str:
    return text.strip()[-n:]


# --- steps ---------------------------------------------------------------------------


def step_env(ctx: StepContext) -> None:
    """Versions, the device, and whether the GPU steps can run at all (no GPU needed)."""
    s = ctx.session
    s.facts.update(date=datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                   host_python=platform.python_version(), python_executable=s.python)
    smi = shutil.which("nvidia-smi")
    if smi:
        q = ctx.run([smi, "--query-gpu=name,driver_version,memory.total",
                     "--format=csv,noheader"], timeout=30, log="nvidia-smi-query")
        s.facts["nvidia_smi"] = q.stdout.strip() or tail(q.stderr)
    r = ctx.run([s.python, "-c", FACTS_SNIPPET], timeout=90, log="facts")
    if r.rc != 0:
        s.gpu_missing = f"{s.python} could not import torch ({last_line(r.stderr)})"
        raise StepFailed(s.gpu_missing)
    facts = json.loads(r.stdout.strip().splitlines()[-1])
    s.facts.update(facts)
    ctx.numbers.update({k: facts.get(k) for k in ("torch", "cuda", "nccl", "device",
                                                  "driver", "gpu_memory_mib")})
    if facts.get("cuda_available"):
        s.gpu_missing = None
    else:
        s.gpu_missing = (f"torch.cuda.is_available() is False (torch {facts['torch']}, "
                         f"CUDA {facts.get('cuda') or '-'}; nvidia-smi "
                         f"{'present' if smi else 'not found'}; "
                         f"NVML: {facts.get('nvml_error') or 'ok'})")
    if "ddpdoctor_error" in facts or not facts.get("playbooks"):
        raise StepFailed("ddpdoctor is not installed with its playbooks in "
                         f"{s.python}: {facts.get('ddpdoctor_error', 'OOM.md missing')} "
                         "(pip install . — see docs/development.md)")


def step_check_nccl(ctx: StepContext) -> None:
    """`check --backend nccl --nproc 1` and NVML, against nvidia-smi in the same run."""
    smi = shutil.which("nvidia-smi")
    if smi:
        q = ctx.run([smi, "-q"], timeout=30, log="nvidia-smi-q")
        ctx.path("nvidia-smi-q.txt").write_text(q.stdout)
        t = ctx.run([smi, "topo", "-m"], timeout=30, log="nvidia-smi-topo")
        ctx.path("nvidia-smi-topo.txt").write_text(t.stdout + t.stderr)
    n = ctx.run([ctx.session.python, "-c", NVML_SNIPPET], timeout=60, log="nvml")
    if n.rc != 0:
        raise StepFailed(f"NVML read failed: {last_line(n.stderr)}")
    nvml = json.loads(n.stdout.strip().splitlines()[-1])
    ctx.path("nvml.json").write_text(json.dumps(nvml, indent=1))
    dev = (nvml.get("devices") or [{}])[0]
    ctx.numbers.update(clock_event_names=dev.get("clock_event_names"),
                       sm_clock_mhz=dev.get("sm_clock_mhz"), ecc=dev.get("ecc_mode_current"),
                       nvml_errors=len(dev.get("errors") or {}))
    mismatch = []
    if smi:
        cmp = compare_nvml_smi(nvml, ctx.path("nvidia-smi-q.txt").read_text())
        ctx.numbers["nvml_vs_smi"] = cmp
        mismatch = [k for k, v in cmp.items() if v["match"] is False]
    report = ctx.path("check.json")
    r = ctx.run(ddpdoctor(ctx, "check", "--backend", "nccl", "--nproc", "1", "--deadline", "90",
                          "--json", str(report)), timeout=150, log="check")
    ctx.numbers["check_exit"] = r.rc
    if not report.exists():
        raise StepFailed(f"check wrote no report (exit {r.rc}): {tail(r.text, 400)}")
    data = json.loads(report.read_text())
    probes = {k: v["status"] for k, v in data.get("probes", {}).items()}
    ctx.numbers["probes"] = probes
    ctx.numbers["findings"] = [f"{f['id']}" for f in data.get("findings", [])]
    # one rank has no link: the bandwidth probe must say so, not time a no-op (the first
    # GPU run read 9,663 GB/s, twice the H200's memory bandwidth, as "ok")
    bw = data.get("probes", {}).get("bandwidth", {})
    ctx.numbers["bandwidth"] = bw.get("summary")
    must_run = ("gpu", "topology", "connectivity")
    bad = [k for k, v in probes.items()
           if v == "error" or (v == "skipped" and k in must_run)]
    if bw.get("status") != "skipped" or "one rank" not in str(bw.get("summary")):
        bad.append("bandwidth (not skipped at one rank)")
    if r.rc not in (0, 1) or bad or mismatch:
        raise StepFailed(f"check exit {r.rc}; probes in error or skipped: {bad or 'none'}; "
                         f"NVML vs nvidia-smi differ on: {mismatch or 'nothing'}")


def _train(ctx: StepContext, log: str, *args: str, env: dict | None = None,
           timeout: float = 120) -> tuple[int, list[dict], str]:
    """`ddpdoctor train --nproc 1 --device cuda ...`; (exit, json-log records, output)."""
    jlog = ctx.path(f"{log}.jsonl")
    jlog.unlink(missing_ok=True)
    r = ctx.run(ddpdoctor(ctx, "train", "--nproc", "1", "--device", "cuda",
                          "--json-log", str(jlog), *args), timeout=timeout, env=env, log=log)
    return r.rc, jsonl(jlog), r.text


def step_watch_oom(ctx: StepContext) -> None:
    """A planted CUDA OOM under the watch: OOM finding, snapshot written and read back."""
    events = fresh_events(ctx, "oom")
    rc, _, text = _train(ctx, "train-oom", "--watch", "--inject", "oom@0:2", "--steps", "3",
                         env={"DDPDOCTOR_EVENTS": str(events)})
    ctx.numbers["exit"] = rc
    ctx.path("cuda_oom.log").write_text(source_header(
        ctx, "ddpdoctor train --nproc 1 --device cuda --watch --inject oom@0:2") + text)
    f = finding(findings_in_events(events), "OOM")
    ev = f.get("evidence") or {}
    snap = ev.get("snapshot")
    ctx.numbers.update(oom_rank=f.get("ranks"), snapshot=snap,
                       gpu_free_mb=ev.get("gpu_free_mb"))
    if rc == 0:
        raise StepFailed("the planted OOM did not end the run")
    if not snap or not Path(snap).is_file():
        raise StepFailed(f"no memory snapshot at {snap!r} (evidence keys: {sorted(ev)})")
    with open(snap, "rb") as fh:
        loaded = pickle.load(fh)  # written by torch.cuda.memory._snapshot() in this run
    ctx.numbers["snapshot_segments"] = len(loaded.get("segments", []))
    ctx.numbers["snapshot_bytes"] = Path(snap).stat().st_size
    if not loaded.get("segments"):
        raise StepFailed("the snapshot holds no segments")


def step_watch_nan(ctx: StepContext) -> None:
    events = fresh_events(ctx, "nan")
    # a run this short reaches a check step only with a small DDPDOCTOR_WATCH_EVERY
    rc, _, text = _train(ctx, "train-nan", "--watch", "--inject", "nan@0:2", "--steps", "4",
                         env={"DDPDOCTOR_EVENTS": str(events), "DDPDOCTOR_WATCH_EVERY": "2"})
    ctx.numbers["exit"] = rc
    f = finding(findings_in_events(events), "GRAD_NONFINITE")
    ctx.numbers.update(ranks=f.get("ranks"), step=f.get("step"))
    if f.get("ranks") != [0]:
        raise StepFailed(f"GRAD_NONFINITE names ranks {f.get('ranks')}, expected [0]")


def step_bf16(ctx: StepContext) -> None:
    rc, recs, text = _train(ctx, "train-bf16", "--precision", "bf16", "--steps", "10")
    s = summaries(recs).get("ddp")
    ctx.numbers["exit"] = rc
    if rc != 0 or s is None:
        raise StepFailed(f"bf16 run failed (exit {rc}): {tail(text, 400)}")
    ctx.numbers.update(first_loss=s["first_loss"], final_loss=s["final_loss"],
                       step_ms=s["step_time_s"] * 1000, peak_mb=s["peak_mem_mb"])
    if not s["loss_down"]:
        raise StepFailed(f"loss did not go down: {s['first_loss']} -> {s['final_loss']}")


def step_strategies(ctx: StepContext) -> None:
    """train for every one-GPU strategy in one launch, measured, against plan's prediction."""
    rc, recs, text = _train(ctx, "train-strategies", "--strategy", ",".join(ONE_GPU_STRATEGIES),
                            "--steps", "3", "--size", "small",
                            env={"DDPDOCTOR_TRAIN_MEMORY": "1"}, timeout=200)
    ctx.numbers["exit"] = rc
    got = summaries(recs)
    missing = [s for s in ONE_GPU_STRATEGIES if s not in got]
    from ddpdoctor.plan import PRECISIONS, Setup, from_preset
    from ddpdoctor.plan.verify import compare
    from ddpdoctor.plan.workspace import step_bytes

    ws = ctx.run([ctx.session.python, "-c", WORKSPACE_SNIPPET], timeout=60, log="workspace")
    cap: tuple[int, int] | None = None
    if ws.rc == 0 and ws.stdout.strip():
        probe = json.loads(ws.stdout.strip().splitlines()[-1])
        cap = (int(probe["capability"][0]), int(probe["capability"][1]))
        ctx.numbers["workspace_measured"] = probe
    predicted_ws = step_bytes(cap, os.environ)
    ctx.numbers["workspace_predicted"] = predicted_ws
    setup = Setup(world=1, precision=PRECISIONS["amp"], batch_size=8, microbatches=2,
                  schedule="gpipe", tp=2, margin=0.0, foreach=True, workspace=predicted_ws)
    off = []
    for name, s in got.items():
        row = {"loss_down": s["loss_down"], "step_ms": round(s["step_time_s"] * 1000, 2),
               "peak_mb": s["peak_mem_mb"]}
        if s.get("rank_memory"):
            c = compare(name, from_preset("small"), setup, s["rank_memory"])[0]
            row.update(plan_states_error=round(c.states_error, 4),
                       plan_peak_error=round(c.total_error, 4),
                       measured_peak_bytes=c.measured_peak)
            if not c.ok:
                off.append(name)
        ctx.numbers[name] = row
    if rc != 0 or missing:
        raise StepFailed(f"exit {rc}; strategies without a summary: {missing or 'none'}: "
                         f"{tail(text, 300)}")
    if off:
        raise StepFailed(f"plan off the measured max_memory_allocated beyond its tolerance "
                         f"(states 2%, peak 15%) for: {', '.join(off)}")


def step_watch_overhead(ctx: StepContext) -> None:
    """The watch's cost and what it reads on a GPU. Its cost: benchmarks/
    bench_watch_overhead.py, one DDP model switched between watched and unwatched steps in
    one process (separate runs of the trainer differ by up to 20% from one to the next on
    the same H200, so they cannot show 1%). What it reads: the trainer plain and watched,
    losses bitwise the same, the GPU fields of the watch's series file; NVML clock-event
    (throttle) reasons after it."""
    rc, plain, text = _train(ctx, "train-plain", *OVERHEAD_ARGS)
    if rc:
        raise StepFailed(f"plain run exit {rc}: {tail(text, 300)}")
    events = fresh_events(ctx, "overhead")
    rc, watched, text = _train(ctx, "train-watched", *OVERHEAD_ARGS, "--watch",
                               env={"DDPDOCTOR_EVENTS": str(events)})
    if rc:
        raise StepFailed(f"watched run exit {rc}: {tail(text, 300)}")
    ctx.numbers["losses_identical"] = losses(watched) == losses(plain)
    bench = ctx.path("bench-watch-overhead.json")
    bench.unlink(missing_ok=True)
    r = ctx.run([ctx.session.python, "-m", "torch.distributed.run", "--nproc-per-node", "1",
                 str(ROOT / "benchmarks" / "bench_watch_overhead.py"), "--device", "cuda",
                 *BENCH_ARGS, "--json", str(bench)], timeout=90, log="bench-watch-overhead")
    if r.rc or not bench.exists():
        raise StepFailed(f"bench_watch_overhead exit {r.rc}: {tail(r.text, 300)}")
    ctx.numbers.update(bench_numbers(json.loads(bench.read_text())))
    # the watch's per-interval numbers go to the series file beside the events file: its
    # GPU fields (watch/gpu_metrics.py), the last record's values
    series = [r for f in sorted(events.parent.glob("watch-series-rank*.jsonl"))
              for r in jsonl(f)]
    gpu = {k: v for r in series for k, v in r.items()
           if any(s in k for s in ("gpu", "cuda")) and v is not None}
    ctx.numbers["watch_gpu_fields"] = gpu or "none"
    for f in events.parent.glob("watch-series-rank*.jsonl"):
        ctx.path(str(f.relative_to(ctx.session.out)))
    n = ctx.run([ctx.session.python, "-c", NVML_SNIPPET], timeout=60, log="nvml-after")
    if n.rc == 0:
        dev = (json.loads(n.stdout.strip().splitlines()[-1]).get("devices") or [{}])[0]
        ctx.numbers["clock_event_names_after"] = dev.get("clock_event_names")
    if not ctx.numbers["losses_identical"]:
        raise StepFailed("the watched run's losses differ from the plain run's")
    missing = [k for k in ("gpu_util_pct", "gpu_memory_used_mb", "cuda_allocated_mb",
                           "cuda_reserved_mb", "gpu_clock_events") if k not in gpu]
    if missing:
        raise StepFailed(f"the watch's series file has no GPU values for: {missing}")
    if ctx.numbers["watch_overhead_high"] >= 0.01:
        raise StepFailed(f"the watch's overhead is not shown within 1%: "
                         f"{ctx.numbers['watch_overhead']:+.2%} (95% interval up to "
                         f"{ctx.numbers['watch_overhead_high']:+.2%})")


def step_two_ranks_gloo(ctx: StepContext) -> None:
    """Two ranks on the one GPU with gloo: all_reduce of CUDA tensors, and the watch's
    GPU_DEVICE_MAPPING (two ranks of one host on one GPU)."""
    script = ctx.path("two_ranks.py")
    script.write_text(TWO_RANK_SCRIPT)
    events = fresh_events(ctx, "gloo")
    # 4 steps reach a check step (where the device rows are gathered) only with EVERY=2
    r = ctx.run(torchrun(ctx, 2, str(script), "gloo", str(events), TWO_RANK_DEVICE),
                timeout=120, env={"DDPDOCTOR_WATCH_EVERY": "2"}, log="two-ranks-gloo")
    ctx.numbers["exit"] = r.rc
    ok = r.stdout.count("-> 3 (expect 3)")
    ctx.numbers["ranks_all_reduced"] = ok
    if r.rc != 0 or ok != 2:
        raise StepFailed(f"exit {r.rc}, {ok}/2 ranks all-reduced: {tail(r.text, 400)}")
    f = finding(findings_in_events(events), "GPU_DEVICE_MAPPING")
    ctx.numbers["mapping_ranks"] = f.get("ranks")


def step_nccl_shared_device(ctx: StepContext) -> None:
    """Two NCCL ranks on one GPU: the real error text, kept for the knowledge base, and what
    `ddpdoctor diagnose` makes of it."""
    script = ctx.path("two_ranks.py")
    script.write_text(TWO_RANK_SCRIPT)
    events = fresh_events(ctx, "nccl")
    log = ctx.path("nccl_shared_device.log")
    try:  # the process group's own timeout is 30 s: a hang ends well inside 90
        r = ctx.run(torchrun(ctx, 2, str(script), "nccl", str(events), TWO_RANK_DEVICE),
                    timeout=90, env={"NCCL_DEBUG": "WARN"}, log="two-ranks-nccl")
    except StepFailed as e:  # keep what NCCL printed before the hang for the record
        work = ctx.session.work
        log.write_text(source_header(ctx, "hung; killed") + "".join(
            (work / f"two-ranks-nccl.{x}").read_text(errors="replace")
            for x in ("out", "err") if (work / f"two-ranks-nccl.{x}").exists()))
        raise StepFailed(f"two NCCL ranks on one GPU hung instead of failing: {e}") from None
    ctx.numbers["exit"] = r.rc
    log.write_text(source_header(ctx, "torchrun --nproc-per-node=2, both ranks on cuda:0, "
                                      "NCCL_DEBUG=WARN") + r.stdout + r.stderr)
    ctx.path("nccl_shared_device.txt").write_text(error_lines(r.text) + "\n")
    if r.rc == 0:
        ctx.numbers["nccl_accepted_shared_gpu"] = True
        raise StepFailed("NCCL ran two ranks on one GPU without an error (recorded; expected "
                         "'Duplicate GPU detected')")
    line = next((x.strip() for x in r.text.splitlines() if DUPLICATE_GPU in x), None)
    ctx.numbers["duplicate_gpu_line"] = line
    ctx.path("nccl_shared_device.kb.json").write_text(json.dumps(
        kb_draft(ctx, "nccl_duplicate_gpu", line, "GPU_DEVICE_MAPPING"), indent=1) + "\n")
    d = ctx.path("nccl_shared_device.diagnose.json")
    dg = ctx.run(ddpdoctor(ctx, "diagnose", str(log), "--json", str(d)), timeout=60,
                 log="diagnose-nccl")
    ids = [x["id"] for x in json.loads(d.read_text()).get("findings", [])] if d.exists() else []
    ctx.numbers.update(diagnose_exit=dg.rc, diagnose_findings=ids)
    if not ids or ids[0] != "GPU_DEVICE_MAPPING":
        raise StepFailed(f"diagnose's first finding is {ids[:1] or 'none'}, expected "
                         "GPU_DEVICE_MAPPING: teach the knowledge base nccl_shared_device.log")


def source_header(ctx: StepContext, how: str) -> str:
    """The first line of a recorded log: where it came from, for the knowledge base."""
    f = ctx.session.facts
    return (f"# recorded by ddpdoctor tools/gpu_verify.py step {ctx.step.name}, "
            f"{f.get('date')}; {f.get('device')}, driver {f.get('driver')}, CUDA "
            f"{f.get('cuda')}, NCCL {f.get('nccl')}, torch {f.get('torch')}; {how}\n")


def kb_draft(ctx: StepContext, name: str, line: str | None, expect: str) -> dict:
    """What a knowledge-base Example needs (ddpdoctor/diagnose/kb/signature.py): the line,
    the recorded log's path once copied into tests/fixtures/logs/recorded/, the finding."""
    f = ctx.session.facts
    device = "".join(c if c.isalnum() else "_" for c in str(f.get("device") or "gpu")).lower()
    return {"line": line, "source": f"tests/fixtures/logs/recorded/{name}_{device}.log",
            "expect": expect, "versions": {k: f.get(k) for k in
                                           ("device", "driver", "cuda", "nccl", "torch")},
            "date": f.get("date")}


STEPS = [
    Step("env", "versions, device, whether a GPU is usable", step_env, 100, needs_gpu=False),
    Step("check_nccl", "check --backend nccl --nproc 1; NVML vs nvidia-smi -q / topo -m",
         step_check_nccl, 150),
    Step("watch_oom", "watch: planted CUDA OOM, snapshot written and read back",
         step_watch_oom, 90),
    Step("watch_nan", "watch: planted NaN names GRAD_NONFINITE on rank 0", step_watch_nan, 90),
    Step("train_bf16", "train --precision bf16: loss goes down", step_bf16, 90),
    Step("train_strategies", "train ddp,fsdp,zero1-3 (world 1); plan vs max_memory_allocated",
         step_strategies, 200),
    Step("watch_overhead", "step time plain vs watched; watch GPU fields; throttle reasons",
         step_watch_overhead, 150),
    Step("two_ranks_gloo", "2 ranks on one GPU, gloo + CUDA tensors; GPU_DEVICE_MAPPING",
         step_two_ranks_gloo, 120),
    Step("nccl_shared_device", "2 NCCL ranks on one GPU: the error text, diagnose",
         step_nccl_shared_device, 120),
]


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="gpu-verify", help="folder for RESULT.md, result.json")
    ap.add_argument("--deadline", type=float, default=480.0,
                    help="seconds for the whole run, writing included [480]")
    ap.add_argument("--only", default="", help="comma list of steps (env always runs)")
    ap.add_argument("--python", default=sys.executable,
                    help="interpreter with torch and ddpdoctor [this one]")
    ap.add_argument("--list", action="store_true", help="list the steps and exit")
    return ap.parse_args(argv)


def select(only: str) -> list[Step]:
    names = {n.strip() for n in only.split(",") if n.strip()}
    unknown = names - {s.name for s in STEPS}
    if unknown:
        raise SystemExit(f"gpu_verify: unknown step(s): {', '.join(sorted(unknown))} "
                         f"(--list shows them)")
    return [s for s in STEPS if not names or s.name in names or s.name == "env"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.list:
        for s in STEPS:
            print(f"{s.name:20} {s.budget_s:5.0f} s  {s.title}")
        return 0
    steps = select(args.only)
    out = Path(args.out).resolve()
    out.mkdir(parents=True, exist_ok=True)
    session = Session(out=out, python=args.python)
    t0 = time.monotonic()

    def show(r) -> None:
        print(f"[{r.status:>7}] {r.name:20} {r.seconds:6.1f} s  {r.reason}", flush=True)

    results = run_steps(steps, session, args.deadline, on_result=show)
    data = result_json(results, session.facts, args.deadline, time.monotonic() - t0)
    data["facts"]["gpu_missing"] = session.gpu_missing
    write_results(out, data)
    print(f"gpu_verify: {data['counts']} -> {out / 'RESULT.md'}")
    return 1 if any(r.status == FAIL for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
