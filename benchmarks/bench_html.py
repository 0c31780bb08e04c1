"""HTML report at scale: one 64-rank synthetic job, every page kind, size and render time.

    .venv/bin/python benchmarks/bench_html.py [--ranks 64] [--steps 2000]
                                              [--screenshots DIR] [--out DIR]

The job's data go through ddpdoctor's real analysis (bandwidth table and slow-link
finding, env mismatch, stack grouping and culprit, watch's straggler rule): rank 37 has
slow links, a different NCCL_IB_HCA, is a 0.3 s straggler and the rank missing from the
hung collective. Measured per page: the file size (goal < 5 MB), the time to build it in
Python, and the time headless Chromium takes to load it and draw every chart, less the
time it takes to load an empty page (goal < 2 s). Without Chromium the sizes are still
measured. Fails (exit 1) when a page is over 5 MB or a chart does not draw.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import random
import resource
import sys
import tempfile
import time
from pathlib import Path

from ddpdoctor.attach.analyze import analyze, group_stacks, headline
from ddpdoctor.attach.classify import classify
from ddpdoctor.attach.diagnosis import HangDiagnosis
from ddpdoctor.attach.discover import Discovery
from ddpdoctor.attach.stacks import Frame, RankStack, ThreadStack
from ddpdoctor.check.analysis import bandwidth
from ddpdoctor.check.analysis.env import _env_vars
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Report
from ddpdoctor.report.page import render_page
from ddpdoctor.report.series import RunSeries, WatchEvent, read_json_log
from ddpdoctor.watch.straggler import slow_ranks

CULPRIT = 37
MAX_BYTES = 5 * 1024 * 1024
TORCH = "/venv/lib/python3.11/site-packages/torch"
TRAIN = "/home/u/proj/train.py"
SIZES = [1 << k for k in range(10, 29, 2)]  # 1 KiB .. 256 MiB, nccl-tests' sweep


def check_report(world: int, culprit: int = CULPRIT) -> Report:
    """Bandwidth probe data shaped as the probes return it, through the real analysis."""
    rng = random.Random(0)
    per_rank = {}
    for r in range(world):
        sweep = []
        for coll, base in (("all_reduce", 90.0), ("all_gather", 120.0),
                           ("reduce_scatter", 115.0), ("broadcast", 140.0)):
            for size in SIZES:
                gbps = base * size / (size + 2e6) * rng.uniform(0.95, 1.05)
                sweep.append({"collective": coll, "size": size,
                              "median_s": size / (gbps * 1e9) + 20e-6})
        links_in = {str(s): (2.0 if culprit in (s, r) else 24.0) * rng.uniform(0.9, 1.1)
                    for s in range(world) if s != r}
        per_rank[r] = {"sweep": sweep, "links_in": links_in, "host": "node0"}
    check, findings = bandwidth.analyze(per_rank, world)
    env_check, env_findings = _env_vars(
        {r: {"env": {"NCCL_IB_HCA": "mlx5_1" if r == culprit else "mlx5_0",
                     "NCCL_SOCKET_IFNAME": "ib0"}} for r in range(world)})
    report = Report("check", world={"world_size": world, "backend": "nccl", "nodes": 1})
    report.checks += [env_check, check]
    for f in env_findings:
        report.add(f, check=env_check.name)
    for f in findings:
        report.add(f, check=check.name)
    report.duration_s = 41.0
    return report


def training_log(path: Path, world: int, steps: int, culprit: int = CULPRIT) -> list[Finding]:
    """A trainer --json-log of a 64-rank job where ``culprit`` is a 0.3 s straggler; the
    findings are the watch's own straggler rule run on the same times."""
    rng = random.Random(1)
    times: dict[int, list[tuple[float, float, float]]] = {r: [] for r in range(world)}
    with open(path, "w") as f:
        for step in range(1, steps + 1):
            data = [rng.uniform(0.004, 0.012) for _ in range(world)]
            comp = [rng.uniform(0.07, 0.09) + (0.3 if r == culprit else 0) for r in range(world)]
            dt = max(d + c for d, c in zip(data, comp)) + 0.02
            loss = 5.0 * math.exp(-step / 400) + 1.5
            rec = {"event": "step", "strategy": "fsdp", "step": step, "loss": loss,
                   "grad_norm": 0.5 + 0.1 * math.sin(step / 30), "step_time_s": dt,
                   "rank_loss": [loss + rng.uniform(-0.05, 0.05) for _ in range(world)],
                   "rank_data_s": data, "rank_compute_s": comp,
                   "rank_rss_mb": [3000 + step * (0.05 if r == 5 else 0.001)
                                   for r in range(world)]}
            f.write(json.dumps(rec) + "\n")
            for r in range(world):
                times[r].append((dt, data[r], comp[r]))
    found = slow_ranks({r: t[-20:] for r, t in times.items()}, 0.05, 0.1, 0.5, 5, 0.5)
    return [Finding(fid, f"rank {','.join(map(str, ranks))} is slower than its peers",
                    ranks=ranks, evidence={"step": 20, **ev}) for fid, ranks, ev in found]


def _rank_stack(r: int, culprit: int) -> RankStack:
    if r == culprit:
        frames = [Frame("Items.__getitem__", "/home/u/proj/data.py", 41, "time.sleep(1000)"),
                  Frame("_MapDatasetFetcher.fetch", f"{TORCH}/utils/data/_utils/fetch.py", 54),
                  Frame("_BaseDataLoaderIter.__next__", f"{TORCH}/utils/data/dataloader.py",
                        741),
                  Frame("main", TRAIN, 110), Frame("<module>", TRAIN, 130)]
    else:
        frames = [Frame("all_reduce", f"{TORCH}/distributed/distributed_c10d.py", 3252),
                  Frame("wrapper", f"{TORCH}/distributed/c10d_logger.py", 83),
                  Frame("step", TRAIN, 88), Frame("main", TRAIN, 120),
                  Frame("<module>", TRAIN, 130)]
    return RankStack(r, 1000 + r, "sleeping",
                     [ThreadStack(1, "MainThread", True, frames, is_main=True)])


def hang_report(world: int, culprit: int = CULPRIT) -> tuple[Report, RunSeries]:
    """Stacks of a hung job through attach's real classification and analysis."""
    stacks = [_rank_stack(r, culprit) for r in range(world)]
    states = [classify(s) for s in stacks]
    findings = analyze(states, [])
    diag = HangDiagnosis(Discovery([], world_size=world), stacks, states, group_stacks(states),
                         findings, headline(states, findings), fr_summary="no dumps")
    report = Report("attach")
    diag.add_to(report)
    report.duration_s = 2.4
    series = RunSeries()
    # Flight Recorder: every rank enqueued #812 on the default group, the culprit #811
    series.fr.by_group = {"0": {r: 811 if r == culprit else 812 for r in range(world)}}
    return report, series


def pages(world: int, steps: int, tmp: Path) -> dict[str, str]:
    """Every page kind of one synthetic job -> HTML text."""
    log = tmp / "train.jsonl"
    found = training_log(log, world, steps)
    run = Report("run", world={"world_size": world, "backend": "nccl"})
    for f in found:
        run.add(f, check="watch")
    run.duration_s = 812.0
    series = RunSeries(steps=read_json_log(log), events=[
        WatchEvent(f.id, f.severity, 20, f.ranks, f.title) for f in found])
    hang, hang_series = hang_report(world)
    return {"check": render_page(check_report(world)), "run": render_page(run, series),
            "attach": render_page(hang, hang_series)}


def _browser():
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "lib"))
    import html_browser

    return html_browser


def _cpu() -> float:
    # Chromium's processes, once reaped: their CPU time barely depends on what else runs
    # on the machine, the wall time does (a shared 2-core box can be 10x oversubscribed).
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def _load_s(hb, chromium: str, path: str, repeat: int = 3) -> tuple[float, float, object]:
    """Best wall and CPU time of Chromium loading ``path`` until every chart drew."""
    wall, cpu, opened = float("inf"), float("inf"), None
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), _cpu()
        opened = hb.open_page(chromium, path)
        wall = min(wall, time.perf_counter() - t0)
        cpu = min(cpu, _cpu() - c0)
    return wall, cpu, opened


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ranks", type=int, default=64)
    ap.add_argument("--steps", type=int, default=2000)
    ap.add_argument("--out", default=None, help="keep the pages in this directory")
    ap.add_argument("--screenshots", default=None, help="write one PNG per page kind here")
    args = ap.parse_args()
    hb = _browser()
    chromium = hb.find_chromium()
    failed = False
    with tempfile.TemporaryDirectory() as tmp_name:
        tmp = Path(tmp_name)
        out = Path(args.out) if args.out else tmp
        out.mkdir(parents=True, exist_ok=True)
        t0 = time.perf_counter()
        html = pages(args.ranks, args.steps, tmp)
        build_s = time.perf_counter() - t0
        print(f"{args.ranks} ranks, {args.steps} steps: built 3 pages in {build_s:.2f} s "
              "(Python, bokeh + Jinja2 + analysis of the synthetic data)")
        if chromium:
            blank = tmp / "blank.html"
            blank.write_text("<!DOCTYPE html><html><head></head><body></body></html>")
            base_s, base_cpu, _ = _load_s(hb, chromium, str(blank))
            print(f"Chromium: empty page {base_s:.2f} s wall, {base_cpu:.2f} s CPU (start-up; "
                  "subtracted below)")
        else:
            print("Chromium not found: sizes only")
        print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        print(f"{'page':<8} {'size':>9} {'charts':>7} {'render wall':>12} {'render CPU':>11}")
        for kind, text in html.items():
            path = out / f"{kind}-{args.ranks}ranks.html"
            path.write_text(text, encoding="utf-8")
            size = path.stat().st_size
            failed |= size > MAX_BYTES
            render = render_cpu = charts = "-"
            if chromium:
                load_s, load_cpu, opened = _load_s(hb, chromium, str(path))
                render = f"{max(load_s - base_s, 0):.2f} s"
                render_cpu = f"{max(load_cpu - base_cpu, 0):.2f} s"
                charts = f"{opened.drawn}/{opened.charts}"
                failed |= opened.drawn != opened.charts or bool(opened.errors)
                if opened.errors:
                    print(f"  {kind}: console errors: {opened.errors[:3]}")
                if args.screenshots:
                    os.makedirs(args.screenshots, exist_ok=True)
                    hb.screenshot(chromium, str(path),
                                  os.path.join(args.screenshots, f"html-{kind}-64.png"))
            print(f"{kind:<8} {size / 1e6:>7.2f} MB {charts:>7} {render:>12} {render_cpu:>11}")
    print("FAIL" if failed else "ok: every page under 5 MB, every chart drawn")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
