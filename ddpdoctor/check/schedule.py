"""Pairwise schedules: every pair of ranks meets once, in O(N) rounds.

The circle method of a round-robin tournament: N-1 rounds for even N (N for odd, one rank
sits out each round), each round pairing every rank with a different partner, so all pairs
are tested in parallel rather than N^2 serial pairs.
"""

from __future__ import annotations


def round_robin(n: int) -> list[dict[int, int]]:
    """Rounds of ``{rank: partner}``; a rank missing from a round sits it out."""
    if n < 2:
        return []
    players = list(range(n)) + ([-1] if n % 2 else [])
    m = len(players)
    rounds = []
    for _ in range(m - 1):
        pairs: dict[int, int] = {}
        for i in range(m // 2):
            a, b = players[i], players[m - 1 - i]
            if a >= 0 and b >= 0:
                pairs[a], pairs[b] = b, a
        rounds.append(pairs)
        players = [players[0], players[-1]] + players[1:-1]
    return rounds
