"""`ddpdoctor scale`: throughput and scaling efficiency at 1, 2, 4 ... ranks, and why not linear.

Torch-free: the runs are torchrun subprocesses; this process reads what they wrote.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import click

from ddpdoctor.commands.common import (
    DoctorCommand,
    FiniteFloat,
    finish,
    html_option,
    json_option,
    reject_unknown_option,
)
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_USAGE, Check, Report
from ddpdoctor.train.config import SIZES

if TYPE_CHECKING:
    from ddpdoctor.scale.sweep import Outcome, Sweep

_HELP = """Scaling evaluation: run the same training at 1, 2, 4 ... ranks and say how close
to linear it scales, and why not.

\b
Each world size of --nproc-list is one short run (torchrun, --steps steps; the first
--warmup-steps are not measured). The table gives throughput, speedup and efficiency
against the smallest world (normally 1 rank), and where each step's time went: the
typical rank's data wait and forward, the slowest rank's extra time (straggler), and
backward + optimizer and gradient communication (estimated, see docs/scale.md).
Where efficiency is below --min-efficiency a finding names the cause: communication
(SCALING_COMM_BOUND), data (DATALOADER_BOTTLENECK), one slow rank (STRAGGLER, with its
rank) or per-rank compute (SCALING_COMPUTE_BOUND: e.g. more ranks than cores or GPUs).

\b
Weak scaling (--mode weak, default): fixed per-rank batch (--batch-size); the ideal is the
same step time at every world size. Strong scaling (--mode strong): fixed global batch
(--global-batch, split over the ranks); the ideal is a step time 1/W of one rank's.

\b
What runs: the reference trainer (`ddpdoctor train`, --strategy/--size/--inject), or
your command after --. A torchrun command gets its --nproc-per-node set per run; any
other command reads the world size from DDPDOCTOR_SCALE_NPROC (and the per-rank batch
from DDPDOCTOR_SCALE_RANK_BATCH, the mode from DDPDOCTOR_SCALE_MODE). It must print, from
rank 0, lines like
  ddpdoctor-throughput: 1834.2 samples/s
  ddpdoctor-throughput: 58694 tokens/s rank=0 step=7 step_s=0.139 data_s=0.002 compute_s=0.041
(whole-job throughput; per-rank times from every rank let scale name the cause).
OMP_NUM_THREADS is set to 1 for every run unless you set it (torchrun does so only above
one rank, which would hand the baseline every core).

\b
Examples:
  ddpdoctor scale --nproc-list 1,2,4
  ddpdoctor scale --nproc-list 1,2 --mode strong --global-batch 32 --strategy fsdp
  ddpdoctor scale --nproc-list 1,2 --inject straggler@1     (plant a slow rank 1)
  ddpdoctor scale --nproc-list 1,2,4 --json scale.json -- torchrun --standalone train.py

Exit code: 0 every run finished (poor scaling is a warning), 1 a run failed (its crash
triaged), 2 usage error, 3 a run printed no throughput or could not start.
"""


@click.command(name="scale", cls=DoctorCommand, help=_HELP, context_settings={
    "max_content_width": 100, "ignore_unknown_options": True,
    "allow_interspersed_args": False})
@click.option("--nproc-list", default="1,2,4", show_default=True, metavar="N,N,...",
              help="World sizes to run, e.g. 1,2,4,8; the smallest is the baseline.")
@click.option("--mode", type=click.Choice(["weak", "strong"]), default="weak",
              show_default=True, help="weak: fixed per-rank batch; strong: fixed global batch.")
@click.option("--batch-size", type=click.IntRange(1, 1 << 20), default=8, show_default=True,
              help="weak: samples per rank per step.")
@click.option("--global-batch", type=click.IntRange(1, 1 << 24), default=None,
              help="strong: samples per step over all ranks (default: --batch-size x the "
                   "largest world size).")
@click.option("--strategy", type=click.Choice(["ddp", "fsdp", "zero1", "zero2", "zero3"]),
              default="ddp", show_default=True, help="Trainer: data-parallel strategy.")
@click.option("--size", type=click.Choice(list(SIZES)), default="tiny", show_default=True,
              help="Trainer: model preset.")
@click.option("--layers", type=click.IntRange(1, 1024), default=None,
              help="Trainer: override the preset's number of blocks.")
@click.option("--dim", type=click.IntRange(1, 65536), default=None,
              help="Trainer: override the preset's width (a wide model with a short --seq "
                   "has much gradient to send per unit of compute).")
@click.option("--seq", type=click.IntRange(1, 1 << 20), default=None,
              help="Trainer: override the preset's sequence length.")
@click.option("--steps", type=click.IntRange(2, 100_000), default=30, show_default=True,
              help="Trainer: steps per run (each takes milliseconds with the tiny model; "
                   "start-up dominates).")
@click.option("--warmup-steps", type=click.IntRange(0, 100_000), default=5,
              show_default=True, help="Steps (or printed lines) not measured at the start.")
@click.option("--num-workers", type=click.IntRange(0, 256), default=0, show_default=True,
              help="Trainer: DataLoader workers per rank.")
@click.option("--device", type=click.Choice(["auto", "cpu", "cuda"]), default="auto",
              show_default=True, help="Trainer: device (auto: GPU if there is one).")
@click.option("--inject", multiple=True, metavar="FAULT",
              help="Trainer: plant a fault (see `ddpdoctor train --inject list`), in the runs "
                   "whose world has its rank, e.g. straggler@1 or slow-data@1.")
@click.option("--repeat", type=click.IntRange(1, 100), default=1, show_default=True,
              help="Runs per world size, interleaved (1,2,4,1,2,4); the fastest counts. On "
                   "a shared machine 3 takes out much of the noise.")
@click.option("--min-efficiency", type=FiniteFloat(min=0, max=1), default=0.8,
              show_default=True, help="Efficiency below this is a finding.")
@click.option("--run-timeout", type=FiniteFloat(min=1), default=600.0, show_default=True,
              metavar="S", help="A run still going after S seconds is killed and failed.")
@click.option("--work-dir", type=click.Path(file_okay=False), default=None, metavar="DIR",
              help="Keep every run's output and JSON log here (default: a temporary "
                   "directory, removed unless a run failed).")
@json_option
@html_option
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED, metavar="[-- CMD...]")
def command(nproc_list: str, mode: str, batch_size: int, global_batch: int | None,
            strategy: str, size: str, layers: int | None, dim: int | None, seq: int | None,
            steps: int, warmup_steps: int, num_workers: int, device: str,
            inject: tuple[str, ...], repeat: int, min_efficiency: float, run_timeout: float,
            work_dir: str | None, json_path: str | None, html_path: str | None,
            cmd: tuple[str, ...]) -> int:
    from ddpdoctor.scale.sweep import Sweep, parse_nproc_list, rank_batches, specs

    reject_unknown_option(cmd)
    user = list(cmd) or None
    ctx = click.get_current_context()
    batch_given = ctx.get_parameter_source("batch_size") is click.core.ParameterSource.COMMANDLINE
    try:
        worlds = parse_nproc_list(nproc_list)
        if mode == "strong" and global_batch is None and user is None:
            global_batch = batch_size * max(worlds)
        batches = rank_batches(worlds, mode, batch_size if (user is None or batch_given)
                               else None, global_batch)
        if warmup_steps >= steps and user is None:
            raise ValueError(f"--warmup-steps {warmup_steps} leaves none of --steps {steps} "
                             "to measure")
        sw = Sweep(worlds, mode, batches, warmup_steps, run_timeout,
                   Path(work_dir or "."), user,
                   dict(strategy=strategy, size=size, layers=layers, dim=dim, seq=seq,
                        steps=steps, num_workers=num_workers, device=device,
                        inject=list(inject)), repeat)
        specs(sw)  # every run's options checked before the first starts
    except ValueError as e:
        raise DoctorError(str(e), EXIT_USAGE) from None
    try:
        sw.workdir = Path(work_dir) if work_dir else Path(
            tempfile.mkdtemp(prefix="ddpdoctor-scale-"))
        sw.workdir.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise DoctorError(f"cannot create {work_dir or 'a temporary directory'}: "
                          f"{e.strerror or e}") from None
    return _run(sw, min_efficiency, json_path, html_path, keep=work_dir is not None)


def _run(sw: Sweep, min_eff: float, json_path: str | None, html_path: str | None,
         keep: bool) -> int:
    from ddpdoctor.scale.sweep import ScaleError, ranks, run_all

    report = Report("scale", world={"world_size": max(sw.worlds)})
    click.echo(f"ddpdoctor scale: {sw.mode} scaling at {', '.join(map(str, sw.worlds))} ranks "
               f"({'your command' if sw.user_cmd else 'reference trainer'}); outputs in "
               f"{sw.workdir}", err=True)
    try:
        outcome = run_all(sw, lambda line: click.echo(line, err=True))
    except ScaleError as e:
        report.doctor_error = str(e)
        return finish(report, json_path, html_path=html_path)
    except OSError as e:
        report.doctor_error = f"cannot start the run: {e.strerror or e}"
        return finish(report, json_path, html_path=html_path)
    for w, found in outcome.failed.items():
        report.checks.append(Check(ranks(w), "the run failed", status="error",
                                   data={"seconds": outcome.seconds.get(w)}))
        for f in found:
            report.add(f, check=ranks(w))
    for w in outcome.skipped:
        report.checks.append(Check(ranks(w), "not run: the baseline failed",
                                   status="skipped"))
    after = _analyze(report, sw, outcome, min_eff)
    report.checks.sort(key=lambda c: int(c.name.split()[0]))  # by world size
    if not outcome.failed and not keep:
        shutil.rmtree(sw.workdir, ignore_errors=True)
    return finish(report, json_path, after=after, html_path=html_path)


_ABOVE = (" (above linear: the baseline was slower than its share; on a busy machine "
          "more ranks get more of the CPU, docs/scale.md)")


def _analyze(report: Report, sw: Sweep, outcome: Outcome,
             min_eff: float) -> Callable[[Report], None] | None:
    from ddpdoctor.scale.analysis import Thresholds, analyze, findings
    from ddpdoctor.scale.sweep import ranks

    th = Thresholds(min_efficiency=min_eff)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    results = analyze(outcome.measurements, th, cpus, outcome.device)
    if not results:
        return None
    unit = outcome.measurements[0].unit
    for r in results:
        base = r is results[0]
        summary = (f"{r.throughput:,.0f} {unit}, efficiency {r.efficiency:.0%}"
                   + (" (baseline)" if base else f", cause: {r.cause or 'unclear'}"
                      if r.efficiency < min_eff else _ABOVE if r.efficiency > 1.1 else ""))
        report.checks.append(Check(ranks(r.world), summary, data={
            **r.to_dict(), "unit": unit, "rank_batch": sw.rank_batch.get(r.world),
            "seconds": outcome.seconds.get(r.world)}))
    report.world.update({"mode": sw.mode, "worlds": sw.worlds, "unit": unit,
                         "baseline_world": results[0].world, "cpus": cpus,
                         "device": outcome.device,
                         "omp_num_threads": os.environ.get("OMP_NUM_THREADS", "1"),
                         # a busy machine skews every number: say how busy it was
                         "load_avg_1m_at_end": round(os.getloadavg()[0], 2)})
    for f in findings(results, sw.mode, th, cpus):
        report.add(f, check=ranks(min(int(w) for w in f.evidence["per_world"])))

    def after(_: Report) -> None:
        from ddpdoctor.scale.view import print_table

        print_table(results, unit, sw.mode, sw.rank_batch, min_eff)

    return after
