"""The ``ddpdoctor`` command line.

Each command lives in ``ddpdoctor/commands/<name>.py`` and exposes ``command`` (a click
command). The group imports a command's module only when that command runs, so
``ddpdoctor --help`` and the torch-free commands never pay for ``import torch``.
"""

from __future__ import annotations

import importlib

import click

from ddpdoctor import __version__

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
    "report": ("ddpdoctor.commands.report",
               "Render a --json report or a run directory as a self-contained HTML page."),
    "playbook": ("ddpdoctor.commands.playbook",
                 "Show how to fix a finding: list playbooks or render one."),
}


class LazyGroup(click.Group):
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

    Every command prints a report, takes --json PATH, and exits 0 (healthy),
    1 (an error finding), 2 (usage error) or 3 (the doctor itself could not run).
    """


