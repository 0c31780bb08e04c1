"""The ``ddpdoctor`` command line.

Each command lives in ``ddpdoctor/commands/<name>.py`` and exposes ``command`` (a click
command). The group imports a command's module only when that command runs, so
``ddpdoctor --help`` and the torch-free commands never pay for ``import torch``.
"""

from __future__ import annotations

import importlib
import os
import sys
from typing import Any

import click

from ddpdoctor import __version__
from ddpdoctor.core.contract import DEBUG
from ddpdoctor.core.errors import DoctorError, ExitCode

# name -> (module, one-line help shown by `ddpdoctor --help` without importing the module)
COMMANDS: dict[str, tuple[str, str]] = {
    "check": ("ddpdoctor.commands.check",
              "Preflight every rank before a run: env, GPUs, topology, links, bandwidth."),
    "attach": ("ddpdoctor.commands.attach",
               "Diagnose a hung job: stacks of every rank, the culprit rank and why."),
    "run": ("ddpdoctor.commands.run",
            "Run any launch command supervised: catch hangs, triage crashes."),
    "diagnose": ("ddpdoctor.commands.diagnose",
                 "Map the error lines of a crashed job's logs to findings and playbooks."),
    "train": ("ddpdoctor.commands.train",
              "Reference trainer (DDP/FSDP/ZeRO/PP/TP) that can plant any fault on purpose."),
    "plan": ("ddpdoctor.commands.plan",
             "Will it fit, and with which strategy: memory per rank, predicted and checked."),
    "scale": ("ddpdoctor.commands.scale",
              "Scaling evaluation at 1, 2, 4 ... ranks: efficiency, and why not linear."),
    "report": ("ddpdoctor.commands.report",
               "Render a --json report or a run directory as a self-contained HTML page."),
    "playbook": ("ddpdoctor.commands.playbook",
                 "Show how to fix a finding: list playbooks or render one."),
}


EXIT_DOCTOR_FAILED = ExitCode.DOCTOR_FAILED
DEBUG_ENV = DEBUG


def _reopen_closed_stdio() -> None:
    """Give a closed stdin/stdout/stderr (``0<&-``) /dev/null.

    Otherwise the next file or socket opened takes fd 0, 1 or 2, and every rank or child
    started later inherits it as its stdio; and ``sys.stdin`` is None, which commands
    reading stdin do not expect.
    """
    for fd, flags in ((0, os.O_RDONLY), (1, os.O_WRONLY), (2, os.O_WRONLY)):
        try:
            os.fstat(fd)
            continue
        except OSError:
            pass
        null = os.open(os.devnull, flags)
        if null != fd:
            os.dup2(null, fd)
            os.close(null)
    if sys.stdin is None:
        sys.stdin = open(0, closefd=False)  # lives as long as the process
    if sys.stdout is None:
        sys.stdout = open(1, "w", closefd=False)
    if sys.stderr is None:
        sys.stderr = open(2, "w", closefd=False)


def _fail(message: str, code: int = EXIT_DOCTOR_FAILED) -> None:
    """One line on stderr, exit 3; stdout is silenced first so that the interpreter's
    final flush of a full or closed stdout does not print a second error."""
    try:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)
        os.close(null)
        sys.stdout = open(os.devnull, "w")
    except OSError:
        pass
    try:
        sys.stderr.write(message[:500] + "\n")
        sys.stderr.flush()
    except (OSError, ValueError, AttributeError):
        pass
    os._exit(code)


class LazyGroup(click.Group):
    def main(self, *args: Any, **kwargs: Any) -> Any:
        """click's main, with no traceback ever reaching the user: an output that cannot
        be written (``> /dev/full``) or any error a command did not handle is one line
        on stderr and exit 3 (set DDPDOCTOR_DEBUG=1 for the traceback)."""
        _reopen_closed_stdio()
        try:
            return super().main(*args, **kwargs)
        except DoctorError as e:
            if os.environ.get(DEBUG_ENV):
                raise
            _fail(f"ddpdoctor: {e}", e.exit_code)
        except OSError as e:
            if os.environ.get(DEBUG_ENV):
                raise
            where = f": {e.filename}" if e.filename else ""
            _fail(f"ddpdoctor: {e.strerror or e}{where}")
        except Exception as e:  # the net under every command
            if os.environ.get(DEBUG_ENV):
                raise
            text = f"{type(e).__name__}: {e}".splitlines()[0]
            _fail(f"ddpdoctor: internal error: {text} ({DEBUG_ENV}=1 shows the traceback)")

    def list_commands(self, ctx: click.Context) -> list[str]:
        return list(COMMANDS)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS:
            return None
        module = importlib.import_module(COMMANDS[name][0])
        return module.command

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(name, help_) for name, (_, help_) in COMMANDS.items()]
        with formatter.section("Commands"):
            formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="ddpdoctor")
def main() -> None:
    """ddpdoctor: find out why a PyTorch distributed job hangs, crashes or runs slow.

    \b
    Before a run:        ddpdoctor check --nproc 2
    A job is stuck:      ddpdoctor attach PID
    Supervise a job:     ddpdoctor run -- torchrun --nproc-per-node 2 train.py
    After a crash:       ddpdoctor diagnose rank*.log
    How to fix it:       ddpdoctor playbook ID

    Every command prints a report, takes --json PATH and --html PATH (train: --html,
    its step log is --json-log), and exits 0 (healthy), 1 (an error finding), 2 (usage
    error) or 3 (the doctor itself could not run, or a report could not be written).
    """


