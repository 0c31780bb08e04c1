"""The socket mesh's rows -> COMM_CONNECTIVITY naming the node, the rank or the pair.

Every directed connection i -> j was tried once. The failures are explained from the
largest unit down: a node none of whose ranks reach (or are reached from) another node, a
rank no other rank reaches or that reaches none, then each remaining pair, with its
direction when only one way fails (a one-way firewall, a route on one side only).
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.schedule import tier
from ddpdoctor.findings import Finding, format_ranks
from ddpdoctor.report import Check

FID = "COMM_CONNECTIVITY"
Edge = tuple[int, int]


def _edges(per_rank: dict[int, dict[str, Any]]) -> tuple[set[Edge], dict[Edge, str]]:
    """(every directed connection tried between ranks that sent data, the failed ones)."""
    tried: set[Edge] = set()
    failed: dict[Edge, str] = {}
    for i, row in per_rank.items():
        for peer, res in row.get("peers", {}).items():
            j = int(peer)
            if j not in per_rank:
                continue
            tried.add((i, j))
            if not res.get("ok"):
                failed[(i, j)] = str(res.get("error", "failed"))
    return tried, failed


def _addr(per_rank: dict[int, dict[str, Any]], r: int) -> str:
    return str(per_rank[r].get("address", "?"))


def _node_findings(per_rank: dict[int, dict[str, Any]], nodes: dict[int, str],
                   tried: set[Edge], failed: dict[Edge, str]) -> list[Finding]:
    hosts = sorted(set(nodes.values()))
    if len(hosts) < 2:
        return []
    cut = []
    for h in hosts:
        cross = [e for e in tried if (nodes[e[0]] == h) != (nodes[e[1]] == h)]
        if cross and all(e in failed for e in cross):
            cut.append(h)
    if not cut:
        return []
    if len(hosts) == 2:
        a, b = hosts
        ranks = sorted(per_rank)
        edges = [e for e in tried if nodes[e[0]] != nodes[e[1]]]
        return [Finding(FID, f"nodes {a} and {b} cannot reach each other: every connection "
                             "between their ranks fails (intra-node connections work)",
                        ranks=ranks, evidence={"nodes": hosts, "tier": "inter-node",
                                               "example": _example(per_rank, edges, failed)})]
    out = []
    for h in cut:
        ranks = sorted(r for r, n in nodes.items() if n == h)
        edges = [e for e in tried if (nodes[e[0]] == h) != (nodes[e[1]] == h)]
        out.append(Finding(FID, f"node {h} cannot reach the other nodes: every connection "
                                f"between its rank(s) {format_ranks(ranks)} and other nodes "
                                "fails", ranks=ranks,
                           evidence={"node": h, "tier": "inter-node",
                                     "example": _example(per_rank, edges, failed)}))
    return out


def _example(per_rank: dict[int, dict[str, Any]], edges: list[Edge],
             failed: dict[Edge, str]) -> str:
    i, j = sorted(e for e in edges if e in failed)[0]
    return f"{i} ({_addr(per_rank, i)}) -> {j} ({_addr(per_rank, j)}): {failed[(i, j)]}"


def _rank_findings(per_rank: dict[int, dict[str, Any]], tried: set[Edge],
                   failed: dict[Edge, str]) -> list[Finding]:
    if len(per_rank) < 3:
        return []  # two ranks: a failed pair cannot be pinned on either side
    out = []
    for r in sorted(per_rank):
        inbound = [e for e in tried if e[1] == r]
        outbound = [e for e in tried if e[0] == r]
        no_in = bool(inbound) and all(e in failed for e in inbound)
        no_out = bool(outbound) and all(e in failed for e in outbound)
        if not (no_in or no_out):
            continue
        what = ("cannot reach, and cannot be reached from, any other rank" if no_in and no_out
                else "cannot be reached from any other rank" if no_in
                else "cannot connect to any other rank")
        edges = (inbound if no_in else []) + (outbound if no_out else [])
        out.append(Finding(FID, f"rank {r} {what} (listening on {_addr(per_rank, r)})",
                           ranks=[r], evidence={"address": _addr(per_rank, r),
                                                "node": per_rank[r].get("node"),
                                                "example": _example(per_rank, edges, failed)}))
    return out


def _pair_findings(per_rank: dict[int, dict[str, Any]], nodes: dict[int, str],
                   failed: dict[Edge, str], explained: set[int]) -> list[Finding]:
    out = []
    pairs = sorted({(min(e), max(e)) for e in failed})
    for a, b in pairs:
        if a in explained or b in explained:
            continue
        both = (a, b) in failed and (b, a) in failed
        where = tier(nodes.get(a), nodes.get(b))
        ev = {"pair": f"{a}<->{b}", "tier": where,
              "addresses": {a: _addr(per_rank, a), b: _addr(per_rank, b)}}
        if both:
            ev["error"] = f"rank {a}: {failed[(a, b)]}"
            title = f"ranks {a} and {b} cannot reach each other ({where}; both directions)"
        else:
            src, dst = (a, b) if (a, b) in failed else (b, a)
            ev["direction"] = f"{src}->{dst}"
            ev["error"] = f"rank {src}: {failed[(src, dst)]}"
            title = (f"rank {src} cannot connect to rank {dst} ({where}), while {dst} "
                     f"connects to {src}: a one-way block (firewall, route)")
        out.append(Finding(FID, title, ranks=[a, b], evidence=ev))
    return out


def analyze(per_rank: dict[int, dict[str, Any]], world_size: int,
            opts: CheckOptions | dict[str, Any] | None = None) -> tuple[Check, list[Finding]]:
    rows = {r: d for r, d in per_rank.items() if "peers" in d}
    if not rows:
        why = next((d.get("skipped") for d in per_rank.values() if d.get("skipped")), "")
        return Check("reachability", f"skipped: {why or 'no rank ran the mesh'}",
                     status="skipped", group="Communication"), []
    nodes = {r: str(d.get("node", "?")) for r, d in rows.items()}
    tried, failed = _edges(rows)
    findings = _node_findings(rows, nodes, tried, failed)
    explained = {r for f in findings for r in f.ranks}
    if not findings:
        findings = _rank_findings(rows, tried, failed)
        explained = {r for f in findings for r in f.ranks}
    findings += _pair_findings(rows, nodes, failed, explained)
    counts = {t: [0, 0] for t in ("intra-node", "inter-node")}
    for e in tried:
        c = counts[tier(nodes[e[0]], nodes[e[1]])]
        c[1] += 1
        c[0] += e not in failed
    parts = [f"{t} {ok}/{n}" for t, (ok, n) in counts.items() if n]
    slowest = max((res.get("ms", 0.0) for d in rows.values() for res in d["peers"].values()
                   if res.get("ok")), default=0.0)
    hosts = len(set(nodes.values()))
    summary = (f"{len(tried) - len(failed)}/{len(tried)} directed connections ok between "
               f"{len(rows)} ranks on {hosts} node(s) ({', '.join(parts) or 'none tried'}), "
               f"one round, slowest {slowest:.1f} ms")
    unpublished = sorted({r for d in rows.values() for r in d.get("unpublished", [])})
    if unpublished:
        summary += f"; rank(s) {format_ranks(unpublished)} never published an address"
    return Check("reachability", summary, group="Communication"), findings
