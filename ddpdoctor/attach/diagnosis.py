"""The hang diagnosis shared by ``ddpdoctor attach`` and ``ddpdoctor run``.

PIDs in, a HangDiagnosis out (findings, per-rank states, grouped stacks); ``add_to`` puts
it into a Report. Every step has a deadline, so a stopped or dying rank never hangs it.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field

from ddpdoctor.attach import flight_recorder as fr
from ddpdoctor.attach.analyze import (
    StackGroup,
    analyze_evidence,
    group_stacks,
    headline,
    ranks_text,
)
from ddpdoctor.attach.classify import DATALOADER, UNKNOWN, RankState, classify
from ddpdoctor.attach.discover import AttachError, Discovery, discover
from ddpdoctor.attach.evidence import collect_evidence
from ddpdoctor.attach.stacks import DEAD, MISSING, ZOMBIE, RankStack, collect_stacks, stack_to_dict
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import EXIT_USAGE, Check, Report

CHECK = "hang analysis"
GROUP = "attach"


@dataclass
class HangDiagnosis:
    discovery: Discovery
    stacks: list[RankStack]
    states: list[RankState]
    groups: list[StackGroup]
    findings: list[Finding]
    headline: str
    fr_verdicts: list[fr.PgVerdict] = field(default_factory=list)
    fr_summary: str = ""
    fr_skipped: bool = True
    timings: dict[str, float] = field(default_factory=dict)
    fr_traces: dict[int, fr.FrTrace] = field(default_factory=dict)  # rank -> parsed dump

    @property
    def culprits(self) -> list[int]:
        return sorted({r for f in self.findings for r in f.ranks})

    def add_to(self, report: Report) -> None:
        d = self.discovery
        report.world.update({"world_size": d.world_size or len(d.ranks),
                             "ranks_found": [r.rank for r in d.ranks]})
        report.checks.append(Check(CHECK, self.headline, group=GROUP))
        report.checks.append(self._ranks_check())
        report.checks.append(self._stacks_check())
        report.checks.append(Check(
            "flight recorder", self.fr_summary, status="skipped" if self.fr_skipped else "ok",
            group=GROUP, data={"verdicts": [line for v in self.fr_verdicts
                                            for line in v.describe()]}))
        for f in self.findings:
            report.add(f, check=CHECK)

    def _ranks_check(self) -> Check:
        d = self.discovery
        listed = ", ".join(f"{r.rank}={r.pid}" for r in d.ranks[:16])
        more = " ..." if len(d.ranks) > 16 else ""
        missing = f"; missing {ranks_text(d.missing)}" if d.missing else ""
        if d.left_out:  # targets that are no rank: never read, never asked for a dump
            missing += f"; PIDs {sorted(d.left_out)} left out: no rank"
        return Check(
            "ranks", f"{len(d.ranks)} rank processes: {listed}{more}{missing}", group=GROUP,
            data={"ranks": [{"rank": r.rank, "pid": r.pid, "workers": r.workers,
                             "rank_source": r.rank_source, "cmdline": r.cmdline,
                             **({"rank_from": r.rank_detail} if r.rank_detail else {})}
                            for r in d.ranks],
                  "missing": d.missing, "notes": d.notes,
                  "left_out": {str(pid): why for pid, why in d.left_out.items()}})

    def _stacks_check(self) -> Check:
        readable = sum(1 for s in self.stacks if s.threads)
        unreadable = [s for s in self.states if s.kind == UNKNOWN]
        summary = (f"{readable}/{len(self.stacks)} stacks read in "
                   f"{self.timings.get('stacks_s', 0):.2f} s, {len(self.groups)} distinct")
        if unreadable:
            summary += f"; {unreadable[0].detail}"
        return Check(
            "stacks", summary, status="warning" if unreadable else "ok", group=GROUP,
            data={"groups": [{"ranks": g.ranks, "state": g.state.describe(),
                              "frames": [str(f) for f in g.state.frames]}
                             for g in self.groups],
                  "states": {str(s.rank): {"kind": s.kind, "op": s.op, "where": s.where,
                                           "detail": s.detail, "pid": s.pid,
                                           "gpu_wait": s.gpu_wait}
                             for s in self.states},
                  "raw": [stack_to_dict(s) for s in self.stacks]})


def _states_for_missing(disc: Discovery) -> list[RankState]:
    out = []
    for rank in disc.missing:
        pid = disc.zombies.get(rank, 0)
        kind = ZOMBIE if pid else MISSING
        detail = f"pid {pid} exited, not reaped" if pid else "no process with this RANK"
        out.append(RankState(rank, pid, kind, detail=detail))
    return out


def _request_flight_recorder(disc: Discovery) -> tuple[dict[str, tuple[list[int], float]], str]:
    """Ask serving ranks for dumps now, so they are written while stacks are read."""
    by_dir: dict[str, dict[int, int]] = {}
    for r in disc.ranks:
        if r.fr_dir:
            by_dir.setdefault(r.fr_dir, {})[r.rank] = r.pid
    if not by_dir:
        return {}, (f"no rank serves Flight Recorder dumps (no {fr.ENV_DIR} in their "
                    "environment; ddpdoctor run sets it)")
    requests = {}
    for directory, rank_pids in by_dir.items():
        serving = fr.serving_ranks(directory, rank_pids)
        if not serving:
            continue
        try:
            requests[directory] = (serving, fr.request_dumps(directory))
        except OSError as e:
            return {}, f"cannot request Flight Recorder dumps in {directory}: {e.strerror}"
    if not requests:
        return {}, f"{fr.ENV_DIR} is set but no rank has its dump hook running"
    return requests, ""


def _states_for_gone(gone: Mapping[int, str], states: list[RankState]) -> list[RankState]:
    """Ranks a supervisor saw exit that no process stands for now (``gone``: rank ->
    how it went): a rank started on its own (`python main.py --rank 1 ...` from a shell
    loop) leaves no launcher's count of the ranks behind to miss it by."""
    present = {s.rank for s in states}
    return [RankState(rank, 0, DEAD, detail=how) for rank, how in sorted(gone.items())
            if rank not in present]


def diagnose_hang(pids: list[int], native: bool = False, timeout: float = 5.0,
                  flight_recorder: bool = True, gone: Mapping[int, str] | None = None
                  ) -> HangDiagnosis:
    """Find the ranks under ``pids``, read their stacks (and FR dumps), name the culprit;
    ``gone``: ranks the caller saw exit (rank -> how), counted as dead where no process
    of theirs is found."""
    t0 = time.monotonic()
    disc = discover(pids)
    timings = {"discover_s": round(time.monotonic() - t0, 3)}
    requests, fr_summary = _request_flight_recorder(disc) if flight_recorder else (
        {}, "not asked (--no-flight-recorder)")

    t1 = time.monotonic()
    stacks = collect_stacks([(r.rank, r.pid) for r in disc.ranks], native, timeout)
    _fail_if_nothing_readable(stacks)
    states = [classify(s) for s in stacks]
    _add_worker_stacks(disc, stacks, states, native, timeout)
    states = [classify(s) for s in stacks] + _states_for_missing(disc)
    states += _states_for_gone(gone or {}, states)
    timings["stacks_s"] = round(time.monotonic() - t1, 3)

    verdicts: list[fr.PgVerdict] = []
    traces: dict[int, fr.FrTrace] = {}
    if requests:
        problems: list[str] = []
        for directory, (ranks, since) in requests.items():
            got, bad = fr.collect_dumps(directory, ranks, since, min(timeout, 5.0))
            traces.update(got)
            problems += bad
        verdicts = fr.compare_traces(traces)
        fr_summary = (f"{len(traces)} dumps; "
                      + ("; ".join(line for v in verdicts for line in v.describe()[:2])
                         or "every rank at the same collective on every group"))
        if problems:
            fr_summary += f" ({problems[0]})"
    timings["total_s"] = round(time.monotonic() - t0, 3)

    heartbeats = {r.rank: r.heartbeat_dir for r in disc.ranks if r.heartbeat_dir}
    evidence = collect_evidence(states, verdicts, traces, heartbeats)
    findings = analyze_evidence(evidence)
    states.sort(key=lambda s: s.rank)
    return HangDiagnosis(disc, stacks, states, group_stacks(states), findings,
                         headline(states, findings), verdicts, fr_summary,
                         fr_skipped=not requests, timings=timings, fr_traces=traces)


def _fail_if_nothing_readable(stacks: list[RankStack]) -> None:
    """When no stack at all can be read, say why in one line instead of a hollow report."""
    if not stacks or any(s.threads for s in stacks):
        return
    errors = [s.error for s in stacks if s.error]
    if errors and len(errors) == len(stacks):
        first = errors[0]
        code = EXIT_USAGE if "not a Python process" in first else 3
        raise AttachError(first if len(stacks) == 1 else
                          f"no rank's stack could be read: {first}", code)


def _add_worker_stacks(disc: Discovery, stacks: list[RankStack], states: list[RankState],
                       native: bool, timeout: float) -> None:
    """A rank waiting on its DataLoader: read its workers to find the stuck item."""
    workers_of = {r.rank: r.workers for r in disc.ranks}
    wanted = [(s.rank, w) for s, st in zip(stacks, states)
              if st.kind == DATALOADER and st.op == "worker queue"
              for w in workers_of.get(s.rank, [])]
    if not wanted:
        return
    by_rank = {s.rank: s for s in stacks}
    for w in collect_stacks(wanted, native, timeout):
        by_rank[w.rank].workers.append(w)
