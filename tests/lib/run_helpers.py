"""Shared by the run tests: start `ddpdoctor run` jobs side by side and always clean up."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

PY = sys.executable
HANG = str(Path(__file__).parents[1] / "fixtures" / "hangs" / "hang.py")


def doctor() -> list[str]:
    return [PY, "-m", "ddpdoctor"]


def trainer(*args: str, nproc: int = 2) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc),
            "-m", "ddpdoctor.train", "--strategy", "ddp", *args]


def hang_script(fault: str, culprit: int, nproc: int = 2) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--nproc-per-node", str(nproc), HANG, fault,
            "--culprit", str(culprit)]


def kill_tree(pid: int) -> None:
    """SIGKILL ``pid``, every process group under it and every descendant: the doctor
    starts the job in a session of its own, so killing the doctor's group is not enough."""
    import psutil

    try:
        procs = [psutil.Process(pid)]
        procs += procs[0].children(recursive=True)
    except psutil.Error:
        procs = []
    for p in procs:
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except OSError:
            pass
        try:
            p.kill()
        except psutil.Error:
            pass
    try:
        os.killpg(pid, signal.SIGKILL)
    except OSError:
        pass


def free_deepspeed_shm(cmd: list[str]) -> None:
    """DeepSpeed's CPU all-reduce leaves its shared-memory buffers (66 MiB a rank, named
    for the job's master port) in /dev/shm when its ranks are killed: 256 of them filled
    17 GB of this machine's RAM over some sessions, and CI's pytest workers died."""
    port = next((cmd[i + 1] for i, a in enumerate(cmd[:-1]) if a == "--master_port"), None)
    if port is None:
        return
    for leftover in Path("/dev/shm").glob(f"deepspeed_allreduce_buffer_*_{port}_*"):
        leftover.unlink(missing_ok=True)


@dataclass
class RunJob:
    name: str
    tmp: Path
    cmd: list[str]
    args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = None
    returncode: int | None = None
    took: float = 0.0

    @property
    def json_path(self) -> Path:
        return self.tmp / "report.json"

    @property
    def run_dir(self) -> Path:
        return self.tmp / "run"

    @property
    def ready_dir(self) -> Path:
        return self.tmp / "ready"

    def start(self) -> RunJob:
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.ready_dir.mkdir(exist_ok=True)
        env = dict(os.environ, TMPDIR=str(self.tmp), OMP_NUM_THREADS="1",
                   HANG_READY_DIR=str(self.ready_dir), **self.env)
        self.t0 = time.monotonic()
        with open(self.tmp / "doctor.out", "wb") as out:
            self.proc = subprocess.Popen(
                [*doctor(), "run", *self.args, "--json", str(self.json_path), "--run-dir",
                 str(self.run_dir), "--", *self.cmd],
                env=env, stdout=out, stderr=subprocess.STDOUT, cwd=self.tmp,
                start_new_session=True)
        return self

    def poll(self) -> int | None:
        rc = self.proc.poll()
        if rc is not None and self.returncode is None:
            self.returncode = rc
            self.took = time.monotonic() - self.t0
        return rc

    def kill(self) -> None:
        if self.proc is not None:
            kill_tree(self.proc.pid)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                pass
        free_deepspeed_shm(self.cmd)

    @property
    def output(self) -> str:
        return (self.tmp / "doctor.out").read_bytes().decode("utf-8", "replace")

    def report(self) -> dict:
        assert self.json_path.exists(), f"{self.name}: no report; output:\n{self.output}"
        return json.loads(self.json_path.read_text())


def run_all(jobs: list[RunJob], deadline_s: float) -> None:
    """Start every job, wait for all to finish (or the deadline, then kill them)."""
    try:
        for j in jobs:
            j.start()
        deadline = time.monotonic() + deadline_s
        while time.monotonic() < deadline:
            if all(j.poll() is not None for j in jobs):
                return
            time.sleep(0.2)
    finally:
        for j in jobs:
            if j.poll() is None:
                j.kill()  # the deadline passed: kill and let the assertions say which
            else:
                j.kill()  # a doctor that exited leaves nothing; make sure of it


def run_doctor(cwd: Path, *args: str, env: dict | None = None, timeout: float = 60,
               ) -> subprocess.CompletedProcess:
    """``ddpdoctor run ARGS`` in ``cwd`` (also its TMPDIR), the whole tree killed after."""
    proc = subprocess.Popen([PY, "-m", "ddpdoctor", "run", *args], cwd=cwd,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, TMPDIR=str(cwd), **(env or {})),
                            start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    finally:
        kill_tree(proc.pid)
    return subprocess.CompletedProcess(proc.args, proc.returncode, out.decode(), err.decode())


def findings(report: dict) -> list[tuple[str, list[int]]]:
    return [(f["id"], f["ranks"]) for f in report["findings"]]
