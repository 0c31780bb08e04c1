"""What crosses the store, as typed records with one JSON form each.

A node publishes one NodeSnap per interval (all its ranks in one key: O(nodes) keys), a
Failure when one of its ranks fails, a StackReply when asked; the leader posts a Verdict.
Parsing never trusts the input: a malformed record is a ValueError.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Any

MAX_STEP_TIMES = 32  # per node per snapshot: enough for a p99 over the job
MAX_FRAMES = 40


@dataclass(frozen=True)
class RankSnap:
    rank: int
    pid: int
    step: int = -1  # from the watch heartbeat; -1 without one
    phase: str = ""
    state: str = "running"  # running | exited
    last_progress: float = 0.0  # wall time of the rank's last step (heartbeat); 0: unknown


@dataclass(frozen=True)
class NodeSnap:
    node: int  # ticket from the NODE_COUNT counter
    host: str
    beat: int  # +1 per publish: a node whose beat stops is lost
    progress: int  # +1 whenever anything of the node's job moved
    last_what: str = ""
    step_times: tuple[float, ...] = ()
    ranks: tuple[RankSnap, ...] = ()
    ended: bool = False  # its job exited (or was stopped)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> NodeSnap:
        d = _load(text)
        try:
            return cls(int(d["node"]), str(d["host"]), int(d["beat"]), int(d["progress"]),
                       str(d.get("last_what", "")),
                       tuple(float(x) for x in d.get("step_times", ())[:MAX_STEP_TIMES]),
                       tuple(RankSnap(**r) for r in d.get("ranks", ())), bool(d.get("ended")))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad node snapshot: {e}") from e


@dataclass(frozen=True)
class Failure:
    """The first failure one node saw among its ranks, from its own output triage."""

    node: int
    host: str
    rank: int | None
    pid: int
    finding_id: str
    title: str
    fallout: bool  # a connection reset / SIGTERM caused by another rank's failure
    at: float  # wall time the node saw it

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Failure:
        d = _load(text)
        try:
            return cls(int(d["node"]), str(d["host"]),
                       None if d.get("rank") is None else int(d["rank"]), int(d["pid"]),
                       str(d["finding_id"]), str(d["title"]), bool(d["fallout"]),
                       float(d["at"]))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad failure record: {e}") from e


@dataclass(frozen=True)
class Request:
    id: str
    reason: str
    recheck_s: float = 2.0  # how long each node watches its ranks' CPU after the stacks
    observe_only: bool = False  # attach --job: nothing is stopped

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Request:
        d = _load(text)
        try:
            return cls(str(d["id"]), str(d["reason"]), float(d.get("recheck_s", 2.0)),
                       bool(d.get("observe_only")))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad request: {e}") from e


@dataclass(frozen=True)
class StackReply:
    """One node's answer: its ranks' classified stacks and which of them kept working."""

    node: int
    host: str
    states: tuple[dict, ...]  # state_to_dict of attach's RankState
    busy: tuple[int, ...] = ()  # ranks that used CPU / did I/O during the recheck
    moved: bool = False  # the node's job made progress while it was looked at
    error: str = ""  # why there are no stacks
    traces: tuple[dict, ...] = ()  # attach.flight_recorder.trace_to_dict of its ranks' dumps
    traced: tuple[int, ...] = ()  # pids in a debugger's tracing stop: a person is looking
    # ranks whose CPU could not be read: not known to be idle, so no hang is confirmed
    unmeasured: tuple[int, ...] = ()
    # one line per rank the node watched: what it did (run/busy.py's Recheck.lines)
    rechecked: tuple[str, ...] = ()

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> StackReply:
        d = _load(text)
        try:
            return cls(int(d["node"]), str(d["host"]), tuple(dict(s) for s in d["states"]),
                       tuple(int(r) for r in d.get("busy", ())), bool(d.get("moved")),
                       str(d.get("error", "")), tuple(dict(t) for t in d.get("traces", ())),
                       tuple(int(p) for p in d.get("traced", ())),
                       tuple(int(r) for r in d.get("unmeasured", ())),
                       tuple(str(line) for line in d.get("rechecked", ())))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad stack reply: {e}") from e


@dataclass(frozen=True)
class Culprit:
    rank: int
    host: str
    pid: int
    where: str  # "train.py:88 in forward"
    what: str  # the state, in words
    step: int = -1  # its last finished step (watch heartbeat); -1: unknown


@dataclass(frozen=True)
class Verdict:
    id: str  # the request it answers
    confirmed: bool
    reason: str
    culprits: tuple[Culprit, ...] = ()
    findings: tuple[dict, ...] = ()  # Finding.to_dict of the merged analysis
    groups: tuple[str, ...] = ()  # "ranks [0, 1, 2] waits in all_reduce at ..." lines
    nodes: tuple[str, ...] = ()  # hosts that answered
    missing: tuple[str, ...] = ()  # nodes that did not answer in time
    no_progress_s: float = 0.0
    threshold_s: float = 0.0
    threshold_how: str = ""
    steps: tuple[tuple[int, int], ...] = ()  # (rank, last finished step) where known
    working: tuple[int, ...] = ()  # culprits a node found working (CPU, I/O) this look

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> Verdict:
        d = _load(text)
        try:
            return cls(str(d["id"]), bool(d["confirmed"]), str(d["reason"]),
                       tuple(Culprit(**c) for c in d.get("culprits", ())),
                       tuple(dict(f) for f in d.get("findings", ())),
                       tuple(str(g) for g in d.get("groups", ())),
                       tuple(str(n) for n in d.get("nodes", ())),
                       tuple(str(n) for n in d.get("missing", ())),
                       float(d.get("no_progress_s", 0)), float(d.get("threshold_s", 0)),
                       str(d.get("threshold_how", "")),
                       tuple((int(r), int(n)) for r, n in d.get("steps", ())),
                       tuple(int(r) for r in d.get("working", ())))
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad verdict: {e}") from e


@dataclass
class JobSummary:
    threshold_s: float = 0.0
    threshold_how: str = ""
    lost: list[str] = field(default_factory=list)  # "node-b (node 1): no update for 6 s"
    # nodes silent for a few intervals, not (yet) lost: what a job that ends now lost
    silent: list[str] = field(default_factory=list)

    def to_json(self) -> str:
        return json.dumps(asdict(self), separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> JobSummary:
        d = _load(text)
        try:
            return cls(float(d["threshold_s"]), str(d["threshold_how"]),
                       [str(x) for x in d.get("lost", ())],
                       [str(x) for x in d.get("silent", ())])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"bad job summary: {e}") from e


# Any: each from_dict reads its fields as trusted and turns the KeyError/TypeError/ValueError
# of a malformed one into ValueError (narrowing every field would change which is raised)
def _load(text: str | bytes) -> dict[str, Any]:
    try:
        d = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise ValueError(f"not JSON: {e}") from e
    if not isinstance(d, dict):
        raise ValueError("not a JSON object")
    return d
