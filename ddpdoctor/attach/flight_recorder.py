"""Flight Recorder dumps: the file contract with a watched rank, the parser, the comparison.

PyTorch records every collective a process group issues (gloo too, since 2.x) with a
per-group ``collective_seq_id``. When every stack looks the same, those numbers still tell
who is behind: the ranks that enqueued fewer collectives on a group than the others.

Contract (the in-rank side belongs to ddpdoctor's watch hook; docs/attach.md):

- A rank started with ``DDPDOCTOR_FR_DIR=D`` in its environment serves dumps. On start it
  writes ``D/ddpdoctor-fr-rank{R}.ready`` holding ``{"pid": PID}``.
- To ask for dumps, a reader touches ``D/ddpdoctor-fr.request`` (its mtime changes).
- Each serving rank then writes ``D/ddpdoctor-fr-rank{R}.json``: exactly the text of
  ``torch._C._distributed_c10d._dump_fr_trace_json()``, written to a temporary name and
  renamed, so a reader never sees half a file. A side thread does it: the main thread may
  be blocked in a collective (Python signal handlers would wait for it to return).
"""

from __future__ import annotations

import json
import os
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core import safefile
from ddpdoctor.core.contract import FR_DIR, FR_READY_FILE, FR_REQUEST_FILE, fr_dump_file

ENV_DIR = FR_DIR
REQUEST_FILE = FR_REQUEST_FILE
dump_name = fr_dump_file


def ready_name(rank: int) -> str:
    return FR_READY_FILE.format(rank=rank)


class FrParseError(ValueError):
    pass


@dataclass(frozen=True)
class FrEntry:
    pg: str  # the process group's name ("0" is the default group)
    seq: int  # collective_seq_id (p2p ops count in p2p_seq instead)
    op: str  # "all_reduce" (profiling_name without the backend prefix)
    is_p2p: bool = False
    p2p_seq: int = 0
    input_sizes: tuple = ()
    retired: bool = False

    @property
    def shape(self) -> str:
        return json.dumps(self.input_sizes) if self.input_sizes else ""


@dataclass
class FrTrace:
    rank: int
    entries: list[FrEntry] = field(default_factory=list)
    last_enqueued: dict[str, int] = field(default_factory=dict)  # pg -> collective seq
    pg_desc: dict[str, str] = field(default_factory=dict)


TRACE_TAIL = 64  # entries per rank that cross the job's store: the hang is at the end


def trace_to_dict(trace: FrTrace, tail: int = TRACE_TAIL) -> dict[str, object]:
    """A parsed trace, cut to its last ``tail`` entries, as JSON-ready data (``run``'s job
    view sends it to the leader; ``last_enqueued`` keeps the counts the cut drops)."""
    return {"rank": trace.rank, "last_enqueued": dict(trace.last_enqueued),
            "pg_desc": dict(trace.pg_desc),
            "entries": [[e.pg, e.seq, e.op, e.is_p2p, e.p2p_seq, e.input_sizes, e.retired]
                        for e in trace.entries[-tail:]]}


# Any: a record from another node's JSON; a malformed one raises the KeyError/TypeError/...
# that becomes FrParseError (narrowing each field would change which is raised)
def trace_of(d: dict[str, Any]) -> FrTrace:
    """The inverse of :func:`trace_to_dict`; FrParseError on a malformed record."""
    try:
        entries = [FrEntry(str(pg), int(seq), str(op), bool(p2p), int(p2p_seq),
                           _sizes(sizes), bool(retired))
                   for pg, seq, op, p2p, p2p_seq, sizes, retired in d.get("entries", ())]
        return FrTrace(int(d["rank"]), entries,
                       {str(k): int(v) for k, v in d.get("last_enqueued", {}).items()},
                       {str(k): str(v) for k, v in d.get("pg_desc", {}).items()})
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise FrParseError(f"malformed Flight Recorder record ({e!r})") from None


# Any: a dump's input_sizes, nested lists of ints (or whatever the dump holds, kept as is)
def _sizes(value: Any) -> tuple:
    if isinstance(value, list):
        return tuple(_sizes(v) for v in value)
    return value


def parse_fr_trace(text: str | bytes, rank: int) -> FrTrace:
    """Parse one ``_dump_fr_trace_json()`` dump. Raises FrParseError on anything else."""
    try:
        data = json.loads(text)
    except (ValueError, UnicodeDecodeError) as e:
        raise FrParseError(f"rank {rank}: not a Flight Recorder JSON dump ({e})") from None
    if not isinstance(data, dict) or "entries" not in data and "pg_status" not in data:
        raise FrParseError(f"rank {rank}: not a Flight Recorder JSON dump (no entries)")
    trace = FrTrace(rank)
    try:
        for raw in data.get("entries") or []:
            pg = raw.get("process_group") or [str(raw.get("pg_id", "0")), ""]
            name = str(pg[0])
            trace.pg_desc.setdefault(name, str(pg[1]) if len(pg) > 1 else "")
            op = str(raw.get("profiling_name", "?")).split(":", 1)[-1]
            entry = FrEntry(name, int(raw.get("collective_seq_id") or 0), op,
                            bool(raw.get("is_p2p")), int(raw.get("p2p_seq_id") or 0),
                            _sizes(raw.get("input_sizes") or []), bool(raw.get("retired")))
            trace.entries.append(entry)
            if not entry.is_p2p:
                trace.last_enqueued[name] = max(trace.last_enqueued.get(name, 0), entry.seq)
        # pg_status survives the ring buffer wrapping around; prefer it where present.
        for pg_id, status in (data.get("pg_status") or {}).items():
            seq = int(status.get("last_enqueued_collective", -1))
            if seq >= 0:
                trace.last_enqueued[str(pg_id)] = seq
    except (TypeError, ValueError, AttributeError, IndexError) as e:
        raise FrParseError(f"rank {rank}: malformed Flight Recorder entry ({e})") from None
    return trace


@dataclass
class PgVerdict:
    """One process group compared across ranks."""

    pg: str
    desc: str
    front_seq: int  # the most collectives any rank has enqueued on this group
    front_op: str  # what the ranks at the front wait in
    behind: dict[int, int] = field(default_factory=dict)  # rank -> its last seq
    # Ranks at the front that disagree on the pending collective: "op sizes" -> ranks
    pending: dict[str, list[int]] = field(default_factory=dict)

    @property
    def mismatch(self) -> bool:
        return len(self.pending) > 1

    def describe(self) -> list[str]:
        name = f"pg {self.pg}" + (f" ({self.desc})" if self.desc else "")
        lines = []
        front = sorted(r for ranks in self.pending.values() for r in ranks)
        if self.behind:
            lines.append(f"{name}: ranks {front} enqueued collective #{self.front_seq} "
                         f"({self.front_op})")
            for r, seq in sorted(self.behind.items()):
                lines.append(f"{name}: rank {r} is behind, last enqueued #{seq}")
        if self.mismatch:
            for key, ranks in sorted(self.pending.items(), key=lambda kv: kv[1]):
                lines.append(f"{name}: collective #{self.front_seq} on ranks {ranks} is {key}")
        return lines


def compare_traces(traces: dict[int, FrTrace]) -> list[PgVerdict]:
    """Pure: who is behind on which group, and who disagrees on the pending collective."""
    groups: dict[str, dict[int, int]] = {}
    desc: dict[str, str] = {}
    for rank, t in traces.items():
        for pg, seq in t.last_enqueued.items():
            groups.setdefault(pg, {})[rank] = seq
        desc.update({k: v for k, v in t.pg_desc.items() if v})
    verdicts = []
    for pg, seqs in sorted(groups.items()):
        front = max(seqs.values())
        verdict = PgVerdict(pg, desc.get(pg, ""), front, "")
        for rank, seq in sorted(seqs.items()):
            if seq < front:
                verdict.behind[rank] = seq
                continue
            entry = next((e for e in reversed(traces[rank].entries)
                          if e.pg == pg and not e.is_p2p and e.seq == front), None)
            key = f"{entry.op} {entry.shape}".strip() if entry else "?"
            verdict.pending.setdefault(key, []).append(rank)
        if verdict.pending:
            common = Counter({k: len(v) for k, v in verdict.pending.items()}).most_common(1)
            verdict.front_op = common[0][0]
        if verdict.behind or verdict.mismatch:
            verdicts.append(verdict)
    return verdicts


def request_dumps(directory: str) -> float:
    """Touch the request file; returns the time the dumps must be newer than."""
    path = os.path.join(directory, REQUEST_FILE)
    now = time.time()
    # attach runs as root in a directory the job's user can write: a symlink planted at
    # the request file must not make root create or touch a file elsewhere.
    safefile.touch(path)
    return now - 0.01  # mtime granularity on some file systems


def serving_ranks(directory: str, rank_pids: dict[int, int]) -> list[int]:
    """Ranks whose ready file names their current pid: they will answer a request."""
    serving = []
    for rank, pid in rank_pids.items():
        try:
            with open(os.path.join(directory, ready_name(rank))) as f:
                if int(json.load(f).get("pid", -1)) == pid:
                    serving.append(rank)
        except (OSError, ValueError, AttributeError):
            continue
    return serving


def collect_dumps(directory: str, ranks: list[int], since: float,
                  timeout: float) -> tuple[dict[int, FrTrace], list[str]]:
    """Wait (until ``timeout``) for fresh dumps of ``ranks``; returns traces and problems."""
    deadline = time.monotonic() + timeout
    traces: dict[int, FrTrace] = {}
    problems: list[str] = []
    pending = set(ranks)
    while pending:
        for rank in sorted(pending):
            path = os.path.join(directory, dump_name(rank))
            try:
                if os.stat(path).st_mtime < since:
                    continue
                with open(path, "rb") as f:
                    traces[rank] = parse_fr_trace(f.read(), rank)
            except OSError:
                continue
            except FrParseError as e:
                problems.append(str(e))
            pending.discard(rank)
        if not pending or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if pending:
        problems.append(f"no Flight Recorder dump from ranks {sorted(pending)} "
                        f"within {timeout:g} s")
    return traces, problems
