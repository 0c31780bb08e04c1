"""`ddpdoctor check`: the preflight of every rank."""

from __future__ import annotations

from typing import TYPE_CHECKING

import click

from ddpdoctor.commands.common import (
    DoctorCommand,
    FiniteFloat,
    finish,
    html_option,
    json_option,
)
from ddpdoctor.core.errors import ExitCode

if TYPE_CHECKING:
    from ddpdoctor.check.dsconfig.rules import JobFacts
    from ddpdoctor.check.options import CheckOptions
    from ddpdoctor.core.report import Report


def _bandwidth_table(report) -> None:
    """The nccl-tests-style table, printed after the report when bandwidth ran."""
    from rich.console import Console
    from rich.table import Table

    check = next((c for c in report.checks if c.name == "bandwidth" and c.data.get("table")),
                 None)
    if check is None:
        return
    table = Table(title="bandwidth (slowest rank's median)", title_justify="left")
    for col in ("collective", "size", "time (us)", "algbw (GB/s)", "busbw (GB/s)"):
        table.add_column(col, justify="right" if col != "collective" else "left")
    for row in check.data["table"]:
        size = row["size"]
        human = f"{size >> 20} MiB" if size >= 1 << 20 else f"{size >> 10} KiB"
        table.add_row(row["collective"], human, f"{row['time_us']:.1f}",
                      f"{row['algbw_gbps']:.3f}", f"{row['busbw_gbps']:.3f}")
    Console(highlight=False).print(table)


@click.command(name="check", cls=DoctorCommand)
@click.option("--nproc", type=click.IntRange(1, 1024), default=None,
              help="Ranks to start on this node [default: one per GPU, or 2 on CPU].")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None,
              help="Force a backend [default: nccl when every rank has a GPU, else gloo].")
@click.option("--probe", "probes", multiple=True, metavar="NAME",
              help="Run only this probe (repeatable): env, rendezvous, reachability, "
                   "connectivity, "
                   "bandwidth, dataloader, gpu, topology.")
@click.option("--deadline", type=FiniteFloat(1, 3600), default=120.0, show_default=True,
              help="Seconds after which ranks that have not answered are killed and named.")
@click.option("--master-addr", default=None,
              help="Rendezvous host your job will use [default: $MASTER_ADDR or 127.0.0.1].")
@click.option("--master-port", type=click.IntRange(1, 65535), default=None,
              help="Rendezvous port your job will use [default: $MASTER_PORT or 29500].")
@click.option("--max-bytes", default="auto", show_default=True,
              help="Largest bandwidth message, e.g. 64M or 1G [auto: 16M on gloo, 256M on "
                   "nccl; see --quick, --full].")
@click.option("--expect-busbw", type=FiniteFloat(min=0, min_open=True, max=1e6), default=None,
              metavar="GB/s",
              help="all_reduce bus bandwidth you expect; below half of it is a finding.")
@click.option("--shm-min-mb", type=click.IntRange(1, 1 << 30), default=512, show_default=True,
              help="Free /dev/shm below this is ENV_SHM_TOO_SMALL.")
@click.option("--nnodes", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="Nodes in the check; above 1, runs through torchrun's rendezvous (run the "
                   "same command on every node with its --node-rank).")
@click.option("--node-rank", type=click.IntRange(0), default=0, show_default=True,
              help="This node's rank (multi-node); node 0 prints the report.")
@click.option("--rdzv-endpoint", default=None, metavar="HOST:PORT",
              help="torchrun rendezvous endpoint (multi-node), hosted on node 0.")
@click.option("--local-addr", default=None,
              help="This node's address for torchrun's rendezvous (multi-node).")
@click.option("--quick", is_flag=True,
              help="Less of the probes whose cost grows with what they move: bandwidth sweeps "
                   "all_reduce only, up to 1M on gloo (16M on nccl); the DataLoader moves 2 "
                   "batches. Every probe still runs.")
@click.option("--full", is_flag=True,
              help="More of them: bandwidth up to 64M on gloo (1G on nccl), 2 warm-ups and "
                   "5 calls a trial at every size (allow for it in --deadline).")
@click.option("--ds-config", default=None, metavar="FILE",
              help="Check this DeepSpeed config (JSON) against itself and the job; alone "
                   "(no --probe) no rank is started.")
@click.option("--world-size", type=click.IntRange(1, 1 << 20), default=None,
              help="The job's world size for --ds-config [default: --nproc x --nnodes when "
                   "--nproc is given].")
@click.option("--device-mem", default=None, metavar="SIZE",
              help="Memory of one device (e.g. 80G) for --ds-config's bucket check.")
@click.option("--ds-auto-filled", is_flag=True,
              help="The --ds-config file goes to the HF Trainer or accelerate, which fill its "
                   "\"auto\" values.")
@click.option("-v", "--verbose", is_flag=True, help="Show all evidence lines.")
@json_option
@html_option
def command(nproc: int | None, backend: str | None, probes: tuple[str, ...], deadline: float,
            master_addr: str | None, master_port: int | None, max_bytes: str,
            expect_busbw: float | None, shm_min_mb: int, nnodes: int, node_rank: int,
            rdzv_endpoint: str | None, local_addr: str | None, quick: bool, full: bool,
            ds_config: str | None, world_size: int | None, device_mem: str | None,
            ds_auto_filled: bool, verbose: bool, json_path: str | None,
            html_path: str | None) -> int:
    """Preflight every rank before a run.

    Starts NPROC ranks on this node, each with a process group, runs the probes in each and
    turns what they find into findings. A rank that does not answer within --deadline is
    killed and named. Probes: env (versions, env vars, /dev/shm, limits, socket interfaces),
    rendezvous (your MASTER_ADDR/MASTER_PORT), reachability (every pair over TCP, one
    round), connectivity (all-reduce + log2 N rounds of pairs),
    bandwidth (nccl-tests-style sweep + each rank's links), dataloader (workers through
    /dev/shm),
    gpu and topology (NVML; skipped without an NVIDIA driver).

    \b
    ddpdoctor check                           2 CPU ranks, or one per GPU
    ddpdoctor check --probe bandwidth --max-bytes 1G --expect-busbw 180
    ddpdoctor check --json report.json        also write the JSON report

    \b
    Across nodes, run on every node (node 0 hosts the rendezvous and prints the report):
    ddpdoctor check --nnodes 2 --node-rank 0 --nproc 8 --rdzv-endpoint node0:29400
    ddpdoctor check --nnodes 2 --node-rank 1 --nproc 8 --rdzv-endpoint node0:29400
    or inside any launcher: torchrun ... -m ddpdoctor.check.worker [--probe NAME]
    """
    from ddpdoctor.check.probes import PROBES

    ds_job = _ds_job(ds_config, world_size, nproc, nnodes, device_mem, ds_auto_filled)
    alone = _config_alone(ds_job, probes, json_path, verbose, html_path)
    if alone is not None:
        return alone
    names = _probe_names(probes)
    if quick and full:
        raise click.BadParameter("choose one of --quick and --full", param_hint="--quick")
    depth = "quick" if quick else "full" if full else "default"
    opts = _options(depth, max_bytes, shm_min_mb, master_addr, master_port, expect_busbw)
    if node_rank >= nnodes:
        raise click.BadParameter(f"{node_rank} is not below --nnodes {nnodes}",
                                 param_hint="--node-rank")
    broken = _environment_that_breaks_torch()
    if broken is not None:
        return finish(broken, json_path, verbose=verbose, html_path=html_path)
    if nnodes == 1 and not rdzv_endpoint and any(PROBES[n].stage != "parent" for n in names):
        from ddpdoctor.check.launcher import prestart

        prestart(("ddpdoctor.check.run",))  # the ranks import torch while we do
    nproc = _ranks(nproc, backend)
    if nnodes > 1 or rdzv_endpoint:
        if not rdzv_endpoint:
            raise click.BadParameter("multi-node needs --rdzv-endpoint HOST:PORT",
                                     param_hint="--rdzv-endpoint")
        from ddpdoctor.check.multinode import run_multinode

        names = [n for n in names if PROBES[n].stage != "parent"]  # torchrun owns the port
        report = run_multinode(nproc, nnodes, node_rank, rdzv_endpoint, local_addr, names,
                               backend, deadline, opts)
        if report is None:  # not node 0: the report is printed there
            return ExitCode.HEALTHY
    else:
        report = _run_with_progress(nproc, names, backend, deadline, opts)
    if ds_job is not None:
        from ddpdoctor.check.dsconfig.report import add_config_check

        add_config_check(report, ds_job)
    return finish(report, json_path, verbose=verbose,
                  after=None if json_path == "-" else _bandwidth_table, html_path=html_path)


def _config_alone(ds_job: JobFacts | None, probes: tuple[str, ...], json_path: str | None,
                  verbose: bool, html_path: str | None) -> int | None:
    """--ds-config without --probe: the config alone (no rank started, torch not imported);
    None when the probes run."""
    if ds_job is None or probes:
        return None
    from ddpdoctor.check.dsconfig.report import config_only_report

    return finish(config_only_report(ds_job), json_path, verbose=verbose, html_path=html_path)


def _ds_job(ds_config: str | None, world_size: int | None, nproc: int | None, nnodes: int,
            device_mem: str | None, auto_filled: bool) -> JobFacts | None:
    """What --ds-config's rules know of the job; None without --ds-config."""
    if not ds_config:
        if device_mem or world_size or auto_filled:
            raise click.BadParameter("--world-size, --device-mem and --ds-auto-filled go with "
                                     "--ds-config", param_hint="--ds-config")
        return None
    from ddpdoctor.check.dsconfig.rules import JobFacts

    if world_size is None and nproc is not None:
        world_size = nproc * nnodes
    mem = _parse_size(device_mem, "--device-mem") if device_mem else None
    return JobFacts(world_size=world_size, device_mem=mem, auto_filled=auto_filled,
                    config=ds_config)


def _environment_that_breaks_torch() -> Report | None:
    """A report, with no rank started, when this environment makes every torch.distributed
    import fail (the ranks, and the user's job, would die at start-up)."""
    import os

    from ddpdoctor.core.report import Check, Report
    from ddpdoctor.distenv.judge import import_breakers

    findings = import_breakers(dict(os.environ))
    if not findings:
        return None
    report = Report("check", world={"world_size": 0, "nodes": 1})
    report.checks.append(Check("env vars", "no rank started: `import torch.distributed` "
                                           "fails with this environment", status="error",
                               group="Environment"))
    for f in findings:
        report.add(f, check="env vars")
    return report


def _probe_names(probes: tuple[str, ...]) -> list[str]:
    from ddpdoctor.check.probes import PROBES

    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        raise click.BadParameter(f"unknown probe(s) {', '.join(unknown)}; "
                                 f"choose from {', '.join(PROBES)}", param_hint="--probe")
    return list(probes) or list(PROBES)


def _options(depth: str, max_bytes: str, shm_min_mb: int, master_addr: str | None,
             master_port: int | None, expect_busbw: float | None) -> CheckOptions:
    from ddpdoctor.check.options import CheckOptions

    return CheckOptions.at_depth(
        depth, shm_min_free=shm_min_mb << 20,
        max_bytes=None if max_bytes == "auto" else _parse_size(max_bytes),
        master_addr=master_addr, master_port=master_port, expect_busbw=expect_busbw)


def _ranks(nproc: int | None, backend: str | None) -> int:
    """--nproc, or one rank per GPU (2 on CPU); nccl needs a GPU per rank."""
    if nproc is not None and backend != "nccl":
        return nproc
    import torch

    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if nproc is None:
        nproc = gpus or 2
    if backend == "nccl" and gpus < nproc:
        raise click.BadParameter(f"nccl needs one GPU per rank: {nproc} rank(s), {gpus} "
                                 "GPU(s) visible (use --backend gloo on CPU)",
                                 param_hint="--backend")
    return nproc


def _run_with_progress(nproc, names, backend, deadline, opts):
    from rich.console import Console

    from ddpdoctor.check.run import run_check

    console = Console(stderr=True)
    if not console.is_terminal:
        return run_check(nproc, names, backend, deadline, opts)
    with console.status(f"starting {nproc} ranks ...") as status:
        def show(steps: dict[int, str]) -> None:
            parts = [f"rank {r}: {s or 'starting'}" for r, s in sorted(steps.items())[:8]]
            status.update("checking · " + " · ".join(parts))

        return run_check(nproc, names, backend, deadline, opts, on_progress=show)


def _parse_size(text: str, option: str = "--max-bytes") -> int:
    units = {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("B").removesuffix("I")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        value = int(float(num) * units[unit])
    except (ValueError, OverflowError):  # "nan", "inf", "1e400"
        raise click.BadParameter(f"{text!r} is not a size like 64M or 1G",
                                 param_hint=option) from None
    if value < 1024:
        raise click.BadParameter("must be at least 1K", param_hint=option)
    if value > 1 << 40 and option == "--max-bytes":
        raise click.BadParameter("must be at most 1T", param_hint=option)
    return value


if __name__ == "__main__":  # pragma: no cover
    command()
