"""Connectivity evidence (all-reduce, hypercube p2p rounds) -> COMM_CONNECTIVITY, naming
the rank or the pair that fails."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.schedule import hypercube
from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.report import Check

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.probes.records import ConnectivityData


def failed_pairs(per_rank: Mapping[int, ConnectivityData]) -> dict[tuple[int, int], str]:
    """Pairs (a < b) where either side saw the transfer fail, with the first error.

    Only pairs whose both ranks ran the probe: a partner that never got there (stuck in
    init, dead) fails every transfer, and says nothing about the link (the launch analysis
    names that rank)."""
    bad: dict[tuple[int, int], str] = {}
    for r, d in per_rank.items():
        for peer, res in d.get("p2p", {}).items():
            if not res.get("ok") and int(peer) in per_rank:
                pair = (min(r, int(peer)), max(r, int(peer)))
                bad.setdefault(pair, f"rank {r}: {res.get('error', 'failed')}")
    return bad


def _allreduce_findings(per_rank: Mapping[int, ConnectivityData], world_size: int
                        ) -> tuple[list[int], list[int], list[Finding]]:
    """(ranks with a wrong result, ranks where it never finished, their findings)."""
    findings = []
    wrong = sorted(r for r, d in per_rank.items() if not d.get("allreduce_ok"))
    unfinished = [r for r in wrong if per_rank[r].get("allreduce_error")]
    # Without every rank in the probe the all-reduce cannot finish: the missing ranks are
    # the finding (named by the launch analysis), not the ranks that waited for them.
    if unfinished and len(per_rank) == world_size:
        findings.append(Finding(
            "COMM_CONNECTIVITY", "world all-reduce did not finish", ranks=unfinished,
            evidence={"error": {r: per_rank[r]["allreduce_error"] for r in unfinished}}))
    wrong = [r for r in wrong if r not in unfinished]
    if wrong:
        findings.append(Finding(
            "COMM_CONNECTIVITY", "world all-reduce returned a wrong result", ranks=wrong,
            evidence={"expected": per_rank[wrong[0]].get("allreduce_expected"),
                      "got": {r: per_rank[r].get("allreduce_got") for r in wrong}}))
    return wrong, unfinished, findings


def _p2p_findings(bad: dict[tuple[int, int], str], world_size: int,
                  rounds: list[dict[int, int]]) -> list[Finding]:
    """A rank that fails with every partner (two at least) is the problem; otherwise it is
    the pair."""
    if not bad:
        return []
    partners = {r: sum(r in p for p in rounds) for r in range(world_size)}
    touched: dict[int, int] = {}
    for a, b in bad:
        touched[a] = touched.get(a, 0) + 1
        touched[b] = touched.get(b, 0) + 1
    hubs = sorted(r for r, c in touched.items() if c == partners.get(r) and c >= 2)
    if world_size > 2 and hubs and all(a in hubs or b in hubs for a, b in bad):
        return [Finding(
            "COMM_CONNECTIVITY",
            f"rank {format_ranks(hubs)} cannot exchange point-to-point with any other rank",
            ranks=hubs, evidence={"failed_pairs": {f"{a}<->{b}": e
                                                   for (a, b), e in bad.items()}})]
    return [Finding("COMM_CONNECTIVITY", f"ranks {a} and {b} cannot exchange point-to-point",
                    ranks=[a, b], evidence={"pair": f"{a}<->{b}", "error": err})
            for (a, b), err in sorted(bad.items())]


def analyze(per_rank: Mapping[int, ConnectivityData], world_size: int,
            opts: CheckOptions | Mapping[str, object] | None = None) -> tuple[Check, list[Finding]]:
    wrong, unfinished, findings = _allreduce_findings(per_rank, world_size)
    bad = failed_pairs(per_rank)
    rounds = hypercube(world_size)
    findings += _p2p_findings(bad, world_size, rounds)
    n_pairs = sum(len(p) for p in rounds) // 2
    worst = max((d.get("allreduce_ms", 0.0) for d in per_rank.values()), default=0.0)
    state = ("ok" if not (wrong or unfinished) else
             f"wrong on rank {format_ranks(wrong)}" if wrong else
             f"unfinished on rank {format_ranks(unfinished)}")
    summary = (f"all-reduce on {world_size} ranks {state} ({worst:.1f} ms); "
               f"{n_pairs - len(bad)}/{n_pairs} rank pairs ok in {len(rounds)} round(s)")
    return Check("connectivity", summary, group="Communication"), findings
