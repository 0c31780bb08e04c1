"""A failed job: its kept output through diagnose's triage, and what the sampler saw.

The output copy holds every rank's lines in arrival order with torchrun's rank prefixes,
so diagnose's rules can tell the first root cause from the cascade. This is the same code path as
``ddpdoctor diagnose`` (one knowledge base, ``ddpdoctor/diagnose/kb``, and one list of triage
rules): every signature works live and after the fact. When the output names no cause,
the rank whose process went away first (the sampler watched them) is the lead. When the
output shows a rendezvous that never completed and one rank was given another endpoint
than the others (its environment or command line, read from its process), that rank is
the lead (run/rendezvous.py).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding
from ddpdoctor.core.signames import killed_by
from ddpdoctor.run.progress import RankExit

if TYPE_CHECKING:
    from collections.abc import Sequence
    from typing import BinaryIO

    from ddpdoctor.diagnose import ScanResult
    from ddpdoctor.run.rendezvous import Event, RankEndpoint

CHECK = "crash triage"


def exit_description(returncode: int) -> str:
    name = killed_by(returncode)
    return f"killed by {name}" if name else f"exit code {returncode}"


def _first_interval(exits: list[RankExit]) -> list[RankExit]:
    """The ranks the sampler saw gone in its first interval of exits."""
    return [e for e in exits if abs(e.time - exits[0].time) < 1e-6] if exits else []


# how _how_found starts a rank taken from the order the rank processes went away
BY_EXIT_TIMES, BY_SAMPLING = "exit times", "process sampling"


def rank_from_exits(finding: Finding) -> bool:
    """The finding's rank came from the order the processes went, not from the log."""
    return str(finding.evidence.get("rank_from", "")).startswith((BY_EXIT_TIMES, BY_SAMPLING))


def _first_died(tied: list[RankExit]) -> RankExit | None:
    """Among ranks one sample saw gone together, the one whose death was stamped strictly
    before every other's (run/exit_watch.py); None where a time is missing or tied."""
    if len(tied) < 2 or any(e.died is None for e in tied):
        return None
    order = sorted(tied, key=lambda e: e.died or 0.0)
    return order[0] if (order[0].died or 0.0) < (order[1].died or 0.0) else None


def first_exit(exits: list[RankExit]) -> RankExit | None:
    """The rank that went away first: the only one gone in the first sampling interval,
    or among those, the one whose process died first."""
    tied = _first_interval(exits)
    return tied[0] if len(tied) == 1 else _first_died(tied)


def _only_non_victim(exits: list[RankExit], events: Sequence[Event]) -> RankExit | None:
    """Among the ranks that went away in the first sampling interval (a launcher kills
    the others at once, so one poll sees them all gone), the one that never said it lost
    a peer: a rank that printed "Connection closed by peer" was alive when another went."""
    from ddpdoctor.diagnose.events import PEER_LOSS

    tied = _first_interval(exits)
    victims = {e.rank for e in events if e.kind in PEER_LOSS and e.rank is not None}
    left = [e for e in tied if e.rank not in victims]
    return left[0] if len(left) == 1 and len(tied) > 1 else None


def _how_found(first: RankExit, exits: list[RankExit]) -> str:
    tied = _first_interval(exits)
    if len(tied) > 1 and _first_died(tied) is first:
        gap = min((e.died or 0.0) for e in tied if e is not first) - (first.died or 0.0)
        return (f"{BY_EXIT_TIMES}: rank {first.rank} (pid {first.pid}) died {gap:.2f} s "
                "before any other rank")
    if first_exit(exits) is first:
        return f"{BY_SAMPLING}: rank {first.rank} (pid {first.pid}) exited first"
    return (f"{BY_SAMPLING}: rank {first.rank} (pid {first.pid}) went with the others, "
            "and it alone reported no lost peer")


def hidden_failure(output_log: Path, rank_files: Sequence[Path] = (),
                   ranks_in_paths: bool = True,
                   endpoints: dict[int, RankEndpoint] | None = None) -> list[Finding]:
    """The failure a job's output shows though the job exited 0: a launch that drops its
    ranks' status (a shell's `wait` with no argument, `torchrun ... || true`, a wrapper that
    exits 0 whatever its children did) reports success while a rank crashed. The findings
    when the output's first finding is an error (its error findings), else none: a healthy
    job's output gets the same reading as any log ``diagnose`` is given, no more, and the
    same rendezvous culprit a failed job's triage names (``endpoints``)."""
    try:
        findings, scan = _read_output(output_log, rank_files, ranks_in_paths)
    except OSError:
        return []
    findings = [f for f in findings if f.id not in _GOES_ON]
    return _errors_if_led_by_one(_rendezvous_culprit(findings, scan, endpoints) or findings)


def _errors_if_led_by_one(findings: list[Finding]) -> list[Finding]:
    """The error findings where the first finding is an error, else none: a healthy job's
    output gets the same reading as any log ``diagnose`` is given, no more."""
    if not findings or findings[0].severity != "error":
        return []
    return [f for f in findings if f.severity == "error"]


# What a job's output may show while the job goes on to exit 0 as it should: a training's
# health (NaN losses), which the watch reports as such, not a launch that hid a death
_GOES_ON = frozenset({"GRAD_NONFINITE", "PARAM_DESYNC"})

# What a hang's output shows of the hang itself (a watchdog's timeout, a rank gone quiet):
# the stacks run read name the hang better; these are never its cause
_THE_HANG = frozenset({"COLLECTIVE_TIMEOUT", "RANK_UNRESPONSIVE", "HANG_RANK_MISSING_COLLECTIVE",
                       "HANG_COLLECTIVE_MISMATCH", "HANG_P2P_DEADLOCK", "HANG_DATALOADER"})


class _Upto:
    """The first ``left`` bytes of a binary stream (the reader only calls ``read``)."""

    def __init__(self, stream: BinaryIO, left: int) -> None:
        self._stream, self._left = stream, left

    def read(self, n: int = -1) -> bytes:
        n = self._left if n < 0 else min(n, self._left)
        data = self._stream.read(n) if n > 0 else b""
        self._left -= len(data)
        return data


def before_stop(output_log: Path, upto: int, hang: bool = False,
                from_line: int = 0) -> list[Finding]:
    """The failure a job printed before it was stopped: by run, for a confirmed hang
    (``hang``: a rank's DataLoader workers that died of "Too many open files" leave it
    waiting for data, the others in the next collective; the stacks show where each waits,
    the output why), or by a signal to run (a rank that died of a usage error while the
    other waits in its rendezvous for ever). Read as diagnose reads a log, only the first
    ``upto`` bytes: what the stop itself made the job print (torchrun's SignalException,
    a KeyboardInterrupt on every rank) is no cause; and from line ``from_line`` on: the
    attempt the stop ended (an earlier attempt's failure, which a restart recovered from,
    has its own section). Its error findings when the first one is an error (and, for a
    hang, not the hang itself), else none."""
    from ddpdoctor.diagnose import LogInput, diagnose_logs

    try:
        with open(output_log, "rb") as f:
            for _ in range(from_line):
                if not f.readline():
                    break
            findings, _ = diagnose_logs([LogInput(
                str(output_log), stream=_Upto(f, upto - f.tell()),  # type: ignore[arg-type]
                rank_from_path=False)])
    except OSError:
        return []
    skip = _GOES_ON | _THE_HANG if hang else _GOES_ON
    return _errors_if_led_by_one([f for f in findings if f.id not in skip])


def _read_output(output_log: Path, rank_files: Sequence[Path],
                 ranks_in_paths: bool) -> tuple[list[Finding], ScanResult]:
    """diagnose's reading of the job's kept output and the ranks' own files (``rank_files``,
    their paths naming the rank when ``ranks_in_paths``); raises OSError."""
    from ddpdoctor.diagnose import LogInput, diagnose_logs

    inputs = [LogInput(str(output_log))] + [
        LogInput(str(p), rank_from_path=ranks_in_paths) for p in rank_files]
    return diagnose_logs(inputs)


def _rendezvous_culprit(findings: list[Finding], scan: ScanResult,
                        endpoints: dict[int, RankEndpoint] | None) -> list[Finding] | None:
    """The findings led by the rank given another rendezvous endpoint than the others,
    their fallout dropped (run/rendezvous.py); None where the output shows no such rank."""
    from ddpdoctor.run.rendezvous import culprit_finding

    lead, fallout = culprit_finding(scan.events, endpoints or {}, findings)
    if lead is None:
        return None
    drop = {id(f) for f in fallout}
    return [lead, *(f for f in findings if id(f) not in drop)]


def triage_output(output_log: Path, exits: list[RankExit], returncode: int,
                  endpoints: dict[int, RankEndpoint] | None = None,
                  rank_files: Sequence[Path] = (), ranks_in_paths: bool = True
                  ) -> tuple[list[Finding], dict[str, object]]:
    """Findings (root cause first) for a job that exited with ``returncode``;
    ``endpoints``: each rank's rendezvous endpoint (ProgressTracker.endpoints);
    ``rank_files``: the ranks' output where the launcher wrote it to files (run/redirected.py),
    their paths naming the rank when ``ranks_in_paths``."""
    info: dict[str, object] = {"log": str(output_log)}
    if rank_files:
        info["rank_files"] = [str(p) for p in rank_files]
    scan: ScanResult | None
    try:
        findings, scan = _read_output(output_log, rank_files, ranks_in_paths)
        info["events"] = len(scan.events)
    except OSError as e:
        findings, scan = [], None
        info["error"] = f"cannot read {output_log}: {e.strerror or e}"
    if scan is not None:
        led = _rendezvous_culprit(findings, scan, endpoints)
        if led is not None:
            return led, info
    first = first_exit(exits) or _only_non_victim(exits, scan.events if scan else [])
    if first is None:
        return findings, info
    info["first_exit"] = {"rank": first.rank, "pid": first.pid}
    if findings and findings[0].id in ("RANK_CRASHED", "OOM") and not findings[0].ranks:
        # The log tells how a process died but not which rank (torchrun's summary cut
        # short, an unprefixed line); run saw which rank's process exited first.
        findings[0].ranks = [first.rank]
        findings[0].evidence["rank_from"] = _how_found(first, exits)
    if not findings:
        findings = [Finding(
            "RANK_CRASHED",
            f"rank {first.rank} (pid {first.pid}) exited first; the job then ended with "
            f"{exit_description(returncode)}; its output names no cause",
            ranks=[first.rank],
            evidence={"pid": first.pid, "job_exit": returncode,
                      "source": f"{BY_SAMPLING} (no error line in the output)"})]
    return findings, info
