"""Launch one run per world size and collect what it printed. No torch here.

Each run is a new session (its own process group) so that a deadline or Ctrl-C ends
torchrun and every rank it started, and nothing outlives ``ddpdoctor scale``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from ddpdoctor.scale.lines import MODE_ENV, NPROC_ENV, RANK_BATCH_ENV

_TORCHRUN_MODULES = ("torch.distributed.run", "torch.distributed.launch")
_NPROC_FLAGS = ("--nproc-per-node", "--nproc_per_node")


@dataclass
class RunSpec:
    world: int
    argv: list[str]
    env: dict[str, str]
    log: Path                     # stdout + stderr of the run
    json_log: Path | None = None  # the trainer's --json-log
    rank_batch: int | None = None


@dataclass
class RunResult:
    spec: RunSpec
    returncode: int | None        # None: killed at the deadline
    seconds: float
    output: str = field(repr=False, default="")

    @property
    def ok(self) -> bool:
        return self.returncode == 0


def launcher_index(argv: list[str]) -> int | None:
    """Index of the last launcher token (``torchrun`` / ``-m torch.distributed.run``)."""
    if argv and os.path.basename(argv[0]) == "torchrun":
        return 0
    for i in range(len(argv) - 1):
        if argv[i] == "-m" and argv[i + 1] in _TORCHRUN_MODULES:
            return i + 1
    return None


def with_nproc(argv: list[str], world: int) -> list[str]:
    """A torchrun command with its --nproc-per-node set to ``world`` (inserted if absent).
    Every other command is returned as is: it reads ``DDPDOCTOR_SCALE_NPROC``."""
    at = launcher_index(argv)
    if at is None:
        return list(argv)
    out = list(argv[:at + 1])
    rest = argv[at + 1:]
    i, replaced = 0, False
    while i < len(rest):
        tok = rest[i]
        name = tok.split("=", 1)[0]
        if name in _NPROC_FLAGS and not replaced:
            out.append(f"--nproc-per-node={world}")
            replaced = True
            i += 1 if "=" in tok else 2
            continue
        if not tok.startswith("-"):  # the script: torchrun's own options end here
            out.extend(rest[i:])
            break
        out.append(tok)
        i += 1
    if not replaced:
        out.insert(at + 1, f"--nproc-per-node={world}")
    return out


def run_env(world: int, mode: str, rank_batch: int | None) -> dict[str, str]:
    env = os.environ.copy()
    env[NPROC_ENV] = str(world)
    env[MODE_ENV] = mode
    if rank_batch is not None:
        env[RANK_BATCH_ENV] = str(rank_batch)
    # torchrun sets OMP_NUM_THREADS=1 only for more than one rank: without this the
    # 1-rank baseline would use every core and each larger world one core per rank.
    env.setdefault("OMP_NUM_THREADS", "1")
    env.setdefault("PYTHONUNBUFFERED", "1")
    return env


def trainer_argv(world: int, options: list[str], json_log: Path) -> list[str]:
    from ddpdoctor.train.launch import torchrun_argv

    return torchrun_argv(world, [*options, "--json-log", str(json_log)])


def execute(spec: RunSpec, timeout: float) -> RunResult:
    """Run ``spec`` to its end or its deadline; its output goes to ``spec.log``."""
    start = time.monotonic()
    with open(spec.log, "wb") as out:
        proc = subprocess.Popen(spec.argv, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, env=spec.env,
                                start_new_session=True)
        try:
            rc: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            rc = None
        except KeyboardInterrupt:
            _kill_group(proc)
            raise
        finally:
            _kill_group(proc)
    text = spec.log.read_bytes().decode("utf-8", "replace")
    return RunResult(spec, rc, time.monotonic() - start, text)


def _kill_group(proc: subprocess.Popen) -> None:
    """End the run's whole session: torchrun, its ranks and their DataLoader workers."""
    for sig in (signal.SIGTERM, signal.SIGKILL):
        try:
            os.killpg(proc.pid, sig)
        except (ProcessLookupError, PermissionError):
            return
        try:
            proc.wait(timeout=5)
            if sig == signal.SIGTERM:
                # the leader is gone; ranks it left behind still carry the session
                time.sleep(0.1)
        except subprocess.TimeoutExpired:
            continue


_DEVICE = re.compile(r"\] world \d+ on (cpu|cuda)")


def trainer_device(output: str) -> str | None:
    """The device the trainer says it ran on (its first log line)."""
    m = _DEVICE.search(output)
    return m.group(1) if m else None

