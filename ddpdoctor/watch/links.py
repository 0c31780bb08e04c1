"""COMM_SLOW_RANK during training: a short probe of every rank's links on check steps.

Hook timings cannot name a slow link: in synchronous training every rank waits equally
long in the collective the slow link delays. So on some check steps, at the step boundary
and in the training thread (nothing is in flight when training resumes or the process
exits), the ranks time ``link_bytes`` over every link of the ring, both ways, on a gloo
group of the watch's own. The links go in rounds in which no rank both sends and receives:
a rank's own outgoing data would otherwise queue ahead of the small messages that start
another link's clock on a slow egress, and make a healthy link look slow. In each round,
after a barrier, the sender says "ready", the receiver starts its clock and says "go", and
stops it when the data has landed: a late sender is not counted. The minimum over
``link_reps`` transfers is kept (contention only ever adds time). Each transfer of
``link_bytes`` is followed by one of an eighth of it: a slow link is slow per byte (its
extra seven eighths take most of the time), while a process starved of CPU on a loaded
host is late by about the same at any size, so a link counts as slow only when both its
full time and the time of its extra bytes are slow. Each rank's incoming times ride in
the all_gather; rank 0 compares every link between hosts with the median of the others
(a link within one host is the kernel's loopback: slow only when the scheduler starves a
rank, never judged; where hosts are unknown every link is judged), and names
the rank all slow links leave (egress; else the rank they all reach, ingress) once the
same verdict held for ``link_confirm`` probes in a row.

On NCCL jobs the probe measures the host network path gloo uses, which is NCCL's data path
only where NCCL itself runs over sockets; InfiniBand and NVLink are not measured.
"""

from __future__ import annotations

import functools
import logging
import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, cast

from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.watch.base import WatchCheck

if TYPE_CHECKING:
    import torch
    from torch.distributed import ProcessGroup, Work

    from ddpdoctor.watch.context import CheckContext

log = logging.getLogger("ddpdoctor.watch")
Link = tuple[int, int]  # (sender, receiver)
# "ready", "go" and the data between one pair: tags keep them apart.
_READY, _GO, _DATA = 1, 2, 3
# the second transfer of each rep carries 1/_SMALL of the payload
_SMALL = 8


@dataclass(frozen=True)
class Probe:
    """One probe of every ring link, seen from rank 0 after the all_gather."""
    full: dict[Link, float]   # seconds for link_bytes
    extra: dict[Link, float]  # seconds the bytes beyond the small transfer took

    @property
    def empty(self) -> bool:
        return not self.full


def senders_to(rank: int, world: int) -> list[int]:
    """The ranks whose link into ``rank`` is probed: its ring neighbours (one when N=2)."""
    if world < 2:
        return []
    prev, nxt = (rank - 1) % world, (rank + 1) % world
    return [prev] if prev == nxt else [prev, nxt]


@functools.lru_cache(maxsize=8)
def rounds(world: int) -> tuple[tuple[Link, ...], ...]:
    """Every probed link, in rounds where no rank appears twice (a greedy matching:
    2 rounds per ring direction for even N, 3 for odd)."""
    todo = [((r - d) % world, r) for d in (1, -1) for r in range(world)]
    todo = list(dict.fromkeys(link for link in todo if link[0] != link[1]))
    out = []
    while todo:
        busy: set[int] = set()
        this = []
        for link in todo:
            if link[0] not in busy and link[1] not in busy:
                this.append(link)
                busy.update(link)
        out.append(tuple(this))
        taken = set(this)
        todo = [link for link in todo if link not in taken]
    return tuple(out)


def link_times(rows: list[list[float]], world: int) -> dict[Link, float]:
    """Each rank's seconds from each of ``senders_to`` it -> {(src, dst): seconds};
    NaN entries (no probe) are left out."""
    out: dict[Link, float] = {}
    for dst, row in enumerate(rows):
        for src, t in zip(senders_to(dst, world), row):
            if not math.isnan(t):
                out[(src, dst)] = t
    return out


def probe_from_rows(rows: list[list[float]], world: int) -> Probe:
    """Rows of [full from each sender..., small from each sender...] -> a Probe."""
    full = link_times([row[:2] for row in rows], world)
    small = link_times([row[2:4] for row in rows], world)
    return Probe(full, {k: t - small[k] for k, t in full.items() if k in small})


def same_host(link: Link, hosts: list[int] | None) -> bool:
    """Both ends on one host (False when hosts are unknown: one kind for all links)."""
    return hosts is not None and hosts[link[0]] == hosts[link[1]]


def slow_links(times: dict[Link, float], factor: float, min_excess_s: float,
               hosts: list[int] | None = None) -> dict[Link, float]:
    """Links slower than ``factor`` x the median of the *other* links of their kind, by a
    real margin. With ``hosts`` (per rank), only links between hosts are judged: a link
    within one host (one network namespace) is the kernel's loopback, no NIC on the way,
    so it is slow only when the scheduler runs a rank late, in proportion to the bytes
    when it is starved for a whole transfer (recorded in CI on a loaded 2-core host:
    6.7 ms against 0.8 ms, twice in a row, a healthy job). Loopback is also always faster
    than a NIC: links between hosts are compared with each other only."""
    slow = {}
    for kind in {same_host(k, hosts) for k in times} - {True}:
        group = {k: v for k, v in times.items() if same_host(k, hosts) == kind}
        values = sorted(group.values())
        for link, t in group.items():
            if len(values) < 2:
                continue
            # the median of the others: exact for a few links, the whole median for many
            ref = (statistics.median([v for k, v in group.items() if k != link])
                   if len(values) <= 16 else statistics.median(values))
            if t > factor * ref and t - ref > min_excess_s:
                slow[link] = t
    return slow


def culprits(slow: dict[Link, float]) -> tuple[list[int], str] | None:
    """The ranks the slow links point at, and how: one sender (egress) first, as a slow
    egress is what a throttled or renegotiated NIC shows; then one receiver (ingress);
    then the one rank every slow link touches (both ways); else every sender. With two
    ranks one slow link cannot tell the sender's egress from the receiver's ingress: the
    sender is named and the evidence says which link."""
    if not slow:
        return None
    senders = sorted({s for s, _ in slow})
    receivers = sorted({d for _, d in slow})
    if len(senders) == 1:
        return senders, "egress"
    if len(receivers) == 1:
        return receivers, "ingress"
    common = set.intersection(*({s, d} for s, d in slow))
    if len(common) == 1:
        return sorted(common), "both"
    return senders, "egress"


def slow_per_byte(probe: Probe, factor: float, min_excess_s: float,
                  hosts: list[int] | None = None) -> dict[Link, float]:
    """The links slow at ``link_bytes`` whose extra bytes are slow too: a link's own
    bandwidth, not a sender or receiver that the scheduler ran late (that adds the same
    delay to the small transfer, so the extra bytes take no longer than elsewhere)."""
    slow = slow_links(probe.full, factor, min_excess_s, hosts)
    if not slow:
        return slow
    share = (_SMALL - 1) / _SMALL
    by_bytes = slow_links(probe.extra, factor, min_excess_s * share, hosts)
    return {k: t for k, t in slow.items() if k in by_bytes}


def verdict(history: list[Probe], factor: float, min_excess_s: float,
            confirm: int, hosts: list[int] | None = None
            ) -> tuple[list[int], str, dict[Link, float]] | None:
    """The last ``confirm`` probes all named the same ranks -> (ranks, direction, slow)."""
    if len(history) < confirm:
        return None
    named = []
    for probe in history[-confirm:]:
        slow = slow_per_byte(probe, factor, min_excess_s, hosts)
        c = culprits(slow)
        if c is None:
            return None
        named.append((tuple(c[0]), c[1], slow))
    if len({(r, d) for r, d, _ in named}) != 1:
        return None
    ranks, direction, slow = named[-1]
    return list(ranks), direction, slow


class LinksCheck(WatchCheck):
    name = "links"
    width = 4  # full time from each of up to 2 senders, then the small transfer's

    def attach(self, w: CheckContext) -> None:
        self.group: ProcessGroup | None = None
        self.buffers: tuple[torch.Tensor, ...] = ()
        self.last: list[float] = [math.nan] * self.width
        self.history: list[Probe] = []
        self.reported: set[tuple[int, ...]] = set()

    def group_ready(self, w: CheckContext,
                    make_group: Callable[[str], ProcessGroup]) -> None:
        import torch

        try:
            self.group = make_group("links")
        except Exception as e:  # the other checks still work
            log.warning("ddpdoctor: no link-probe group (%s); link probes off", e)
            return
        n = max(1, int(w.cfg.link_bytes) // 4)
        self.payload = torch.ones(n, dtype=torch.float32)
        self.buf = torch.empty(n, dtype=torch.float32)
        self.token = torch.zeros(1, dtype=torch.float32)
        self.token_in = torch.zeros(1, dtype=torch.float32)
        self.buffers = (self.payload, self.buf, self.token, self.token_in)

    def at_check(self, w: CheckContext, step: int) -> None:
        self.last = [math.nan] * self.width
        if self.group is None or w.group is None:
            return
        # The first check steps catch a link slow from the start; later, a probe every
        # link_every-th check step keeps its cost (a few ms) far below the 1% budget.
        n = step // w.cfg.every
        if n > w.cfg.link_confirm and n % w.cfg.link_every:
            return
        try:
            self.last = self.probe(w)
        except Exception as e:  # a peer gone or late: stop probing here
            log.warning("ddpdoctor: link probe failed at step %d (%s); link probes off",
                        step, e)
            self.group = None

    def probe(self, w: CheckContext) -> list[float]:
        import torch.distributed as dist

        timeout = timedelta(seconds=w.cfg.link_timeout_s)
        full: dict[int, float] = {}
        small: dict[int, float] = {}
        reps = max(1, w.cfg.link_reps)
        n = self.payload.numel()
        sizes = (self.payload, self.payload[:max(1, n // _SMALL)])
        bufs = (self.buf, self.buf[:max(1, n // _SMALL)])
        for links in rounds(w.world):
            dist.barrier(group=self.group, async_op=True).wait(timeout=timeout)
            for src, dst in links:
                if w.rank == src:
                    for _ in range(reps):
                        for payload in sizes:  # interleaved: one load burst hits both
                            self._send(payload, dst, timeout)
                elif w.rank == dst:
                    best = [math.inf, math.inf]
                    for _ in range(reps):
                        for i, buf in enumerate(bufs):
                            best[i] = min(best[i], self._receive(buf, src, timeout))
                    full[src], small[src] = best
        senders = senders_to(w.rank, w.world)
        pad = [math.nan] * (2 - len(senders))
        return ([full.get(s, math.nan) for s in senders] + pad
                + [small.get(s, math.nan) for s in senders] + pad)

    def _send(self, payload: torch.Tensor, dst: int, timeout: timedelta) -> None:
        import torch.distributed as dist

        # isend/irecv give None only to a rank outside the group: every rank is in this one
        ready = cast("Work", dist.isend(self.token, dst, group=self.group, tag=_READY))
        cast("Work", dist.irecv(self.token_in, dst, group=self.group,
                                tag=_GO)).wait(timeout=timeout)
        cast("Work", dist.isend(payload, dst, group=self.group, tag=_DATA)).wait(timeout=timeout)
        ready.wait(timeout=timeout)

    def _receive(self, buf: torch.Tensor, src: int, timeout: timedelta) -> float:
        """Seconds from "go" until ``buf`` has landed."""
        import torch.distributed as dist

        data = cast("Work", dist.irecv(buf, src, group=self.group, tag=_DATA))
        cast("Work", dist.irecv(self.token_in, src, group=self.group,
                                tag=_READY)).wait(timeout=timeout)
        start = time.perf_counter()
        go = cast("Work", dist.isend(self.token, src, group=self.group, tag=_GO))
        data.wait(timeout=timeout)
        took = time.perf_counter() - start
        go.wait(timeout=timeout)
        return took

    def pack(self, w: CheckContext, step: int) -> torch.Tensor:
        import torch

        return torch.tensor(self.last, dtype=torch.float64)

    def analyze(self, w: CheckContext, step: int, rows: torch.Tensor) -> list[Finding]:
        probe = probe_from_rows(rows.tolist(), w.world)
        log.debug("ddpdoctor: link probe at step %d: %s", step, probe)
        if probe.empty:
            return []
        times = probe.full
        cfg = w.cfg
        self.history = (self.history + [probe])[-cfg.link_confirm:]
        hosts = w.hosts if len(w.hosts) == w.world else None
        found = verdict(self.history, cfg.link_factor, cfg.link_min_excess_s, cfg.link_confirm,
                        hosts)
        if found is None:
            return []
        ranks, direction, slow = found
        if tuple(ranks) in self.reported:
            return []
        self.reported.add(tuple(ranks))
        worst = max(slow, key=slow.__getitem__)
        kind = same_host(worst, hosts)
        fast = [t for k, t in times.items() if k not in slow and same_host(k, hosts) == kind]
        ref = statistics.median(fast) if fast else math.nan
        mb = cfg.link_bytes / 2**20
        way = {"egress": "outgoing", "ingress": "incoming"}.get(direction, "outgoing and incoming")
        return [Finding(
            "COMM_SLOW_RANK",
            f"rank {format_ranks(ranks)}'s {way} link is slow: {worst[0]}->{worst[1]} took "
            f"{slow[worst] * 1e3:.1f} ms for {mb:g} MiB vs {ref * 1e3:.1f} ms on the other "
            f"links", ranks=ranks,
            evidence={"step": step, "direction": direction, "payload_bytes": cfg.link_bytes,
                      "slow_links_ms": {f"{s}->{d}": round(t * 1e3, 2)
                                        for (s, d), t in sorted(slow.items())},
                      "links_ms": {f"{s}->{d}": round(t * 1e3, 2)
                                   for (s, d), t in sorted(times.items())},
                      # the time of the bytes beyond an eighth: slow per byte, not late
                      "extra_bytes_ms": {f"{s}->{d}": round(t * 1e3, 2)
                                         for (s, d), t in sorted(probe.extra.items())},
                      "slow_link_gbps": round(cfg.link_bytes / slow[worst] / 1e9, 4),
                      "probes_confirmed": cfg.link_confirm,
                      "measured": "gloo send/recv on the host network path"})]
