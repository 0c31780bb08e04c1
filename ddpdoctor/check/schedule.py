"""Pairwise schedules for the check's backend transfers: O(log N) rounds.

The hypercube (recursive doubling): in round k every rank pairs with ``rank XOR 2**k``, so
ceil(log2 N) rounds give each rank log2 N partners, all pairs of a round in parallel. With
ranks numbered node by node (as every launcher numbers them), the first
log2(ranks per node) rounds stay inside a node and the later ones cross nodes: intra-node
and inter-node links are measured apart, and every node meets log2(nodes) other nodes.
A rank whose transfers fail with every partner is the bad one; a failure with one partner
only is that link. Reachability of *every* pair is proved in one round by the socket mesh
(``ddpdoctor/check/mesh.py``), not here.
"""

from __future__ import annotations


def hypercube(n: int) -> list[dict[int, int]]:
    """Rounds of ``{rank: partner}``; a rank missing from a round sits it out.

    For N not a power of two a partner ``rank XOR 2**k >= N`` does not exist and that rank
    sits the round out; every rank still has at least one partner (its highest set bit
    flipped, or rank 1 for rank 0).
    """
    if n < 2:
        return []
    rounds = []
    k = 1
    while k < n:
        pairs = {r: r ^ k for r in range(n) if (r ^ k) < n}
        rounds.append(pairs)
        k <<= 1
    return rounds


def tier(a_node: str | None, b_node: str | None) -> str:
    """``intra-node`` or ``inter-node`` for a pair of ranks on these hosts."""
    return "intra-node" if a_node is not None and a_node == b_node else "inter-node"
