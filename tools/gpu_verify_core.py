"""The machinery of ``tools/gpu_verify.py``: steps with hard deadlines, results, the writers,
and the pure analysis of what a GPU run produced (tested on recorded data, no GPU needed).

Why a thread per step: a step is Python that starts commands; a deadline that only bounded
the commands would let the Python part (a hung read, a slow parse) run on. The runner waits
for the step's thread at most its budget, then kills every process group the step started
and moves on; a thread that still does not return is abandoned (daemon) and the step is
recorded as failed. So one step can never stop the others, and the total deadline holds.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import threading
import time
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

PASS, FAIL, SKIPPED = "pass", "fail", "skipped"
WRITE_RESERVE_S = 5.0   # kept back from the total for writing RESULT.md / result.json
MIN_STEP_S = 3.0        # below this a step is not started: it could not do anything useful
CANCEL_GRACE_S = 2.0    # a cancelled step's thread gets this long to notice before it is left
SCHEMA = "ddpdoctor.gpu-verify/1"


class StepSkipped(Exception):
    """Raised by a step that cannot run here; the message is the reason."""


class StepFailed(Exception):
    """Raised by a step whose check did not hold; the message says what was seen."""


@dataclass(frozen=True)
class Step:
    name: str
    title: str
    fn: Callable[[StepContext], None]
    budget_s: float
    needs_gpu: bool = True


@dataclass(frozen=True)
class StepResult:
    name: str
    title: str
    status: str
    reason: str
    seconds: float
    numbers: dict[str, Any]
    files: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["files"] = list(self.files)
        return d


@dataclass(frozen=True)
class Ran:
    """One finished command: exit code, its output (tails kept in memory, whole in files)."""

    cmd: tuple[str, ...]
    rc: int
    stdout: str
    stderr: str
    seconds: float

    @property
    def text(self) -> str:
        return self.stdout + self.stderr


@dataclass
class Session:
    """What every step shares: where to write, which Python, what the env step learnt."""

    out: Path
    python: str
    facts: dict[str, Any] = field(default_factory=dict)
    gpu_missing: str | None = "not probed yet"  # None once a usable GPU was seen

    @property
    def work(self) -> Path:
        return self.out / "work"


class StepContext:
    """Handed to a step: numbers and files it records, and ``run`` for bounded commands."""

    def __init__(self, session: Session, step: Step, deadline: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.session = session
        self.step = step
        self.deadline = deadline
        self.clock = clock
        self.numbers: dict[str, Any] = {}
        self.files: list[str] = []
        self.cancelled = threading.Event()
        self._procs: list[subprocess.Popen] = []
        self._lock = threading.Lock()

    def remaining(self) -> float:
        return self.deadline - self.clock()

    def path(self, name: str) -> Path:
        """A file of this step's, recorded in its result (relative to the output folder)."""
        p = self.session.out / name
        p.parent.mkdir(parents=True, exist_ok=True)
        rel = str(p.relative_to(self.session.out))
        if rel not in self.files:
            self.files.append(rel)
        return p

    def run(self, cmd: Iterable[str], timeout: float | None = None,
            env: dict[str, str] | None = None, log: str | None = None) -> Ran:
        """Run a command in a session of its own, bounded by ``timeout`` and by this step's
        deadline; on either the whole process group is killed and StepFailed raised."""
        if self.cancelled.is_set():
            raise StepFailed("step deadline passed before the command started")
        cmd = tuple(str(c) for c in cmd)
        limit = self.remaining() if timeout is None else min(timeout, self.remaining())
        if limit <= 0:
            raise StepFailed(f"no time left for {' '.join(cmd[:4])}")
        work = self.session.work
        work.mkdir(parents=True, exist_ok=True)
        name = log or f"{self.step.name}-{len(self._procs)}"
        out_p, err_p = work / f"{name}.out", work / f"{name}.err"
        t0 = time.monotonic()
        with open(out_p, "wb") as out, open(err_p, "wb") as err:
            proc = subprocess.Popen(cmd, stdout=out, stderr=err, stdin=subprocess.DEVNULL,
                                    env={**os.environ, "TMPDIR": str(work), **(env or {})},
                                    cwd=work, start_new_session=True)
            with self._lock:
                self._procs.append(proc)
            try:
                rc = proc.wait(timeout=limit)
            except subprocess.TimeoutExpired:
                kill_group(proc)
                raise StepFailed(f"`{' '.join(cmd[:6])}` ran past {limit:.0f} s and was "
                                 f"killed") from None
        if self.cancelled.is_set():
            raise StepFailed("killed at the step deadline")
        return Ran(cmd, rc, _read(out_p), _read(err_p), time.monotonic() - t0)

    def cancel(self) -> None:
        self.cancelled.set()
        with self._lock:
            procs = list(self._procs)
        for p in procs:
            kill_group(p)


def kill_group(proc: subprocess.Popen) -> None:
    """Kill the command and everything it started (torchrun's ranks, NCCL helpers)."""
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


def _read(path: Path, limit: int = 200_000) -> str:
    data = path.read_bytes()
    return data[-limit:].decode("utf-8", "replace").replace("\x00", "")


def run_steps(steps: list[Step], session: Session, total_s: float,
              clock: Callable[[], float] = time.monotonic,
              on_result: Callable[[StepResult], None] | None = None) -> list[StepResult]:
    """Every step in order, each inside its own budget and all inside ``total_s``."""
    end = clock() + total_s - WRITE_RESERVE_S
    results = []
    for step in steps:
        left = end - clock()
        if step.needs_gpu and session.gpu_missing is not None:
            res = _result(step, SKIPPED, f"no GPU: {session.gpu_missing}", 0.0)
        elif left < MIN_STEP_S:
            res = _result(step, SKIPPED, f"total deadline: {max(left, 0):.0f} s left of "
                          f"{total_s:.0f} s", 0.0)
        else:
            res = run_one(step, session, min(step.budget_s, left), clock)
        results.append(res)
        if on_result is not None:
            on_result(res)
    return results


def run_one(step: Step, session: Session, budget: float,
            clock: Callable[[], float] = time.monotonic) -> StepResult:
    t0 = clock()
    ctx = StepContext(session, step, t0 + budget, clock)
    box: dict[str, Any] = {}

    def body() -> None:
        try:
            step.fn(ctx)
            box["status"] = (PASS, "")
        except StepSkipped as e:
            box["status"] = (SKIPPED, str(e))
        except StepFailed as e:
            box["status"] = (FAIL, str(e))
        except BaseException as e:  # a step's own bug is that step's failure, not the run's
            box["status"] = (FAIL, f"{type(e).__name__}: {e}")

    t = threading.Thread(target=body, name=f"gpu-verify-{step.name}", daemon=True)
    t.start()
    t.join(budget)
    if t.is_alive():
        ctx.cancel()
        t.join(CANCEL_GRACE_S)
        status, reason = FAIL, f"deadline: the step ran past its {budget:.0f} s and was stopped"
    else:
        status, reason = box.get("status", (FAIL, "the step ended without a result"))
    return StepResult(step.name, step.title, status, reason, round(clock() - t0, 2),
                      dict(ctx.numbers), tuple(ctx.files))


def _result(step: Step, status: str, reason: str, seconds: float) -> StepResult:
    return StepResult(step.name, step.title, status, reason, seconds, {}, ())


# --- writers -------------------------------------------------------------------------


def result_json(results: list[StepResult], facts: dict[str, Any], total_s: float,
                seconds: float) -> dict[str, Any]:
    counts = {s: sum(r.status == s for r in results) for s in (PASS, FAIL, SKIPPED)}
    return {"schema": SCHEMA, "facts": facts, "deadline_s": total_s,
            "seconds": round(seconds, 2), "counts": counts,
            "steps": [r.to_dict() for r in results]}


def result_markdown(data: dict[str, Any]) -> str:
    facts = data.get("facts", {})
    c = data["counts"]
    lines = ["# gpu-verify result", "",
             f"{facts.get('date', '?')} · device: {facts.get('device') or 'none'} · "
             f"driver {facts.get('driver') or '-'} · CUDA {facts.get('cuda') or '-'} · "
             f"NCCL {facts.get('nccl') or '-'} · torch {facts.get('torch') or '-'} · "
             f"Python {facts.get('python') or '-'}", "",
             f"{c['pass']} pass, {c['fail']} fail, {c['skipped']} skipped in "
             f"{data['seconds']:.0f} s (deadline {data['deadline_s']:.0f} s)", "",
             "| step | status | s | numbers / reason |", "|---|---|---|---|"]
    for s in data["steps"]:
        detail = "; ".join(f"{k}={_fmt(v)}" for k, v in s["numbers"].items()
                           if not isinstance(v, dict) and len(_fmt(v)) <= 80)
        if s["reason"]:
            detail = f"{s['reason']}" + (f" — {detail}" if detail else "")
        lines.append(f"| {s['name']} | {s['status']} | {s['seconds']:.1f} | "
                     f"{_cell(detail)} |")
    lines += ["", "Per step, the nested numbers and the files it wrote are in result.json; "
              "every command's whole output is under work/."]
    return "\n".join(lines) + "\n"


def _fmt(v: Any) -> str:
    if isinstance(v, list):
        return "[" + ", ".join(_fmt(x) for x in v) + "]"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")[:600]


def write_results(out: Path, data: dict[str, Any]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    (out / "result.json").write_text(json.dumps(data, indent=1, default=str) + "\n")
    (out / "RESULT.md").write_text(result_markdown(data))


# --- analysis (pure; tested on recorded data) ----------------------------------------


def smi_fields(text: str) -> dict[str, str]:
    """The `nvidia-smi -q` fields, first GPU only, keyed by their section path.

    nvidia-smi indents ``Key : value`` under section lines; the same key repeats in several
    sections (``FB Memory Usage/Total``, ``BAR1 Memory Usage/Total``), hence the path. The
    ``GPU 00000000:18:00.0`` line and the ``NVSMI LOG`` banner are no part of a path."""
    out: dict[str, str] = {}
    section: list[tuple[int, str]] = []
    gpus = 0
    for raw in text.splitlines():
        if not raw.strip():
            continue
        indent = len(raw) - len(raw.lstrip())
        line = raw.strip()
        if re.fullmatch(r"GPU [0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f]+", line):
            gpus += 1
            if gpus > 1:  # first GPU only: the checks run on GPU 0
                break
            section = []
            continue
        key, sep, value = line.partition(":")
        key, value = key.strip(), value.strip()
        while section and section[-1][0] >= indent:
            section.pop()
        if not sep or not value:
            if "NVSMI" not in key:
                section.append((indent, key))
            continue
        out.setdefault("/".join([k for _, k in section] + [key]), value)
    return out


def _int_prefix(text: str | None) -> int | None:
    m = re.match(r"\s*(\d+)", text or "")
    return int(m.group(1)) if m else None


def compare_nvml_smi(nvml: dict[str, Any], smi_text: str) -> dict[str, dict[str, Any]]:
    """NVML (ddpdoctor's reader) against `nvidia-smi -q`, field by field, first GPU."""
    smi = smi_fields(smi_text)
    dev = (nvml.get("devices") or [{}])[0]
    mem = dev.get("memory_total")
    pairs = {
        "driver_version": (nvml.get("driver_version"), smi.get("Driver Version")),
        "name": (dev.get("name"), smi.get("Product Name")),
        "memory_total_mib": (mem // 2**20 if isinstance(mem, int) else None,
                             _int_prefix(smi.get("FB Memory Usage/Total"))),
        "ecc_current": (dev.get("ecc_mode_current"),
                        _on_off(smi.get("ECC Mode/Current"))),
        "pci_bus_id": ((dev.get("pci_bus_id") or "").lower() or None,
                       (smi.get("PCI/Bus Id") or "").lower() or None),
    }
    return {k: {"nvml": a, "nvidia_smi": b, "match": _same(k, a, b)}
            for k, (a, b) in pairs.items()}


def _on_off(v: str | None) -> bool | None:
    return {"enabled": True, "disabled": False}.get((v or "").lower())


def _same(key: str, a: Any, b: Any) -> bool | None:
    if a is None or b is None:
        return None
    if key == "memory_total_mib":  # drivers differ on counting the reserved part: 2%
        return abs(a - b) <= 0.02 * max(a, b)
    if key == "pci_bus_id":  # NVML: 00000000:18:00.0; nvidia-smi the same, case may differ
        return str(a).split(":", 1)[-1] == str(b).split(":", 1)[-1]
    return a == b


def findings_in_events(path: Path) -> list[dict[str, Any]]:
    """The finding records of a watch events file (JSON lines; other kinds skipped)."""
    out = []
    if not path.exists():
        return out
    for line in path.read_text(errors="replace").splitlines():
        try:
            rec = json.loads(line)
        except ValueError:
            continue
        if isinstance(rec, dict) and rec.get("id"):
            out.append(rec)
    return out


def finding(findings: list[dict[str, Any]], fid: str) -> dict[str, Any]:
    """The first finding with id ``fid``, or StepFailed naming what was found instead."""
    for f in findings:
        if f.get("id") == fid:
            return f
    seen = sorted({str(f.get("id")) for f in findings}) or ["none"]
    raise StepFailed(f"expected {fid}, found: {', '.join(seen)}")


def jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def summaries(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {r["strategy"]: r for r in records if r.get("event") == "summary"}


def bench_numbers(summary: dict[str, Any]) -> dict[str, Any]:
    """benchmarks/bench_watch_overhead.py --json, as the step's numbers."""
    return {"bench_step_ms": round(summary["step_ms"], 2),
            "watch_overhead": round(summary["overhead"], 5),
            "watch_overhead_low": round(summary["low"], 5),
            "watch_overhead_high": round(summary["high"], 5),
            "watch_cpu_us_per_step": round(summary["cpu_us"]),
            "check_step_extra": round(summary["check_extra"], 4)}


def losses(records: list[dict[str, Any]]) -> list[float]:
    return [r["loss"] for r in records if r.get("event") == "step"]


def error_lines(text: str, patterns: tuple[str, ...] = ("error", "duplicate", "nccl")) -> str:
    """The lines of a failed run worth keeping for the knowledge base, in order, deduplicated."""
    seen, keep = set(), []
    for line in text.splitlines():
        low = line.lower()
        if any(p in low for p in patterns) and line not in seen:
            seen.add(line)
            keep.append(line)
    return "\n".join(keep[:60])
