"""One sweep: which runs to launch (trainer or user command, weak or strong), running them
one after another with progress, and turning each into a measurement or a failure."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from statistics import median
from typing import Any

from ddpdoctor.core.findings import Finding
from ddpdoctor.scale import runner
from ddpdoctor.scale.measure import (
    NoThroughput,
    RunMeasurement,
    from_trainer_records,
    from_user_output,
)


@dataclass
class Sweep:
    worlds: list[int]
    mode: str                     # "weak" | "strong"
    rank_batch: dict[int, int | None]
    warmup: int
    timeout: float
    workdir: Path
    user_cmd: list[str] | None = None
    train: dict[str, Any] = field(default_factory=dict)  # trainer option values
    repeat: int = 1               # runs per world size; the fastest one counts


class ScaleError(Exception):
    """The doctor cannot measure (exit 3): a command that prints no throughput."""


def parse_nproc_list(text: str) -> list[int]:
    """``"1,2,4"`` -> [1, 2, 4]; ValueError with a one-line reason."""
    items = [t.strip() for t in text.split(",")]
    if not text.strip() or any(not t for t in items):
        raise ValueError(f"--nproc-list {text!r}: expected world sizes like 1,2,4")
    try:
        worlds = [int(t) for t in items]
    except ValueError:
        raise ValueError(f"--nproc-list {text!r}: {', '.join(items)} are not all "
                         "integers") from None
    if any(w < 1 or w > 4096 for w in worlds):
        raise ValueError(f"--nproc-list {text!r}: world sizes must be 1..4096")
    if len(set(worlds)) != len(worlds):
        raise ValueError(f"--nproc-list {text!r}: a world size appears twice")
    if len(worlds) < 2:
        raise ValueError(f"--nproc-list {text!r}: give at least two world sizes to compare")
    return sorted(worlds)


def rank_batches(worlds: list[int], mode: str, batch: int | None,
                 global_batch: int | None) -> dict[int, int | None]:
    """Per-rank batch per world: fixed (weak) or global / world (strong)."""
    if mode == "weak":
        return {w: batch for w in worlds}
    if global_batch is None:
        return {w: None for w in worlds}
    bad = [w for w in worlds if global_batch % w]
    if bad:
        raise ValueError(f"--global-batch {global_batch} does not split evenly over "
                         f"{', '.join(map(str, bad))} ranks (strong scaling keeps it fixed)")
    return {w: global_batch // w for w in worlds}


def trainer_options(train: dict[str, Any], world: int, rank_batch: int,
                    max_global: int) -> list[str]:
    """The trainer's argv at ``world``: its injections only where their rank exists."""
    from ddpdoctor.train import injections
    from ddpdoctor.train.options import OPTIONS, configs, to_argv

    # an option bag as options.configs takes it: each value of its option's type
    values: dict[str, Any] = {o.dest: o.default for o in OPTIONS}
    values.update(train)
    values["batch_size"] = rank_batch
    values["warmup"] = 1
    values["microbatches"] = 1  # pp only; would refuse an odd per-rank batch
    # no epoch boundary inside the measured steps (a new iterator restarts workers)
    values["dataset_size"] = max(512, max_global * (values["steps"] + 1))
    values["inject"] = [s for s in train.get("inject", ())
                        if injections.parse(s).rank < world]
    mcfg, rcfg = configs(values)
    from ddpdoctor.train.config import check_world

    check_world(mcfg, rcfg, world)
    injs = injections.parse_all(rcfg.injections)
    injections.check_steps(injs, rcfg.steps)
    for name in rcfg.strategies:
        injections.check_compatible(injs, name, world)
    return to_argv(values)


def _check_injection_ranks(sw: Sweep) -> None:
    """An injection whose rank no run has would silently plant nothing."""
    from ddpdoctor.train import injections

    for text in sw.train.get("inject", ()) if sw.user_cmd is None else ():
        inj = injections.parse(text)
        if inj.rank >= max(sw.worlds):
            raise ValueError(f"--inject {inj}: rank {inj.rank} is in none of the runs "
                             f"(largest world {max(sw.worlds)})")


def specs(sw: Sweep) -> list[runner.RunSpec]:
    """Every run's command line, validated before the first one starts. With ``repeat``
    the sweep goes round the world sizes that many times (1,2,4,1,2,4: a load that comes
    and goes on the machine hits every world size alike)."""
    out = []
    max_global = max((sw.rank_batch[w] or 1) * w for w in sw.worlds)
    _check_injection_ranks(sw)
    for k, w in ((k, w) for k in range(sw.repeat) for w in sw.worlds):
        env = runner.run_env(w, sw.mode, sw.rank_batch[w])
        tag = f"world{w}" + (f"-{k + 1}" if sw.repeat > 1 else "")
        log = sw.workdir / f"{tag}.log"
        if sw.user_cmd is not None:
            out.append(runner.RunSpec(w, runner.with_nproc(sw.user_cmd, w), env, log,
                                      rank_batch=sw.rank_batch[w]))
            continue
        jlog = sw.workdir / f"{tag}.jsonl"
        opts = trainer_options(sw.train, w, sw.rank_batch[w] or 1, max_global)
        out.append(runner.RunSpec(w, runner.trainer_argv(w, opts, jlog), env, log, jlog,
                                  sw.rank_batch[w]))
    return out


def measure(sw: Sweep, res: runner.RunResult) -> RunMeasurement:
    """A finished run's numbers; NoThroughput when it printed none."""
    spec = res.spec
    if spec.json_log is not None:
        lines = spec.json_log.read_text().splitlines() if spec.json_log.exists() else []
        return from_trainer_records(lines, spec.world, sw.warmup, spec.rank_batch)
    return from_user_output(res.output, spec.world, sw.warmup, spec.rank_batch)


def failure_findings(res: runner.RunResult) -> list[Finding]:
    """Why a run failed: its output through the crash triage of `diagnose` and `run`."""
    from ddpdoctor.diagnose import LogInput, diagnose_logs

    w = res.spec.world
    found: list[Finding] = []
    if res.returncode is not None:
        try:
            found, _ = diagnose_logs([LogInput(str(res.spec.log), rank_from_path=False)])
        except OSError:
            found = []
    ev = {"world": w, "exit_code": res.returncode, "output": str(res.spec.log),
          "command": " ".join(res.spec.argv)}
    if res.returncode is None:
        return [Finding("UNRECOGNIZED_FAILURE", f"the run at {ranks(w)} did not finish within "
                        f"{res.seconds:.0f} s and was killed (--run-timeout)", evidence=ev)]
    for f in found:
        f.evidence.update(ev)
        f.title = f"at {ranks(w)}: {f.title}"
    return found or [Finding("UNRECOGNIZED_FAILURE", f"the run at {ranks(w)} exited with "
                             f"code {res.returncode} and its output names no cause",
                             evidence=ev)]


@dataclass
class Outcome:
    measurements: list[RunMeasurement] = field(default_factory=list)
    failed: dict[int, list[Finding]] = field(default_factory=dict)
    device: str | None = None
    seconds: dict[int, float] = field(default_factory=dict)
    skipped: list[int] = field(default_factory=list)


def ranks(world: int) -> str:
    return f"{world} rank" + ("s" if world != 1 else "")


def run_all(sw: Sweep, progress: Callable[[str], None]) -> Outcome:
    """Launch every run in turn. Raises ScaleError when a run printed no throughput."""
    out = Outcome()
    todo = specs(sw)
    best: dict[int, RunMeasurement] = {}
    for i, spec in enumerate(todo, 1):
        if spec.world in out.failed:
            continue
        progress(f"[{i}/{len(todo)}] {ranks(spec.world)}"
                 + (f", batch {spec.rank_batch}/rank" if spec.rank_batch else "") + " ...")
        res = runner.execute(spec, sw.timeout)
        out.device = out.device or runner.trainer_device(res.output)
        if not res.ok:
            out.seconds[spec.world] = round(res.seconds, 2)
            out.failed[spec.world] = failure_findings(res)
            how = ("timed out" if res.returncode is None
                   else f"exit code {res.returncode}")
            progress(f"      FAILED ({how}) in {res.seconds:.1f} s; output: {spec.log}")
            if i == 1:
                out.skipped = [s.world for s in todo[1:]]
                progress("      the baseline failed: nothing to compare with, stopping")
                break
            continue
        try:
            m = measure(sw, res)
        except NoThroughput as e:
            what = "the trainer" if sw.user_cmd is None else "the command"
            raise ScaleError(f"{what} at {ranks(spec.world)} exited 0 but {e}; its output is "
                             f"in {spec.log} (docs/scale.md shows the line format)") from None
        first = next(iter(best.values()), m)
        if m.unit != first.unit:
            raise ScaleError(f"the command printed {first.unit} at {ranks(first.world)} but "
                             f"{m.unit} at {ranks(m.world)}: print one unit")
        if spec.world not in best or median(m.throughput) > median(best[spec.world].throughput):
            best[spec.world] = m
            out.seconds[spec.world] = round(res.seconds, 2)  # of the run that counts
        progress(f"      {median(m.throughput):,.0f} {m.unit} in {res.seconds:.1f} s")
    out.measurements = [best[w] for w in sw.worlds if w in best and w not in out.failed]
    return out
