"""Which rank a failed rendezvous starts from, from each rank's own configuration.

A job launched without torchrun (one task script per rank: Slurm, a shell loop, a
scheduler's array job) computes each rank's rendezvous endpoint itself. When one task
gets it wrong (another port, another host), the rendezvous fails on every rank at once
and no log line names the rank: rank 0's store waits for clients ("1/2 clients joined")
and the odd rank retries a connect nobody answers. Both exit; the first to exit is
whichever timed out first, not the culprit.

run sees each rank's process: its environment (MASTER_ADDR, MASTER_PORT, WORLD_SIZE,
RANK, read once from /proc/PID/environ by run/progress.sample_tree) and its
command line (an ``init_method`` / ``--dist-url`` of tcp:// or file://). Every rank of
one job must name the same endpoint and world size. ``odd_ranks`` names the ranks whose
endpoint differs from the job's: the one most ranks name, a tie broken by rank 0's (for
env:// and tcp:// init, rank 0 hosts the store, so its endpoint is the one that
listened). It is only a culprit when the job failed in rendezvous (triage.py checks the
log for it); a finished job whose ranks named different endpoints is not judged here.

Pure, but for the environment read at the edge (``endpoint_of`` takes the mappings).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

from ddpdoctor.core.findings import Finding


class _Kind(Protocol):
    @property
    def value(self) -> str: ...


class Event(Protocol):
    """What is read of a diagnose event (run does not import diagnose's types: the
    package layers, tests/unit/test_layers.py)."""

    @property
    def kind(self) -> _Kind: ...  # an EventKind
    @property
    def rank(self) -> int | None: ...
    @property
    def text(self) -> str: ...
    @property
    def data(self) -> Mapping[str, object]: ...
    @property
    def where(self) -> str: ...

# tcp://host:port or file:///path anywhere in an argument: ``--init-method tcp://h:p``,
# ``--dist-url=tcp://h:p``, ``init_method="tcp://h:p"`` passed through a wrapper
_INIT_METHOD = re.compile(r"(tcp://(?:\[[^\]]+\]|[^\s:/,'\"]+):(\d+)|file://[^\s,'\"]+)")
# one machine, named differently: the store binds every local address
_LOOPBACK = {"localhost": "127.0.0.1", "::1": "127.0.0.1", "[::1]": "127.0.0.1",
             "ip6-localhost": "127.0.0.1"}


@dataclass(frozen=True)
class RankEndpoint:
    """Where one rank was told to meet the others."""

    rank: int
    address: str  # "host:port", "file:///path", or "?" for what was not set
    world_size: int | None
    source: str  # "env" (MASTER_ADDR/MASTER_PORT) or "command line" (an init_method)

    @property
    def key(self) -> tuple[str, int | None]:
        return (_normal(self.address), self.world_size)

    def describe(self) -> str:
        size = f", WORLD_SIZE={self.world_size}" if self.world_size is not None else ""
        return f"rank {self.rank}: {self.address}{size} ({self.source})"


def _normal(address: str) -> str:
    host, sep, port = address.rpartition(":")
    if not sep or address.startswith("file://"):
        return address
    return f"{_LOOPBACK.get(host.lower(), host.lower())}:{port}"


def _int(value: str | None) -> int | None:
    try:
        return int(value) if value is not None else None
    except ValueError:
        return None


def endpoint_of(environ: Mapping[str, str], cmdline: Sequence[str]) -> RankEndpoint | None:
    """The endpoint a rank process was given; None when it carries no RANK (not a rank)
    or names no endpoint at all (mp.spawn ranks set theirs in Python, unseen here)."""
    rank = _int(environ.get("RANK"))
    if rank is None:
        return None
    world = _int(environ.get("WORLD_SIZE"))
    for arg in cmdline[1:]:
        m = _INIT_METHOD.search(arg)
        if m is None:
            continue
        if m.group(1).startswith("file://"):
            return RankEndpoint(rank, m.group(1), world, "command line")
        host = m.group(1)[len("tcp://"):].rsplit(":", 1)[0]
        return RankEndpoint(rank, f"{host}:{m.group(2)}", world, "command line")
    addr, port = environ.get("MASTER_ADDR"), environ.get("MASTER_PORT")
    if addr is None and port is None:
        return None
    return RankEndpoint(rank, f"{addr or '?'}:{port or '?'}", world, "env")


@dataclass(frozen=True)
class OddRanks:
    ranks: tuple[int, ...]  # the ranks whose endpoint differs from the job's
    expected: str  # the job's endpoint (address, and world size where set)
    lines: tuple[str, ...]  # every rank's endpoint, one line each (the evidence)


def odd_ranks(endpoints: Mapping[int, RankEndpoint]) -> OddRanks | None:
    """The ranks whose endpoint or world size differs from the job's; None when all
    agree or fewer than two ranks were seen."""
    if len(endpoints) < 2:
        return None
    counts = Counter(e.key for e in endpoints.values())
    if len(counts) < 2:
        return None
    top = max(counts.values())
    tied = [k for k, n in counts.items() if n == top]
    if len(tied) > 1:
        # rank 0 hosts the store (env://, tcp://): its endpoint is the one that listened
        anchor = endpoints.get(0) or endpoints[min(endpoints)]
        ref = anchor.key if anchor.key in tied else sorted(tied, key=str)[0]
    else:
        ref = tied[0]
    odd = tuple(sorted(r for r, e in endpoints.items() if e.key != ref))
    size = f" with WORLD_SIZE={ref[1]}" if ref[1] is not None else ""
    lines = tuple(endpoints[r].describe() for r in sorted(endpoints))
    return OddRanks(odd, f"{ref[0]}{size}", lines)


def log_endpoints(events: Sequence[Event]) -> dict[int, str]:
    """rank -> the store address its own c10d connect lines name ("The client socket has
    timed out after ... while trying to connect to (host, port)"), for the lines whose
    rank is known (a rank prefix, a per-rank log file). A rank that named several keeps
    the first."""
    out: dict[int, str] = {}
    for e in events:
        if e.rank is None or not e.data.get("host") or not e.data.get("port"):
            continue
        out.setdefault(e.rank, f"{e.data['host']}:{e.data['port']}")
    return out


# What a rendezvous that never completed prints: the store host waiting for its clients,
# a client's connect retries / timeout, a store wait on the init keys.
_RDZV_TEXT = re.compile(r"clients joined|waiting for clients|DistStoreError|"
                        r"DistNetworkError|client socket has|failed to connect/validate")
_CPP_FRAME = re.compile(r"\s*frame #\d+:")
_RDZV_KINDS = ("connect_timeout", "store_timeout", "conn_refused")
# a c10d error of any kind, once the rendezvous never completed, is its consequence
_C10D_TEXT = re.compile(r"Dist\w*Error|c10::|TCPStore|rendezvous|Ping failed|"
                        r"clients joined|client socket has")
_FALLOUT_IDS = ("RANK_CRASHED", "COLLECTIVE_TIMEOUT", "ENV_RENDEZVOUS_UNREACHABLE",
                "UNRECOGNIZED_FAILURE", "RANK_UNRESPONSIVE")


def rendezvous_lines(events: Sequence[Event]) -> list[Event]:
    """The log events (diagnose's) that show a rendezvous that did not complete."""
    out = []
    for e in events:
        if _CPP_FRAME.match(e.text):
            continue  # "frame #2: c10::DistNetworkError::DistNetworkError(...)": a trace
        kind = e.kind.value
        if kind in _RDZV_KINDS or (kind == "exception" and _RDZV_TEXT.search(
                str(e.data.get("exception", "")))) or (
                kind == "store_barrier_wait" and e.data.get("store_host")):
            # (the store's host waiting for its clients: diagnose's own event for it)
            out.append(e)
    return out


def _quotable(lines: list[Event], most: int = 4) -> list[Event]:
    """The first line of each side of the failed rendezvous (the store that waited, the
    connect that went unanswered), then the next ones: a client retrying prints dozens."""
    def side(e: Event) -> str:
        return "store" if re.search(r"clients joined|waiting for clients|wait timeout",
                                    e.text) else e.kind.value

    firsts: dict[str, Event] = {}
    for e in lines:
        firsts.setdefault(side(e), e)
    picked = list(firsts.values())[:most]
    rest = [e for e in lines if all(e is not p for p in picked)]
    pos = {id(e): i for i, e in enumerate(lines)}
    return sorted(picked + rest[:most - len(picked)], key=lambda e: pos[id(e)])


def _is_rendezvous_fallout(finding: Finding) -> bool:
    """A finding about the same failed rendezvous, felt by another rank (rank 0's store
    timing out, the odd rank's connect timeout read as a crash)."""
    if finding.id not in _FALLOUT_IDS:
        return False
    text = f"{finding.title} {finding.evidence.get('exception', '')}"
    return bool(_C10D_TEXT.search(text)) or finding.id == "ENV_RENDEZVOUS_UNREACHABLE"


def culprit_finding(events: Sequence[Event], endpoints: Mapping[int, RankEndpoint],
                    findings: Sequence[Finding]) -> tuple[Finding | None, list[Finding]]:
    """ENV_RENDEZVOUS_UNREACHABLE on the ranks whose endpoint differs, when the log shows
    a rendezvous that did not complete; and the findings it explains (their fallout).
    ``endpoints``: what run read from each rank's process, completed by the addresses
    the ranks' own c10d lines name (``log_endpoints``). (None, []) when not decided."""
    lines = rendezvous_lines(events)
    if not lines:
        return None, []
    seen = dict(endpoints)
    for rank, address in log_endpoints(lines).items():
        seen.setdefault(rank, RankEndpoint(rank, address, None, "its c10d connect line"))
    odd = odd_ranks(seen)
    if odd is None or not odd.ranks:
        return None, []
    named = ", ".join(map(str, odd.ranks))
    given = "; ".join(seen[r].describe() for r in odd.ranks)
    quoted = [f"{e.where}: {e.text.strip()[:300]}" for e in _quotable(lines)]
    fallout = [f for f in findings if _is_rendezvous_fallout(f)]
    evidence = {
        "expected": odd.expected, "endpoints": list(odd.lines),
        "lines": quoted,
        "rank_from": "each rank's own rendezvous settings (MASTER_ADDR/MASTER_PORT/"
                     "WORLD_SIZE in its environment, an init_method on its command line), "
                     "read by ddpdoctor run from its process; the odd one out",
        "fallout": [f"{f.id}: {f.title[:200]}" for f in fallout]}
    title = (f"rank {named} was given another rendezvous endpoint than the job's "
             f"{odd.expected} ({given}): the rendezvous never completed")
    return Finding("ENV_RENDEZVOUS_UNREACHABLE", title, ranks=list(odd.ranks),
                   evidence=evidence), fallout
