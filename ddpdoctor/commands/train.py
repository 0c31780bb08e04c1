"""`ddpdoctor train`: launch the reference trainer under torchrun, optionally with a fault.

This module stays torch-free: it validates the options, builds the torchrun command line
and passes torchrun's exit code on. The training itself is ``ddpdoctor.train.worker``.
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Callable
from typing import Any, TypeVar, cast

import click

from ddpdoctor.commands.common import DoctorCommand, FiniteFloat, html_option, write_html
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_USAGE
from ddpdoctor.train import injections
from ddpdoctor.train.config import STRATEGIES, check_resume, check_world
from ddpdoctor.train.options import OPTIONS, Option, configs, to_argv

F = TypeVar("F", bound=Callable[..., object])  # the command's function, as click.option takes it

_HELP = """Reference trainer: a small GPT trained with DDP, FSDP2, ZeRO, pipeline or tensor
parallelism under torchrun. If this trains on your cluster, the cluster is fine. With
--inject it plants a fault on purpose, for demos and for testing the doctor.

\b
Strategies (--strategy, a comma list runs several in one launch):
{strategies}

\b
Injections (--inject NAME[@RANK|@all][:STEP]; steps count from 1):
{injections}

\b
Examples:
  ddpdoctor train --strategy fsdp --steps 20
  ddpdoctor train --nproc 4 --strategy tp-dp
  ddpdoctor train --inject nan@1:3 --json-log losses.jsonl
  torchrun --nproc-per-node 2 -m ddpdoctor.train --strategy ddp   (a rank, directly)

Exit code: torchrun's (0 when every rank finished), 2 for a usage error.
"""


def _help() -> str:
    strategies = "\n".join(f"  {k:<6} {v}" for k, v in STRATEGIES.items())
    inj = "\n".join("  " + line for line in injections.describe().splitlines())
    return _HELP.format(strategies=strategies, injections=inj)


def _default_nproc(strategies: list[str]) -> int:
    return 4 if {"tp-dp", "hsdp"} & set(strategies) else 2


def _add_options(f: F) -> F:
    for o in reversed(OPTIONS):
        if o.type is bool:
            f = click.option(o.flag, is_flag=True, default=False, help=o.help)(f)
        elif o.type is list:
            f = click.option(o.flag, multiple=True, metavar="FAULT", help=o.help)(f)
        else:
            f = click.option(o.flag, type=_click_type(o), default=o.default, show_default=True,
                             help=o.help)(f)
    return f


def _click_type(o: Option) -> click.ParamType | type:
    """Every number bounded and finite (exit 2 with the reason), choices as choices."""
    if o.choices:
        return click.Choice(list(o.choices))
    if o.type is int:
        # cast: an int option's bounds are ints (Option types them float | None for both)
        return click.IntRange(cast("int | None", o.min), cast("int | None", o.max))
    if o.type is float:
        return FiniteFloat(o.min, o.max, min_open=o.min_open)
    return o.type


@click.command(name="train", cls=DoctorCommand, help=_help(),
               context_settings={"max_content_width": 100})
@click.option("--nproc", type=click.IntRange(1, 1024), default=None,
              help="Ranks on this machine (default 2; 4 when tp-dp or hsdp is among the "
              "strategies).")
@click.option("--dry-run", is_flag=True, help="Print the torchrun command and exit.")
@html_option
@_add_options
# values: Any, one per OPTIONS row, each of that Option's type (int, float, str, bool or a
# tuple of str); read by name here and in train.options
def command(nproc: int | None, dry_run: bool, html_path: str | None, **values: Any) -> int:
    if "list" in values.get("inject", ()):
        click.echo(injections.describe())
        return 0
    try:
        mcfg, rcfg = configs(values)
        injs = injections.parse_all(rcfg.injections)
        world = nproc if nproc is not None else _default_nproc(rcfg.strategies)
        if world < 1:
            raise ValueError("--nproc must be at least 1")
        check_world(mcfg, rcfg, world)
        check_resume(rcfg)
        injections.check_steps(injs, rcfg.steps)
        for name in rcfg.strategies:
            injections.check_compatible(injs, name, world,
                                        injections.options_on(rcfg.precision))
        # Every rank runs here, in this environment: say a refusal once, before torchrun.
        # With --device auto the device is not known yet (no torch here): the rank checks.
        device = rcfg.device if rcfg.device == "cpu" else "cuda"
        for rank in range(world):
            injections.check_host(injs, rank, device)
    except ValueError as e:
        raise DoctorError(str(e), EXIT_USAGE) from None
    env = os.environ.copy()
    if html_path:
        from ddpdoctor.report.train_sources import prepare

        events = prepare(values, env)
    from ddpdoctor.train.launch import torchrun_argv

    argv = torchrun_argv(world, to_argv(values))
    if dry_run:
        click.echo(" ".join(argv))
        return 0
    try:
        proc = subprocess.Popen(argv, env=env)
    except OSError as e:
        raise DoctorError(f"cannot start torchrun: {e}") from None
    try:
        rc = proc.wait()
    except KeyboardInterrupt:
        # the terminal's SIGINT reached torchrun too; let it tear the ranks down
        rc = proc.wait()
    if html_path:
        from ddpdoctor.report.train_report import train_report

        try:
            write_html(train_report(rc, values["json_log"], events, argv), html_path,
                       json_logs=[values["json_log"]])
        except DoctorError as e:
            if rc == 0:
                raise  # the training was fine, the page asked for is missing: exit 3
            # the training's own failure is the exit code to keep; the page's is said
            click.echo(f"ddpdoctor train: {e}", err=True)
    return rc
