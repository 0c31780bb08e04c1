"""Launch the reference trainer from tests (this area's and other areas'): no torch import.

:func:`launch` starts the ranks directly (``python -m ddpdoctor.train`` with RANK,
WORLD_SIZE, MASTER_ADDR/PORT set, as torchrun would), which saves torchrun's own start-up
(~2 s) per launch, and behaves like torchrun on failure: when one rank exits non-zero the
others are killed. Every process gets its own session so a test can always kill the lot.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ports import free_port

from ddpdoctor.core.contract import RANK_LOG


@dataclass
class Launch:
    procs: list[subprocess.Popen]
    logs: list[Path]
    json_log: Path | None = None
    returncodes: list[int | None] = field(default_factory=list)

    @property
    def pids(self) -> list[int]:
        return [p.pid for p in self.procs]

    def output(self, rank: int) -> str:
        return self.logs[rank].read_bytes().decode("utf-8", "replace")

    def all_output(self) -> str:
        return "\n".join(f"--- rank {r}\n{self.output(r)}" for r in range(len(self.logs)))

    def records(self, event: str = "step") -> list[dict]:
        if not self.json_log or not self.json_log.exists():
            return []
        lines = self.json_log.read_text().splitlines()
        return [r for r in map(json.loads, filter(None, lines)) if r.get("event") == event]

    def alive(self) -> list[bool]:
        return [p.poll() is None for p in self.procs]

    def wait(self, timeout: float) -> list[int | None]:
        """Wait until every rank exits (killing the rest once one fails) or ``timeout``."""
        deadline = time.monotonic() + timeout
        failed_at = None
        while time.monotonic() < deadline:
            codes = [p.poll() for p in self.procs]
            if all(c is not None for c in codes):
                break
            if failed_at is None and any(c not in (None, 0) for c in codes):
                failed_at = time.monotonic()
            # like torchrun: a failed rank tears the others down (after a grace period,
            # so their own error lines get written)
            if failed_at is not None and time.monotonic() - failed_at > 3:
                self.kill()
            time.sleep(0.05)
        self.returncodes = [p.poll() for p in self.procs]
        return self.returncodes

    def kill(self) -> None:
        for p in self.procs:
            if p.poll() is None:
                try:
                    os.killpg(p.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for p in self.procs:
            try:
                p.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass

    def __enter__(self) -> Launch:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()


def launch(args: list[str], nproc: int, workdir: Path, json_log: bool = True,
           env: dict[str, str] | None = None, master_addr: str = "127.0.0.1",
           rank_env: dict[int, dict[str, str]] | None = None,
           wrap: dict[int, list[str]] | None = None) -> Launch:
    """Start ``nproc`` ranks of ``python -m ddpdoctor.train ARGS`` in ``workdir``.

    ``rank_env`` adds variables to one rank; ``wrap`` prefixes one rank's command (e.g.
    ``ip netns exec NS`` to run it on another "node"; the wrapper must exec the command).
    """
    workdir.mkdir(parents=True, exist_ok=True)
    port = free_port()
    jpath = workdir / "train.jsonl" if json_log else None
    if jpath is not None:
        jpath.unlink(missing_ok=True)
        args = [*args, "--json-log", str(jpath)]
    procs, logs = [], []
    for rank in range(nproc):
        e = dict(os.environ)
        e.update({"RANK": str(rank), "WORLD_SIZE": str(nproc), "LOCAL_RANK": str(rank),
                  "LOCAL_WORLD_SIZE": str(nproc), "MASTER_ADDR": master_addr,
                  "MASTER_PORT": str(port), "OMP_NUM_THREADS": "1", "TMPDIR": str(workdir),
                  "PYTHONUNBUFFERED": "1"})
        e.update(env or {})
        e.update((rank_env or {}).get(rank, {}))
        log = workdir / RANK_LOG.format(rank=rank)
        cmd = [*(wrap or {}).get(rank, []), sys.executable, "-m", "ddpdoctor.train", *args]
        with open(log, "wb") as f:
            procs.append(subprocess.Popen(cmd,
                                          stdout=f, stderr=subprocess.STDOUT, env=e,
                                          cwd=workdir, start_new_session=True))
        logs.append(log)
    return Launch(procs, logs, jpath)


def py_spy_dump(pid: int, timeout: float = 10) -> str:
    """The Python stack of ``pid`` (py-spy dump), or '' if py-spy cannot read it."""
    exe = Path(sys.executable).with_name("py-spy")
    cmd = [str(exe) if exe.exists() else "py-spy", "dump", "--pid", str(pid)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return r.stdout
