"""Rank output a launcher writes to files instead of the console it shares with run.

``deepspeed --enable_each_rank_log DIR`` gives each rank ``DIR/<timestamp>_rank<R>.log``;
``torchrun --log-dir DIR --redirects 3`` (without ``--tee``) gives each local rank
``DIR/<run id>/attempt_<N>/<local rank>/stdout.log`` and ``stderr.log``. run's console copy
then holds the launcher's lines only, and a crash's traceback is in those files: the triage
reads them too. Pure but for the directory listing: the command line says where, the files
written since the job started are the job's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

# the launchers whose command line may say where ranks' output goes
_DEEPSPEED = ("deepspeed", "deepspeed.launcher.runner", "deepspeed.launcher.launch")
_TORCHRUN = ("torchrun", "torch.distributed.run", "torch.distributed.launch")
MAX_FILES = 256  # a log dir of earlier runs is not read whole: the newest files are the job's


@dataclass(frozen=True)
class Redirect:
    """Where a launcher sends its ranks' output: ``pattern`` under ``directory``."""

    launcher: str
    directory: Path
    pattern: str
    # the paths name the rank (a global rank, or a local one on a one-node job); else the
    # files are read without a rank
    paths_name_ranks: bool


def _flag(cmd: list[str], *names: str) -> str | None:
    """The value of the last of ``names`` (``--x V`` or ``--x=V``) in ``cmd``."""
    value = None
    for i, arg in enumerate(cmd):
        for n in names:
            if arg == n and i + 1 < len(cmd):
                value = cmd[i + 1]
            elif arg.startswith(n + "="):
                value = arg.split("=", 1)[1]
    return value


def _launcher(cmd: list[str]) -> tuple[str, list[str]]:
    """("deepspeed" | "torchrun" | "", the launcher's own arguments): a path or ``-m``
    module in the first words, then its arguments up to the training script (a ``.py``
    path, or the module after the launcher's own ``-m``/``--module``): the script's own
    ``--log-dir`` is not the launcher's."""
    for i, arg in enumerate(cmd[:4]):
        name = cmd[i + 1] if arg == "-m" and i + 1 < len(cmd) else Path(arg).name
        kind = "deepspeed" if name in _DEEPSPEED else "torchrun" if name in _TORCHRUN else ""
        if kind:
            start = i + 2 if arg == "-m" else i + 1
            return kind, _before_script(cmd[start:])
    return "", []


def _before_script(args: list[str]) -> list[str]:
    for i, arg in enumerate(args):
        if arg in ("-m", "--module", "--no-python", "--no_python") and i + 1 < len(args):
            return args[:i + 1]
        if not arg.startswith("-") and arg.endswith(".py"):
            return args[:i]
    return args


def redirect_of(cmd: list[str], cwd: Path) -> Redirect | None:
    """Where ``cmd``'s launcher sends its ranks' output, if it does."""
    launcher, own = _launcher(cmd)
    if launcher == "deepspeed":
        d = _flag(own, "--enable_each_rank_log")
        if d and d != "None":
            return Redirect(launcher, cwd / d, "*_rank*.log", paths_name_ranks=True)
    if launcher == "torchrun":
        d = _flag(own, "--log-dir", "--log_dir")
        redirects = _flag(own, "--redirects", "-r")
        tee = _flag(own, "--tee", "-t")
        # with --tee the console has every line already: reading the files would count
        # each line twice
        if d and redirects not in (None, "0") and tee in (None, "0"):
            one_node = _flag(own, "--nnodes") in (None, "1", "1:1")
            return Redirect(launcher, cwd / d, "**/attempt_*/*/std*.log",
                            paths_name_ranks=one_node)
    return None


def rank_logs(redirect: Redirect, since: float) -> list[Path]:
    """The files the job wrote there (modified at ``since`` or later, a wall-clock time),
    oldest first."""
    try:
        found = [p for p in redirect.directory.glob(redirect.pattern) if p.is_file()]
        dated = [(p.stat().st_mtime, p) for p in found]
    except OSError:
        return []
    mine = sorted((t, p) for t, p in dated if t >= since)[-MAX_FILES:]
    return [p for _, p in mine]
