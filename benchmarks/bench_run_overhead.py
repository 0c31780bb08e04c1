"""The cost of being supervised: one DDP job under plain torchrun and under ``ddpdoctor run``.

The same job (2 gloo ranks, an MLP sized for ~20 ms or ~200 ms steps on this machine, a
fixed number of steps) is launched as

    plain:   torchrun --nproc-per-node 2 JOB
    run:     ddpdoctor run -- torchrun --nproc-per-node 2 JOB    (defaults: watch on)
    control: torchrun --nproc-per-node 2 JOB                     (plain again: A/A)

Each rank times every step (wall, and its training thread's CPU) and writes the times of
the steps after its warm-up to a file. The warm-up covers the watch's one-offs of a job's
first minute (its early check steps at optimizer steps 10 and 50 and its first link
probes; most of those steps run on a one-row batch, so that a 200 ms job does not spend
12 s there), so the timed steps see the watch's steady schedule at its real rate: a
check step every 100 steps (the timed step counts are multiples of 100), a memory
sample every 20, a heartbeat a second; and run's polling once a second.

**Design.** The unit is one launch: a process's memory layout, which core it lands on and
the machine's load make whole runs faster or slower by more than the effect sought, so
steps within a run are not independent samples of the variant's effect. Launches are
grouped in palindromic blocks, e.g. ``plain run control control run plain`` (the order
rotates from block to block), so a linear drift of the machine adds the same to every
variant of a block. Per run: its mean step time over the timed steps (the cost a job pays:
a per-second or per-100-steps cost lands in a few steps, which a median would skip; the
median is printed too). Per block: variant / plain (means of its two runs each). The
estimate is the geometric mean of the block ratios, and its 95% interval comes from
resampling whole blocks (bootstrap). ``control / plain`` is the same computation on two
identical arms: the method's noise floor on this machine now; the run ratio is resolved
only where its interval is clearly narrower than its distance from 1.

Also printed: each run's wall time from launch to exit (run's start-up and report are a
fixed cost per job, not per step), the training thread's CPU per step (what the watch
adds inside the ranks), and the CPU the supervising process used during the timed steps
(share of one core; read from /proc every 0.5 s).

**The supervisor alone, within one job** (``--toggle-seconds``, per size): one supervised
job in which run's own process (not its job) is stopped (SIGSTOP) and resumed (SIGCONT)
in windows of ``--window`` seconds, blocks of on, off, off, on alternating with A/A blocks
that stay on; per block the mean step time of its on windows / its off windows, the median
over blocks with a bootstrap interval. Within one job, so no launch-to-launch noise; it
prices run's polling only (the watch runs throughout).

``ddpdoctor.watch()`` alone is measured by benchmarks/bench_watch_overhead.py (called as a
subprocess at the end, ``--dim 512``: ~17 ms steps; ``--watch-steps 0`` skips it).

Every launch runs in a private network namespace when it can (root, ``unshare`` and
``ip`` present): torchrun's rendezvous store listens on every interface otherwise. All
output goes to a temporary directory, removed at the end; every launch is a process
group of its own, ended (with every descendant) on Ctrl-C, SIGTERM or an error.

    .venv/bin/python benchmarks/bench_run_overhead.py            # ~30 min quiet, 43 loaded
    .venv/bin/python benchmarks/bench_run_overhead.py --quick    # smoke run, ~2 min
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve()
BIN = Path(sys.executable).parent
WATCH_STEPS_WARM = 60  # the watch's early checks (10, 50) and first link probes end here


@dataclass(frozen=True)
class Size:
    """One job configuration: ``label`` is the step time it was sized for here."""

    label: str
    dim: int
    layers: int
    batch: int
    steps: int  # timed steps (a multiple of 100: the watch's check steps at their rate)


SIZES = {
    "20ms": Size("20ms", dim=512, layers=4, batch=80, steps=400),
    "200ms": Size("200ms", dim=1024, layers=4, batch=576, steps=100),
}
VARIANTS = ("plain", "run", "control", "run-nowatch")


# --- the job (runs under torchrun) ---------------------------------------------------------

def job_main(argv: list[str]) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--dim", type=int, required=True)
    p.add_argument("--layers", type=int, required=True)
    p.add_argument("--batch", type=int, required=True)
    p.add_argument("--steps", type=int, required=True)
    p.add_argument("--warm-full", type=int, default=5,
                   help="full-batch warm-up steps before and after the one-row ones")
    p.add_argument("--out", required=True, help="file prefix: PREFIX.rank{R}.json")
    a = p.parse_args(argv)

    import torch
    import torch.distributed as dist
    from torch import nn

    torch.set_num_threads(1)
    dist.init_process_group("gloo")
    rank = dist.get_rank()
    torch.manual_seed(0)
    layers: list[nn.Module] = []
    for _ in range(a.layers):
        layers += [nn.Linear(a.dim, a.dim), nn.GELU()]
    model = nn.parallel.DistributedDataParallel(nn.Sequential(*layers, nn.Linear(a.dim, 1)))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-5)
    gen = torch.Generator().manual_seed(rank)
    batches = [torch.randn(a.batch, a.dim, generator=gen) for _ in range(4)]
    tiny = torch.randn(1, a.dim, generator=gen)

    def step(x: torch.Tensor) -> None:
        model(x).pow(2).mean().backward()
        opt.step()
        opt.zero_grad(set_to_none=True)

    warm = max(WATCH_STEPS_WARM, 2 * a.warm_full)
    for i in range(warm):  # allocator, DDP buckets, AdamW state, the watch's one-offs
        full = i < a.warm_full or i >= warm - a.warm_full
        step(batches[i % len(batches)] if full else tiny)
    dist.barrier()
    if rank == 0:
        Path(f"{a.out}.timed").touch()  # the timed steps begin (the toggler waits for it)
    wall, cpu, at = [], [], []
    rss0 = _rss_mb()
    t_start, pc_start = time.time(), time.perf_counter()
    for i in range(a.steps):
        t0, c0 = time.perf_counter(), time.thread_time()
        step(batches[i % len(batches)])
        t1, c1 = time.perf_counter(), time.thread_time()
        wall.append(t1 - t0)
        cpu.append(c1 - c0)
        at.append(t0 - pc_start)
    t_end = time.time()
    rss1 = _rss_mb()
    dist.barrier()
    with open(f"{a.out}.rank{rank}.json", "w") as f:
        json.dump({"rank": rank, "wall": wall, "cpu": cpu, "start": t_start, "end": t_end,
                   "at": at,
                   "rss_mb": [rss0, rss1], "watched": "ddpdoctor.watch.api" in sys.modules}, f)
    dist.destroy_process_group()


def _rss_mb() -> float:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return math.nan


# --- launching and cleaning up ---------------------------------------------------------------

def free_port() -> int:
    # A race with another process on this host shows as a failed run, never a wrong number.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def private_net_prefix() -> list[str]:
    """``unshare -n`` with loopback up, or [] where that is not possible."""
    unshare, ip = shutil.which("unshare"), shutil.which("ip")
    if os.geteuid() != 0 or not unshare or not ip:
        return []
    probe = [unshare, "-n", "--", "sh", "-c", f"{ip} link set lo up"]
    try:
        if subprocess.run(probe, capture_output=True, timeout=10).returncode != 0:
            return []
    except (OSError, subprocess.TimeoutExpired):
        return []
    # sh execs the command: the launched process keeps the pid we started
    return [unshare, "-n", "--", "sh", "-c", f'{ip} link set lo up && exec "$@"', "sh"]


class Launches:
    """Every process group started, so that any way out of the benchmark ends them all."""

    def __init__(self) -> None:
        self.live: dict[int, subprocess.Popen] = {}

    def start(self, argv: list[str], env: dict[str, str], log: Path) -> subprocess.Popen:
        with open(log, "wb") as out:
            proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        self.live[proc.pid] = proc
        return proc

    def wait(self, proc: subprocess.Popen, timeout: float) -> int:
        # an interruption (KeyboardInterrupt) leaves it in ``live``, for end_all
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.end(proc)
            code = -9
        self.live.pop(proc.pid, None)
        return code

    def end(self, proc: subprocess.Popen, grace: float = 15.0) -> None:
        """SIGTERM to the group and every descendant (torchrun puts each rank in a
        session of its own), SIGKILL to whatever is left after ``grace``."""
        import psutil

        try:
            tree = [psutil.Process(proc.pid), *psutil.Process(proc.pid).children(True)]
        except psutil.Error:
            tree = []
        for p in tree:  # a supervisor the toggler left stopped must run to end its job
            try:
                p.send_signal(signal.SIGCONT)
            except psutil.Error:
                pass
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(proc.pid, sig)
            except OSError:
                pass
            for p in tree:
                try:
                    p.send_signal(sig)
                except psutil.Error:
                    pass
            _, tree = psutil.wait_procs(tree, timeout=grace if sig == signal.SIGTERM else 5)
            if not tree:
                break
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            pass

    def end_all(self) -> None:
        for proc in list(self.live.values()):
            self.end(proc, grace=5.0)
        self.live.clear()


def _cpu_s(pid: int) -> float | None:
    """utime + stime of the process itself (not its children)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            data = f.read()
    except OSError:
        return None
    rest = data[data.rfind(b")") + 2:].split()
    return (int(rest[11]) + int(rest[12])) / os.sysconf("SC_CLK_TCK")


class CpuSampler(threading.Thread):
    """(wall time, CPU seconds) of one process every ``every`` seconds until it ends."""

    def __init__(self, pid: int, every: float = 0.5) -> None:
        super().__init__(daemon=True)
        self.pid, self.every, self.samples = pid, every, []
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.is_set():
            c = _cpu_s(self.pid)
            if c is None:
                return
            self.samples.append((time.time(), c))
            self.stop.wait(self.every)

    def used(self, t0: float, t1: float) -> float | None:
        """CPU seconds between wall times t0 and t1 (linear between samples)."""
        s = self.samples
        if len(s) < 2 or s[0][0] > t0 or s[-1][0] < t1:
            return None

        def at(t: float) -> float:
            for (ta, ca), (tb, cb) in zip(s, s[1:]):
                if ta <= t <= tb:
                    return ca + (cb - ca) * (t - ta) / (tb - ta) if tb > ta else ca
            return s[-1][1]

        return at(t1) - at(t0)


# --- one launch -------------------------------------------------------------------------------

@dataclass
class Result:
    variant: str
    size: str
    block: int
    code: int
    wall_s: float  # launch to exit
    mean_ms: float = math.nan  # mean step time over the timed steps (ranks averaged)
    median_ms: float = math.nan
    cpu_ms: float = math.nan  # training-thread CPU per step (mean, ranks averaged)
    sup_core: float = math.nan  # share of one core the launched process used, timed steps
    watched: bool = False
    files: int = 0
    rss_growth_mb: float = math.nan  # over the timed steps, ranks averaged


def command(variant: str, size: Size, out: str, port: int, quick_steps: int | None
            ) -> list[str]:
    steps = quick_steps or size.steps
    job = [str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port", str(port),
           str(HERE), "--job", "--dim", str(size.dim), "--layers", str(size.layers),
           "--batch", str(size.batch), "--steps", str(steps), "--out", out]
    if variant == "run":
        return [str(BIN / "ddpdoctor"), "run", "--", *job]
    if variant == "run-nowatch":
        return [str(BIN / "ddpdoctor"), "run", "--no-watch", "--", *job]
    return job


def launch_one(launches: Launches, variant: str, size: Size, block: int, tmp: Path,
               prefix: list[str], env: dict[str, str], quick_steps: int | None,
               timeout: float, n: int) -> Result:
    tag = f"{size.label}-b{block}-{n}-{variant}"
    out = str(tmp / "steps" / tag)
    argv = prefix + command(variant, size, out, free_port(), quick_steps)
    t0 = time.perf_counter()
    proc = launches.start(argv, env, tmp / "logs" / f"{tag}.log")
    sampler = CpuSampler(proc.pid)
    sampler.start()
    code = launches.wait(proc, timeout)
    wall = time.perf_counter() - t0
    sampler.stop.set()
    sampler.join()
    r = Result(variant, size.label, block, code, wall)
    ranks = []
    for rank in (0, 1):
        path = Path(f"{out}.rank{rank}.json")
        if path.exists():
            ranks.append(json.loads(path.read_text()))
    r.files = len(ranks)
    if code != 0 or len(ranks) != 2:
        return r
    r.mean_ms = statistics.fmean(statistics.fmean(d["wall"]) for d in ranks) * 1e3
    r.median_ms = statistics.fmean(statistics.median(d["wall"]) for d in ranks) * 1e3
    r.cpu_ms = statistics.fmean(statistics.fmean(d["cpu"]) for d in ranks) * 1e3
    r.watched = all(d["watched"] for d in ranks)
    r.rss_growth_mb = statistics.fmean(d["rss_mb"][1] - d["rss_mb"][0] for d in ranks)
    t_start, t_end = max(d["start"] for d in ranks), min(d["end"] for d in ranks)
    used = sampler.used(t_start, t_end)
    if used is not None and t_end > t_start:
        r.sup_core = used / (t_end - t_start)
    return r


def block_order(variants: list[str], block: int) -> list[str]:
    """A palindrome (each variant's mean position is the middle), rotated per block."""
    k = block % len(variants)
    half = variants[k:] + variants[:k]
    return half + half[::-1]


# --- statistics --------------------------------------------------------------------------------

def block_ratios(results: list[Result], size: str, variant: str, stat: str = "mean_ms"
                 ) -> list[float]:
    """Per complete block: mean of ``variant``'s runs / mean of plain's runs."""
    out = []
    for b in sorted({r.block for r in results if r.size == size}):
        rs = [r for r in results if r.size == size and r.block == b]
        v = [getattr(r, stat) for r in rs if r.variant == variant]
        p = [getattr(r, stat) for r in rs if r.variant == "plain"]
        if v and p and all(math.isfinite(x) for x in v + p):
            out.append(statistics.fmean(v) / statistics.fmean(p))
    return out


def geomean(xs: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(x) for x in xs))


def bootstrap(xs: list[float], reps: int = 4000, seed: int = 0, stat=None
              ) -> tuple[float, float]:
    """95% percentile interval of ``stat`` (the geometric mean), blocks resampled."""
    if len(xs) < 2:
        return math.nan, math.nan
    rng = random.Random(seed)
    stat = stat or geomean
    est = sorted(stat(rng.choices(xs, k=len(xs))) for _ in range(reps))
    return est[int(0.025 * reps)], est[int(0.975 * reps) - 1]


def summary(results: list[Result], sizes: list[Size], variants: list[str],
            targets: dict[str, float]) -> list[str]:
    """One row per size and variant: ratios to plain with their 95% intervals."""
    lines = [f"{'steps':>5} {'variant':>11} {'blocks':>6} {'step ms':>7}  "
             f"{'mean-step ratio [95%]':<26} {'median-step ratio [95%]':<26} "
             f"{'launcher CPU':>12} {'job wall s':>14}  verdict"]
    for size in sizes:
        rs = [r for r in results if r.size == size.label and r.code == 0 and r.files == 2]
        plain_wall = [r.wall_s for r in rs if r.variant == "plain"]
        for v in variants:
            mine = [r for r in rs if r.variant == v]
            if not mine:
                continue
            step = statistics.median(r.mean_ms for r in mine)
            sup = [r.sup_core for r in mine if math.isfinite(r.sup_core)]
            sup_s = f"{statistics.median(sup):.1%}" if sup else "-"
            wall = statistics.median(r.wall_s for r in mine)
            head = f"{size.label:>5} {v:>11} {len(mine) // 2:>6} {step:>7.2f}  "
            if v == "plain":
                lines.append(head + f"{'(baseline)':<26} {'':<26} {sup_s:>12} {wall:>14.1f}")
                continue
            cols, ests = [], []
            for stat in ("mean_ms", "median_ms"):
                ratios = block_ratios(results, size.label, v, stat)
                est, (lo, hi) = geomean(ratios) if ratios else math.nan, bootstrap(ratios)
                ests.append((est, lo, hi, len(ratios)))
                cols.append(f"{est:.4f} [{lo:.4f}, {hi:.4f}]")
            est, lo, hi, n = ests[0]
            target = targets.get(size.label) if v == "run" else None
            aa = block_ratios(results, size.label, "control")
            floor = (max(bootstrap(aa)) / min(bootstrap(aa))) ** 0.5 - 1 \
                if len(aa) >= 2 else math.nan  # the A/A interval's half-width, relative
            if n < 2:
                verdict = "one block: no interval"
            elif v == "control":
                verdict = ("noise floor (A/A): interval holds 1" if lo <= 1 <= hi
                           else "noise floor (A/A): interval misses 1: drift/noise beyond "
                                "the interval; more --blocks")
            elif target is None:
                verdict = ""
            elif hi <= target:
                verdict = f"target <= {target}: MET"
            elif floor > target - 1:
                verdict = (f"target <= {target}: not resolvable in this run (the A/A "
                           f"interval is +-{floor:.1%}, the target's margin {target - 1:.1%})")
            elif lo > target:
                verdict = f"target <= {target}: NOT met (interval above it)"
            else:
                verdict = f"target <= {target}: not resolved (interval spans it)"
            dwall = f"{wall:.1f} ({wall - statistics.median(plain_wall):+.1f})" \
                if plain_wall else f"{wall:.1f}"
            lines.append(head + f"{cols[0]:<26} {cols[1]:<26} {sup_s:>12} {dwall:>14}  "
                         + verdict)
    return lines


# --- the supervisor switched off and on within one supervised job ----------------------------

@dataclass
class Window:
    t0: float
    t1: float
    block: int
    aa: bool  # an A/A block: the supervisor runs in all four windows
    on: bool  # the A slots (first and last of the block)


def toggled(launches: Launches, size: Size, tmp: Path, prefix: list[str], env: dict[str, str],
            steps: int, window_s: float, timeout: float) -> list[str]:
    """``ddpdoctor run -- torchrun ... JOB``; once the timed steps begin, run's own process
    (not its job) is stopped (SIGSTOP) and resumed (SIGCONT) in windows of ``window_s``:
    blocks of on, off, off, on, alternating with A/A blocks in which it runs throughout.
    The step times of each window (steps entirely inside it) give per block
    on / off, and for the A/A blocks the same positions' ratio."""
    out = tmp / "steps" / f"toggle-{size.label}"
    argv = prefix + command("run", size, str(out), free_port(), steps)
    proc = launches.start(argv, env, tmp / "logs" / f"toggle-{size.label}.log")
    windows: list[Window] = []
    deadline = time.monotonic() + timeout
    marker = Path(f"{out}.timed")
    try:
        while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        block = 0
        while proc.poll() is None and time.monotonic() < deadline:
            aa = block % 2 == 1
            for on in (True, False, False, True):
                stop = not on and not aa
                try:
                    os.kill(proc.pid, signal.SIGSTOP if stop else signal.SIGCONT)
                except OSError:
                    break
                t0 = time.time()
                time.sleep(window_s)
                windows.append(Window(t0, time.time(), block, aa, on))
            block += 1
    finally:
        try:
            os.kill(proc.pid, signal.SIGCONT)
        except OSError:
            pass
    code = launches.wait(proc, max(1.0, deadline - time.monotonic()))
    ranks = [json.loads(p.read_text()) for p in sorted(out.parent.glob(f"{out.name}.rank*.json"))]
    if code != 0 or len(ranks) != 2:
        return [f"{size.label}: the supervised job failed (exit {code}, {len(ranks)} step files)"]
    # steps by start time (every rank on one host clock), ranks averaged step by step
    starts = [ranks[0]["start"] + t for t in ranks[0]["at"]]
    walls = [statistics.fmean(w) for w in zip(*(d["wall"] for d in ranks))]
    per_window: dict[tuple[int, int], list[float]] = {}
    for k, w in enumerate(windows):
        per_window[(w.block, k)] = [x for t, x in zip(starts, walls)
                                    if t >= w.t0 and t + x <= w.t1]
    lines = []
    for aa in (False, True):
        ratios = []
        for b in sorted({w.block for w in windows if w.aa == aa}):
            ws = [(k, w) for k, w in enumerate(windows) if w.block == b]
            if len(ws) != 4:
                continue
            a = [x for k, w in ws if w.on for x in per_window[(b, k)]]
            o = [x for k, w in ws if not w.on for x in per_window[(b, k)]]
            if a and o:
                ratios.append(statistics.fmean(a) / statistics.fmean(o))
        est = statistics.median(ratios) if ratios else math.nan
        lo, hi = bootstrap(ratios, stat=statistics.median)
        n = sum(len(v) for (b, _), v in per_window.items()
                if any(w.block == b and w.aa == aa for w in windows))
        what = ("A/A: supervisor on in all windows, same positions" if aa
                else "supervisor on / stopped")
        lines.append(f"{size.label:>5}  {what:<50} {len(ratios):>6} blocks {n:>6} steps  "
                     f"{est:.4f} [{lo:.4f}, {hi:.4f}]")
    return lines


# --- ddpdoctor.watch() alone: benchmarks/bench_watch_overhead.py --------------------------------

def watch_bench(launches: Launches, tmp: Path, prefix: list[str], env: dict[str, str],
                steps: int, warmup: int, control: bool) -> list[str]:
    argv = prefix + [str(BIN / "torchrun"), "--nproc-per-node", "2", "--master-port",
                     str(free_port()), str(HERE.parent / "bench_watch_overhead.py"),
                     "--dim", "512", "--steps", str(steps), "--warmup", str(warmup)]
    if control:
        argv.append("--control")
    log = tmp / "logs" / f"watch{'-control' if control else ''}.log"
    proc = launches.start(argv, env, log)
    code = launches.wait(proc, timeout=max(600.0, steps * 0.2))
    text = log.read_text(errors="replace")
    keep = [ln.split("]:", 1)[-1] for ln in text.splitlines()
            if re.search(r"step time with the watch|control, unwatched|^\s*(run|1|all) ", ln)]
    if code != 0 or not keep:
        return [f"bench_watch_overhead.py failed (exit {code}); its log:", *text.splitlines()[-15:]]
    return keep


def report(results: list[Result], sizes: list[Size], variants: list[str],
           targets: dict[str, float], toggle_lines: list[str], watch_lines: list[str],
           watch_steps: int) -> None:
    print("step time, variant / plain: geometric mean over blocks of (the variant's "
          "runs / plain's runs in the block), of each run's mean and median step time; "
          "95% bootstrap intervals over blocks. launcher CPU: the launched process's own "
          "CPU during the timed steps (ddpdoctor run, or torchrun's agent), share of one "
          "core. job wall s: launch to exit, median (difference to plain's)")
    for line in summary(results, sizes, variants, targets):
        print(line)
    if toggle_lines:
        print()
        print("supervisor on / stopped within one `ddpdoctor run` job (watch on "
              "throughout): median over blocks of on/off mean step time, 95% bootstrap "
              "interval over blocks; target as above")
        for line in toggle_lines:
            print(line)
    if watch_lines:
        print()
        print(f"ddpdoctor.watch() alone (bench_watch_overhead.py --dim 512, "
              f"{watch_steps} steps; target <= 1.01 at 20 ms):")
        for line in watch_lines:
            print("  " + line.strip())


# --- main -----------------------------------------------------------------------------------

def main() -> int:
    if len(sys.argv) > 1 and sys.argv[1] == "--job":
        job_main(sys.argv[2:])
        return 0
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--blocks", type=int, default=4,
                    help="palindromic blocks per step size (each runs every variant twice)")
    ap.add_argument("--sizes", default="20ms,200ms", help=f"of {', '.join(SIZES)}")
    ap.add_argument("--variants", default="run,control",
                    help="besides plain: run, control (plain again: A/A), run-nowatch "
                         "(ddpdoctor run --no-watch: the supervisor alone)")
    ap.add_argument("--toggle-seconds", type=float, default=120.0,
                    help="per size, timed seconds of one supervised job in which run's "
                         "process is stopped and resumed in windows (0: skip)")
    ap.add_argument("--window", type=float, default=2.0,
                    help="seconds per window of the toggled job (>= run's 1 s poll)")
    ap.add_argument("--watch-steps", type=int, default=8000,
                    help="timed steps of bench_watch_overhead.py --dim 512 (0: skip it)")
    ap.add_argument("--watch-control", action="store_true",
                    help="also run bench_watch_overhead.py --control (its A/A)")
    ap.add_argument("--quick", action="store_true",
                    help="smoke run: 1 block, 100 steps per job, a short watch benchmark")
    ap.add_argument("--steps", type=int, default=None,
                    help="timed steps per job (default: 400 at 20 ms, 100 at 200 ms)")
    ap.add_argument("--timeout", type=float, default=600.0, help="per launch, seconds")
    ap.add_argument("--no-private-net", action="store_true",
                    help="launch in the host's network namespace (torchrun's store then "
                         "listens on every interface while a job runs)")
    ap.add_argument("--keep", default=None,
                    help="copy the step files and logs to this directory at the end")
    ap.add_argument("--json", default=None,
                    help="write every launch's numbers and the other sections' lines here")
    ap.add_argument("--summarize", default=None, metavar="JSON",
                    help="print the tables of an earlier --json file; runs nothing")
    args = ap.parse_args()

    sizes = [SIZES[s.strip()] for s in args.sizes.split(",") if s.strip()]
    variants = ["plain"] + [v.strip() for v in args.variants.split(",") if v.strip()]
    bad = [v for v in variants if v not in VARIANTS]
    if bad:
        ap.error(f"unknown variants {bad}; choose from {', '.join(VARIANTS[1:])}")
    blocks, steps, watch_steps = args.blocks, args.steps, args.watch_steps
    if args.quick:
        blocks, steps = 1, steps or 100
        watch_steps = min(watch_steps, 400)
        args.toggle_seconds = min(args.toggle_seconds, 20.0)
    targets = {"20ms": 1.01, "200ms": 1.005}
    if args.summarize:
        saved = json.loads(Path(args.summarize).read_text())
        results = [Result(**r) for r in saved["runs"]]
        report(results, sizes, variants, targets, saved.get("toggle", []),
               saved.get("watch", []), saved.get("watch_steps", watch_steps))
        return 0

    launches = Launches()

    def on_signal(signum: int, _frame: object) -> None:
        raise KeyboardInterrupt(f"signal {signum}")

    # SIGINT too: a shell starts a background job with SIGINT ignored, and Python keeps that
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, on_signal)
    results: list[Result] = []
    tmp = Path(tempfile.mkdtemp(prefix="bench-run-overhead-"))
    try:
        (tmp / "steps").mkdir()
        (tmp / "logs").mkdir()
        prefix = [] if args.no_private_net else private_net_prefix()
        env = {**os.environ, "TMPDIR": str(tmp)}  # torchrun's and run's directories
        for k in ("MASTER_PORT", "MASTER_ADDR", "PYTHONUNBUFFERED"):
            env.pop(k, None)
        env = {k: v for k, v in env.items() if not k.startswith("DDPDOCTOR_")}
        print(f"load average at start: {_loadavg()} ({os.cpu_count()} CPUs); "
              f"network: {'private namespace' if prefix else 'the host (not isolated)'}; "
              f"outputs in {tmp} (removed at the end)")
        print(f"sizes {', '.join(s.label for s in sizes)}; variants {', '.join(variants)}; "
              f"{blocks} block(s) each; orders like {' '.join(block_order(variants, 0))}")
        print(f"{'size':>6} {'blk':>3} {'variant':>12} {'code':>4} {'wall s':>7} "
              f"{'mean ms':>8} {'median':>8} {'CPU ms':>7} {'launcher':>8} {'RSS +MB':>7}",
              flush=True)
        n = 0
        for b in range(blocks):
            for size in sizes:
                for v in block_order(variants, b):
                    r = launch_one(launches, v, size, b, tmp, prefix, env, steps,
                                   args.timeout, n)
                    n += 1
                    results.append(r)
                    print(f"{r.size:>6} {b:>3} {v:>12} {r.code:>4} {r.wall_s:>7.1f} "
                          f"{r.mean_ms:>8.2f} {r.median_ms:>8.2f} {r.cpu_ms:>7.2f} "
                          f"{r.sup_core:>8.1%} {r.rss_growth_mb:>7.1f}"
                          + ("  (watch not as expected)" if r.files == 2
                             and r.watched != (v == "run") else ""), flush=True)
        toggle_lines = []
        for size in sizes if args.toggle_seconds > 0 else []:
            plain = [r.mean_ms for r in results if r.size == size.label
                     and r.variant == "plain" and math.isfinite(r.mean_ms)]
            step_s = statistics.median(plain) / 1e3 if plain else float(size.label[:-2]) / 1e3
            n_steps = max(100, round(args.toggle_seconds / step_s / 100) * 100)
            print(f"toggled job, {size.label}: {n_steps} timed steps, windows of "
                  f"{args.window:g} s", flush=True)
            toggle_lines += toggled(launches, size, tmp, prefix, env, n_steps, args.window,
                                    args.timeout + 3 * args.toggle_seconds)
        watch_lines = []
        if watch_steps > 0:
            warm = 40 if args.quick else 400
            watch_lines = watch_bench(launches, tmp, prefix, env, watch_steps, warm, False)
            if args.watch_control:
                watch_lines += watch_bench(launches, tmp, prefix, env, watch_steps, warm, True)
        print(f"load average at end: {_loadavg()}")
        print()
        report(results, sizes, variants, targets, toggle_lines, watch_lines, watch_steps)
        if args.json:
            Path(args.json).write_text(json.dumps(
                {"runs": [r.__dict__ for r in results], "toggle": toggle_lines,
                 "watch": watch_lines, "watch_steps": watch_steps}, indent=1))
        if args.keep:
            shutil.copytree(tmp, args.keep, dirs_exist_ok=True)
        failed = [r for r in results if r.code != 0 or r.files != 2]
        if failed:
            print(f"{len(failed)} launch(es) failed: " + ", ".join(
                f"{r.size}/{r.variant} exit {r.code}" for r in failed))
            for r in failed[:2]:
                log = next((tmp / "logs").glob(f"{r.size}-b{r.block}-*-{r.variant}.log"), None)
                if log is not None:
                    print(f"--- {log.name}:\n" + "\n".join(
                        log.read_text(errors="replace").splitlines()[-20:]))
            return 1
        return 0
    except KeyboardInterrupt:
        print("interrupted: ending every launch", file=sys.stderr)
        return 130
    finally:
        launches.end_all()
        shutil.rmtree(tmp, ignore_errors=True)


def _loadavg() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "?"


if __name__ == "__main__":
    sys.exit(main())
