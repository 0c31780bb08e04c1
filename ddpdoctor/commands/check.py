"""`ddpdoctor check`: the preflight of every rank."""

from __future__ import annotations

import click

from ddpdoctor.commands.common import finish, json_option


@click.command(name="check")
@click.option("--nproc", type=click.IntRange(1, 1024), default=None,
              help="Ranks to start on this node [default: one per GPU, or 2 on CPU].")
@click.option("--backend", type=click.Choice(["gloo", "nccl"]), default=None,
              help="Force a backend [default: nccl when every rank has a GPU, else gloo].")
@click.option("--probe", "probes", multiple=True, metavar="NAME",
              help="Run only this probe (repeatable).")
@click.option("--deadline", type=click.FloatRange(1, 3600), default=60.0, show_default=True,
              help="Seconds after which ranks that have not answered are killed and named.")
@click.option("-v", "--verbose", is_flag=True, help="Show all evidence lines.")
@json_option
def command(nproc: int | None, backend: str | None, probes: tuple[str, ...],
            deadline: float, verbose: bool, json_path: str | None) -> None:
    """Preflight every rank before a run.

    Starts NPROC ranks on this node with a process group and runs the probes in each;
    a rank that does not answer within --deadline is killed and named.
    """
    from ddpdoctor.preflight import PROBES, run_check

    unknown = [p for p in probes if p not in PROBES]
    if unknown:
        raise click.BadParameter(f"unknown probe(s) {', '.join(unknown)}; "
                                 f"choose from {', '.join(PROBES)}", param_hint="--probe")
    names = list(probes) or list(PROBES)
    if nproc is None:
        import torch

        nproc = torch.cuda.device_count() if torch.cuda.is_available() else 2
    report = run_check(nproc, names, backend, deadline)
    finish(report, json_path, verbose=verbose)
