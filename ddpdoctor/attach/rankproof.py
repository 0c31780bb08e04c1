"""Which processes are ranks of a distributed job, and why the others are not.

attach stops processes for a moment (py-spy's ptrace) and asks them for Flight Recorder
dumps; a hang verdict is only meaningful for ranks. So it touches only processes it has
proven to be ranks. The proof is the launcher's own mark: torchrun,
``torch.distributed.launch``, deepspeed, accelerate and MPI launchers put the rank
variables into each rank's environment before exec, where ``/proc/PID/environ`` shows them.
A shell, a web server or an unrelated Python program has none of them. ddpdoctor's own
process and its ancestors are never targets, whatever their environment says (a shell that
exported RANK, the launcher ddpdoctor itself runs under).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from ddpdoctor.core.rankclaim import PYTHON_EXE, argv_rank

# Per launcher family, the variables in the order they are trusted: torch's own names,
# then Open MPI's, then MPICH/Intel MPI (PMI) and PMIx. Set only on launched processes.
RANK_VARS = ("RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK")
LOCAL_RANK_VARS = ("LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID")
WORLD_SIZE_VARS = ("WORLD_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE")
LOCAL_WORLD_SIZE_VARS = ("LOCAL_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_SIZE", "MPI_LOCALNRANKS")
PROOF = "RANK, LOCAL_RANK or WORLD_SIZE"  # how messages name the proof

# Launchers: never ranks themselves (torchrun started inside a Slurm step may carry the
# step's RANK), only parents of ranks. Matched on the program, a Python's script, or -m.
_LAUNCHER_PROGRAMS = frozenset({
    "torchrun", "deepspeed", "accelerate", "mpirun", "mpiexec", "mpiexec.hydra", "orterun",
    "prterun", "prun", "hydra_pmi_proxy", "srun", "slurmstepd"})
_LAUNCHER_MODULES = frozenset({
    "torch.distributed.run", "torch.distributed.launch", "torch.distributed.elastic.agent",
    "deepspeed.launcher.launch", "deepspeed.launcher.runner", "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli"})

SELF = "it is this ddpdoctor process itself"
ANCESTOR = "it is an ancestor of this ddpdoctor process (ddpdoctor never targets itself)"


def _int(env: dict[str, str], names: tuple[str, ...]) -> tuple[int | None, str]:
    """The first of ``names`` set to an integer, and its name."""
    for name in names:
        try:
            return int(env[name]), name
        except (KeyError, ValueError):
            continue
    return None, ""


@dataclass(frozen=True)
class RankMark:
    """The rank variables of one process's environment."""

    rank: int | None  # RANK (or its MPI spelling)
    local_rank: int | None
    world_size: int | None
    local_world_size: int | None
    source: str  # the variable that numbers it; "" when only the world size is set
    argv: str = ""  # where its command line numbers it instead: what it says (argv_mark)

    @property
    def number(self) -> int | None:
        """The rank number: RANK when set; else LOCAL_RANK (equal to RANK on one node)."""
        return self.rank if self.rank is not None else self.local_rank

    @property
    def numbered_by(self) -> str:
        """What gives its number: its command line, RANK, or LOCAL_RANK alone."""
        return COMMAND_LINE if self.argv else "env" if self.rank is not None else "local_rank"

    @property
    def identity(self) -> tuple[int | None, int | None, int | None]:
        """Equal in a rank and its forked workers (which inherit its environment)."""
        return self.rank, self.local_rank, self.world_size


def rank_mark(env: dict[str, str]) -> RankMark | None:
    """The rank variables in ``env``; None when no rank variable is set to an integer."""
    rank, rank_var = _int(env, RANK_VARS)
    local, local_var = _int(env, LOCAL_RANK_VARS)
    world, _ = _int(env, WORLD_SIZE_VARS)
    if rank is None and local is None and world is None:
        return None
    return RankMark(rank, local, world, _int(env, LOCAL_WORLD_SIZE_VARS)[0],
                    rank_var or local_var)


COMMAND_LINE = "command_line"  # RankMark.source of a rank its own command line numbers


def argv_mark(cmdline: list[str]) -> RankMark | None:
    """The rank a Python's own command line gives it where its environment gives none
    (``python main.py --rank 1 --world-size 2 --dist-url tcp://...``, core/rankclaim.py)."""
    said = argv_rank(cmdline)
    if said is None:
        return None
    return RankMark(said.rank, said.local_rank, said.world_size, None, COMMAND_LINE,
                    argv=said.detail)


def is_python(argv0_names: list[str]) -> bool:
    """Any of the basenames (its executable, its argv[0]) is a Python interpreter."""
    return any(PYTHON_EXE.match(n) for n in argv0_names)


def launcher_name(cmdline: list[str]) -> str:
    """The launcher a command line runs ('' for none): the program itself, the script a
    Python runs (``python /venv/bin/torchrun``) or its module (``python -m X``)."""
    if not cmdline:
        return ""
    prog = os.path.basename(cmdline[0])
    if prog in _LAUNCHER_PROGRAMS:
        return prog
    if not PYTHON_EXE.match(prog):
        return ""
    args = iter(cmdline[1:])
    for arg in args:
        if arg == "-m":
            module = next(args, "")
        elif arg.startswith("-m") and not arg.startswith("--"):
            module = arg[2:]
        elif arg == "-c" or (arg.startswith("-c") and not arg.startswith("--")):
            return ""
        elif arg.startswith("-"):
            continue  # -u, -X opt, -W... (an option's value is never a launcher's name)
        else:
            script = os.path.basename(arg)
            return script if script in _LAUNCHER_PROGRAMS else ""
        return module if module in _LAUNCHER_MODULES else ""
    return ""


def own_lineage() -> dict[int, str]:
    """This process and its ancestors, each with why it is never a target."""
    import psutil

    me = psutil.Process()
    out = {me.pid: SELF}
    try:
        out.update((p.pid, ANCESTOR) for p in me.parents())
    except psutil.Error:
        pass
    return out


@dataclass(frozen=True)
class ProcFacts:
    """What attach knows of one process before it may touch it."""

    pid: int
    lineage: str = ""  # SELF / ANCESTOR, or ""
    launcher: str = ""  # the launcher it runs, or ""
    python: bool = False
    env: str = "read"  # "read", "denied" (permission), "zombie", "gone"
    mark: RankMark | None = None

    @property
    def is_rank(self) -> bool:
        """Proven a rank (or one of a rank's Python workers, sorted out by the caller)."""
        return (not self.lineage and not self.launcher and self.python and self.env == "read"
                and self.mark is not None)

    def why_not(self) -> str:
        """Why this process is not a rank, as a clause of one line."""
        if self.lineage:
            return self.lineage
        if self.env == "gone":
            return "it exited while being looked at"
        if self.env == "zombie":
            return "it has exited (a zombie, not reaped)"
        if self.launcher:
            return f"it is a launcher ({self.launcher}), not a rank"
        if self.env == "denied":
            return (f"no permission to read /proc/{self.pid}/environ, so nothing proves it "
                    "is a rank (run ddpdoctor as the job's user or as root)")
        if self.mark is None:
            what = "is not a Python process and has" if not self.python else "has"
            return f"it {what} no {PROOF} in its environment"
        return f"it is not a Python process ({self.mark.source or 'WORLD_SIZE'} is set)"


def why_no_ranks_under(below: list[ProcFacts]) -> str:
    """Why no process under a target is a rank, as a clause of one line."""
    if not below:
        return "no processes run under it"
    denied = [f.pid for f in below if f.env == "denied"]
    if len(below) == 1:
        return f"the one process under it (PID {below[0].pid}) is not a rank: {below[0].why_not()}"
    text = (f"none of the {len(below)} processes under it is a Python process with {PROOF} "
            "in its environment")
    if denied:
        text += (f" ({len(denied)} of them could not be read: no permission to read "
                 f"/proc/{denied[0]}/environ; run ddpdoctor as the job's user or as root)")
    return text
