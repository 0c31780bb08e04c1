"""The socket mesh's rows -> COMM_CONNECTIVITY naming the node, the rank or the pair.

Every directed connection i -> j between ranks that published an address was tried once;
a row carries only its failures (and how many it tried), so a report stays small and this
analysis linear in ranks + failures at any scale. The failures are explained from the
largest unit down: a node none of whose ranks reach (or are reached from) another node, a
rank no other rank reaches or that reaches none, then each remaining pair, with its
direction when only one way fails (a one-way firewall, a route on one side only).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.schedule import tier
from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.report import Check

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.mesh import MeshRow, MeshSkipped

FID = "COMM_CONNECTIVITY"
Edge = tuple[int, int]


@dataclass(frozen=True)
class Mesh:
    """The rows as counts: who tried whom is implied (everyone who published, but the
    addresses a rank never received), only failures are listed."""

    rows: dict[int, MeshRow]
    nodes: dict[int, str]
    failed: dict[Edge, str]
    size: Counter[str]  # ranks per node

    @classmethod
    def of(cls, rows: dict[int, MeshRow]) -> Mesh:
        failed = {(i, int(j)): str(err) for i, row in rows.items()
                  for j, err in row.get("failed", {}).items() if int(j) in rows}
        nodes = {r: str(d.get("node", "?")) for r, d in rows.items()}
        return cls(rows, nodes, failed, Counter(nodes.values()))

    def unseen(self, i: int) -> set[int]:
        return {r for r in self.rows[i].get("unpublished", []) if r in self.rows}

    def tried_from(self, i: int, node: str | None = None, outside: bool = False) -> int:
        """Connections rank ``i`` tried (to ``node``'s ranks, or to every other node's)."""
        if node is None:
            return len(self.rows) - 1 - len(self.unseen(i))
        inside = self.size[node] - (self.nodes[i] == node) - sum(
            self.nodes[r] == node for r in self.unseen(i))
        return self.tried_from(i) - inside if outside else inside

    def tried_into(self, j: int) -> int:
        return sum(j not in self.unseen(i) for i in self.rows if i != j)

    def addr(self, r: int) -> str:
        return str(self.rows[r].get("address", "?"))

    def example(self, edges: list[Edge]) -> str:
        i, j = sorted(edges)[0]
        return f"{i} ({self.addr(i)}) -> {j} ({self.addr(j)}): {self.failed[(i, j)]}"


def _node_findings(m: Mesh) -> list[Finding]:
    hosts = sorted(m.size)
    if len(hosts) < 2:
        return []
    cut = []
    for h in hosts:
        cross = [e for e in m.failed if (m.nodes[e[0]] == h) != (m.nodes[e[1]] == h)]
        if not cross:
            continue
        tried = (sum(m.tried_from(i, h, outside=True) for i in m.rows if m.nodes[i] == h)
                 + sum(m.tried_from(j, h) for j in m.rows if m.nodes[j] != h))
        if tried and len(cross) == tried:
            cut.append((h, cross))
    if len(hosts) == 2 and cut:
        a, b = hosts
        return [Finding(FID, f"nodes {a} and {b} cannot reach each other: every connection "
                             "between their ranks fails (intra-node connections work)",
                        ranks=sorted(m.rows), evidence={"nodes": hosts, "tier": "inter-node",
                                                        "example": m.example(cut[0][1])})]
    out = []
    for h, cross in cut:
        ranks = sorted(r for r, n in m.nodes.items() if n == h)
        out.append(Finding(FID, f"node {h} cannot reach the other nodes: every connection "
                                f"between its rank(s) {format_ranks(ranks)} and other nodes "
                                "fails", ranks=ranks,
                           evidence={"node": h, "tier": "inter-node",
                                     "example": m.example(cross)}))
    return out


def _rank_findings(m: Mesh) -> list[Finding]:
    if len(m.rows) < 3:
        return []  # two ranks: a failed pair cannot be pinned on either side
    out_failed = Counter(i for i, _ in m.failed)
    in_failed = Counter(j for _, j in m.failed)
    out = []
    for r in sorted(set(out_failed) | set(in_failed)):
        no_in = in_failed[r] == m.tried_into(r) > 0
        no_out = out_failed[r] == m.tried_from(r) > 0
        if not (no_in or no_out):
            continue
        what = ("cannot reach, and cannot be reached from, any other rank" if no_in and no_out
                else "cannot be reached from any other rank" if no_in
                else "cannot connect to any other rank")
        edges = [e for e in m.failed if (no_in and e[1] == r) or (no_out and e[0] == r)]
        out.append(Finding(FID, f"rank {r} {what} (listening on {m.addr(r)})", ranks=[r],
                           evidence={"address": m.addr(r), "node": m.nodes[r],
                                     "example": m.example(edges)}))
    return out


def _pair_findings(m: Mesh, explained: set[int]) -> list[Finding]:
    out = []
    for a, b in sorted({(min(e), max(e)) for e in m.failed}):
        if a in explained or b in explained:
            continue
        where = tier(m.nodes[a], m.nodes[b])
        ev: dict[str, object] = {"pair": f"{a}<->{b}", "tier": where,
                              "addresses": {a: m.addr(a), b: m.addr(b)}}
        if (a, b) in m.failed and (b, a) in m.failed:
            ev["error"] = f"rank {a}: {m.failed[(a, b)]}"
            title = f"ranks {a} and {b} cannot reach each other ({where}; both directions)"
        else:
            src, dst = (a, b) if (a, b) in m.failed else (b, a)
            ev["direction"] = f"{src}->{dst}"
            ev["error"] = f"rank {src}: {m.failed[(src, dst)]}"
            title = (f"rank {src} cannot connect to rank {dst} ({where}), while {dst} "
                     f"connects to {src}: a one-way block (firewall, route)")
        out.append(Finding(FID, title, ranks=[a, b], evidence=ev))
    return out


def _summary(m: Mesh) -> str:
    counts = {"intra-node": [0, 0], "inter-node": [0, 0]}
    for i in m.rows:
        counts["intra-node"][1] += m.tried_from(i, m.nodes[i])
        counts["inter-node"][1] += m.tried_from(i, m.nodes[i], outside=True)
    for i, j in m.failed:
        counts[tier(m.nodes[i], m.nodes[j])][0] += 1
    tried = sum(n for _, n in counts.values())
    parts = [f"{t} {n - bad}/{n}" for t, (bad, n) in counts.items() if n]
    slowest = max((float(d.get("slowest_ms", 0.0)) for d in m.rows.values()), default=0.0)
    summary = (f"{tried - len(m.failed)}/{tried} directed connections ok between "
               f"{len(m.rows)} ranks on {len(m.size)} node(s) "
               f"({', '.join(parts) or 'none tried'}), one round, slowest {slowest:.1f} ms")
    unpublished = sorted({r for d in m.rows.values() for r in d.get("unpublished", [])})
    if unpublished:
        summary += f"; rank(s) {format_ranks(unpublished)} never published an address"
    return summary


def analyze(per_rank: Mapping[int, MeshRow | MeshSkipped], world_size: int,
            opts: CheckOptions | Mapping[str, object] | None = None) -> tuple[Check, list[Finding]]:
    rows = {r: d for r, d in per_rank.items() if "tried" in d}
    if not rows:
        why = next((d.get("skipped") for d in per_rank.values() if d.get("skipped")), "")
        return Check("reachability", f"skipped: {why or 'no rank ran the mesh'}",
                     status="skipped", group="Communication"), []
    m = Mesh.of(rows)
    findings = _node_findings(m) or _rank_findings(m)
    findings += _pair_findings(m, {r for f in findings for r in f.ranks})
    return Check("reachability", _summary(m), group="Communication"), findings
