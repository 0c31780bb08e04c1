"""Bandwidth evidence -> the nccl-tests table, COMM_BANDWIDTH_LOW and COMM_SLOW_RANK."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING, TypedDict

from ddpdoctor.check.busbw import algbw_gbps, busbw_gbps
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.report import Check

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.probes.records import BandwidthData

# A link this many times slower than the median link is slow; loopback and veth timings
# on a busy machine vary by 2x, a throttled or misrouted link by 10x or more.
SLOW_LINK_FACTOR = 4.0
# Below this share of --expect-busbw, the fabric as a whole is slow.
EXPECTED_SHARE = 0.5
# One TCP stream (gloo) rarely reaches a fast NIC's line rate; below a tenth of it the link
# is broken, not merely untuned (renegotiated down, wrong interface, throttled).
LINE_RATE_SHARE = 0.1


class TableRow(TypedDict):
    """One row of the bandwidth check's table (the report's ``data["table"]``)."""

    collective: str
    size: int
    time_us: float
    algbw_gbps: float
    busbw_gbps: float


def table(per_rank: Mapping[int, BandwidthData], world_size: int) -> list[TableRow]:
    """One row per collective and size, timed by the slowest rank (nccl-tests' view)."""
    rows: dict[tuple[str, int], float] = {}
    for d in per_rank.values():
        for row in d.get("sweep", []):
            key = (row["collective"], row["size"])
            rows[key] = max(rows.get(key, 0.0), row["median_s"])
    out: list[TableRow] = []
    for (coll, size), t in rows.items():
        out.append({"collective": coll, "size": size, "time_us": round(t * 1e6, 1),
                    "algbw_gbps": round(algbw_gbps(size, t), 4),
                    "busbw_gbps": round(busbw_gbps(coll, size, t, world_size), 4)})
    return out


def directed_links(per_rank: Mapping[int, BandwidthData]) -> dict[tuple[int, int], float]:
    """(src, dst) -> GB/s, from what each receiver measured."""
    return {(int(src), dst): bw for dst, d in per_rank.items()
            for src, bw in d.get("links_in", {}).items()}


def _known_links(per_rank: Mapping[int, BandwidthData]) -> dict[tuple[int, int], float]:
    """Links whose both ends sent their data: only those can be placed on a host. A rank
    stopped or killed mid-probe sends nothing; its links are left out here (the launch
    analysis names that rank) instead of failing the whole analysis."""
    return {k: v for k, v in directed_links(per_rank).items()
            if k[0] in per_rank and k[1] in per_rank}


class _SlowLinks:
    """The measured links, the median and the slow ones, as the link rules read them."""

    def __init__(self, per_rank: Mapping[int, BandwidthData],
                 links: dict[tuple[int, int], float]) -> None:
        self.per_rank, self.links = per_rank, links
        self.median = statistics.median(links.values())
        self.slow = {k: v for k, v in links.items() if v * SLOW_LINK_FACTOR < self.median}
        self.host = {r: d.get("host", "?") for r, d in per_rank.items()}
        self.hosts = sorted(set(self.host.values()))
        self.base = {"median_link_gbps": round(self.median, 4),
                     "links_gbps": {f"{s}->{t}": bw for (s, t), bw in sorted(links.items())}}


def _slow_node(sl: _SlowLinks) -> Finding | None:
    """COMM_BANDWIDTH_LOW: one node whose every outgoing (or incoming) link is slow."""
    if len(sl.hosts) < 2:
        return None
    for direction, end in (("egress", 0), ("ingress", 1)):
        side = {sl.host[k[end]] for k in sl.slow}
        if len(side) != 1:
            continue
        node = side.pop()
        all_of_node = [k for k in sl.links if sl.host[k[end]] == node
                       and sl.host[k[1 - end]] != node]
        if all_of_node and all(k in sl.slow for k in all_of_node):
            worst = min(sl.slow.values())
            return Finding(
                "COMM_BANDWIDTH_LOW",
                f"the network link of node {node} is slow ({direction}): "
                f"{worst:.3f} GB/s vs {sl.median:.3f} GB/s median",
                ranks=sorted(r for r in sl.host if sl.host[r] == node),
                evidence={"node": node, "direction": direction, **sl.base})
    return None


def _slow_rank(sl: _SlowLinks) -> Finding | None:
    """COMM_SLOW_RANK: on one node, a rank whose every link is slow."""
    if len(sl.hosts) != 1 or len(sl.per_rank) <= 2:
        return None
    touched: dict[int, int] = {}
    for s, t in sl.slow:
        touched[s] = touched.get(s, 0) + 1
        touched[t] = touched.get(t, 0) + 1
    full = 2 * (len(sl.per_rank) - 1)
    culprits = sorted(r for r, c in touched.items() if c == full)
    if not culprits:
        return None
    return Finding("COMM_SLOW_RANK", f"every link of rank {format_ranks(culprits)} is slow",
                   ranks=culprits, evidence=sl.base)


def _slow_links(sl: _SlowLinks) -> Finding:
    """COMM_BANDWIDTH_LOW: the slow links themselves, named by their senders."""
    return Finding(
        "COMM_BANDWIDTH_LOW",
        "slow link(s): " + ", ".join(f"{s}->{t} {bw:.3f} GB/s" for (s, t), bw in
                                     sorted(sl.slow.items()))
        + f" vs {sl.median:.3f} GB/s median",
        ranks=sorted({s for s, _ in sl.slow}), evidence=sl.base)


def _link_findings(per_rank: Mapping[int, BandwidthData]) -> list[Finding]:
    """The most specific explanation of the slow links: a node, a rank, else the links."""
    links = _known_links(per_rank)
    if len(links) < 2:
        return []
    sl = _SlowLinks(per_rank, links)
    if not sl.slow:
        return []
    return [_slow_node(sl) or _slow_rank(sl) or _slow_links(sl)]


def _line_rate_findings(per_rank: Mapping[int, BandwidthData], backend: str) -> list[Finding]:
    """Links between nodes far below the line rate of the NICs at both ends.

    Only for gloo: NCCL moves data over InfiniBand/RoCE when present, not the socket NIC.
    """
    if backend == "nccl":
        return []
    slow = {}
    for (src, dst), bw in _known_links(per_rank).items():
        a, b = per_rank[src], per_rank[dst]
        if a.get("host") == b.get("host"):
            continue
        speeds = [d.get("nic", {}).get("speed_mbps") for d in (a, b)]
        known = [s for s in speeds if s]
        if len(known) != len(speeds):  # a NIC whose line rate is unknown
            continue
        line_gbps = min(known) / 8 / 1000
        if bw < LINE_RATE_SHARE * line_gbps:
            slow[(src, dst)] = (bw, line_gbps)
    if not slow:
        return []
    return [Finding(
        "COMM_BANDWIDTH_LOW",
        f"link(s) between nodes below {LINE_RATE_SHARE:.0%} of their NICs' line rate: "
        + ", ".join(f"{s}->{t} {bw:.3f} of {line:.2f} GB/s" for (s, t), (bw, line)
                    in sorted(slow.items())),
        ranks=sorted({s for s, _ in slow}),
        evidence={"links": {f"{s}->{t}": {"gbps": bw, "line_rate_gbps": line}
                            for (s, t), (bw, line) in sorted(slow.items())},
                  "nics": {str(r): d.get("nic") for r, d in sorted(per_rank.items())}})]


def analyze(per_rank: Mapping[int, BandwidthData], world_size: int,
            opts: CheckOptions | Mapping[str, object] | None = None) -> tuple[Check, list[Finding]]:
    opts = CheckOptions.coerce(opts)
    if world_size < 2:
        # a one-rank collective moves nothing: NCCL returns at once and the "bandwidth"
        # is the tensor's size over a launch (9,663 GB/s on an H200, docs/gpu-verified.md)
        return Check("bandwidth", "skipped: one rank: no link to measure (run --nproc 2 "
                     "or more)", status="skipped", group="Communication"), []
    rows = table(per_rank, world_size)
    # A link slower than the others names itself; when all are equally slow, the NICs'
    # line rate is the expectation (issue: "from the detected link type where known").
    findings = (_link_findings(per_rank)
                or _line_rate_findings(per_rank, opts.backend or "gloo"))
    ar = [r for r in rows if r["collective"] == "all_reduce"]
    peak = max(ar, key=lambda r: r["size"]) if ar else None
    expect = opts.expect_busbw
    if peak and expect and peak["busbw_gbps"] < EXPECTED_SHARE * float(expect) and not findings:
        findings.append(Finding(
            "COMM_BANDWIDTH_LOW",
            f"all_reduce busbw {peak['busbw_gbps']:.2f} GB/s is below half the expected "
            f"{float(expect):.2f} GB/s",
            evidence={"size": peak["size"], "busbw_gbps": peak["busbw_gbps"],
                      "expected_busbw_gbps": float(expect)}))
    links = directed_links(per_rank)
    summary = (f"all_reduce busbw {peak['busbw_gbps']:.3f} GB/s at {peak['size'] >> 10} KiB"
               if peak else "no all_reduce measured")
    if links:
        summary += (f"; {len(links)} links {min(links.values()):.3f}-"
                    f"{max(links.values()):.3f} GB/s")
    check = Check("bandwidth", summary, group="Communication",
                  data={"table": rows, "links_gbps": {f"{s}->{t}": v
                                                      for (s, t), v in sorted(links.items())}})
    return check, findings
