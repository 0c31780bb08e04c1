"""COMM_SLOW_RANK in watch: the link-probe schedule and verdict rules (pure), and the probe
itself on 3 real ranks. The planted slow link (tc tbf between two network namespaces) is
in test_watch_multinode.py."""

from __future__ import annotations

import math

import pytest

from ddpdoctor.check.launcher import launch
from ddpdoctor.watch.links import (
    Probe,
    culprits,
    link_times,
    probe_from_rows,
    rounds,
    senders_to,
    slow_links,
    slow_per_byte,
    verdict,
)

import launch_fns


@pytest.mark.parametrize("world", [2, 3, 4, 5, 8])
def test_rounds_cover_every_ring_link_once_with_no_rank_twice(world):
    plan = rounds(world)
    links = [link for r in plan for link in r]
    expected = {(s, d) for d in range(world) for s in senders_to(d, world)}
    assert sorted(links) == sorted(expected) and len(links) == len(set(links))
    for r in plan:
        ranks = [x for link in r for x in link]
        assert len(ranks) == len(set(ranks))  # nobody sends and receives in one round
    assert len(plan) <= 6


def test_link_times_from_rows():
    assert link_times([[0.1, math.nan], [0.2, math.nan]], 2) == {(1, 0): 0.1, (0, 1): 0.2}
    t = link_times([[1, 2], [3, 4], [5, 6]], 3)  # rank r: [from r-1, from r+1]
    assert t == {(2, 0): 1, (1, 0): 2, (0, 1): 3, (2, 1): 4, (1, 2): 5, (0, 2): 6}
    assert link_times([[math.nan, math.nan]] * 2, 2) == {}


def test_slow_egress_of_one_rank():
    fast = 0.001
    times = {(s, d): fast for d in range(4) for s in senders_to(d, 4)}
    times[(2, 1)] = times[(2, 3)] = 0.09  # both links out of rank 2
    slow = slow_links(times, 4.0, 0.005)
    assert set(slow) == {(2, 1), (2, 3)}
    assert culprits(slow) == ([2], "egress")
    times[(2, 3)] = fast
    times[(0, 3)] = 0.09  # into 3, from 2 and 0: ingress of rank 3
    times[(2, 3)] = 0.09
    times[(2, 1)] = fast
    assert culprits(slow_links(times, 4.0, 0.005)) == ([3], "ingress")


def test_two_ranks_name_the_sender_and_small_or_even_times_are_not_slow():
    assert culprits(slow_links({(1, 0): 0.088, (0, 1): 0.0008}, 4.0, 0.005)) == ([1], "egress")
    # 4x slower but by 3 ms only: loopback jitter on a busy machine
    assert slow_links({(1, 0): 0.004, (0, 1): 0.0008}, 4.0, 0.005) == {}
    assert slow_links({(1, 0): 0.02, (0, 1): 0.01}, 4.0, 0.005) == {}


def _throttled(times: dict) -> Probe:
    """A probe of links limited by bandwidth: the small transfer takes an eighth."""
    return Probe(times, {k: t * 7 / 8 for k, t in times.items()})


def test_verdict_needs_the_same_culprit_in_consecutive_probes():
    slow, ok = {(1, 0): 0.09, (0, 1): 0.001}, {(1, 0): 0.001, (0, 1): 0.001}
    other = {(1, 0): 0.001, (0, 1): 0.09}
    slow, ok, other = _throttled(slow), _throttled(ok), _throttled(other)
    assert verdict([slow], 4.0, 0.005, 2) is None
    assert verdict([slow, ok], 4.0, 0.005, 2) is None
    assert verdict([slow, other], 4.0, 0.005, 2) is None
    ranks, direction, links = verdict([ok, slow, slow], 4.0, 0.005, 2)
    assert (ranks, direction, list(links)) == ([1], "egress", [(1, 0)])


def test_a_sender_run_late_by_the_scheduler_is_no_slow_link():
    """Recorded in CI (2 ranks on a loaded 2-core host, a healthy job): 1->0 took 9.4 ms
    for 1 MiB against 0.75 ms on 0->1, in two probes in a row. A starved process is late
    by about the same for an eighth of the bytes; a throttled link is not."""
    full = {(0, 1): 0.00075, (1, 0): 0.00936}
    late = Probe(full, {(0, 1): 0.00075 - 0.0001, (1, 0): 0.00936 - 0.0088})
    assert slow_links(late.full, 4.0, 0.005) == {(1, 0): 0.00936}
    assert slow_per_byte(late, 4.0, 0.005) == {}
    assert verdict([late, late], 4.0, 0.005, 2) is None
    # the planted tc tbf at 100 Mbit/s (test_watch_multinode): bytes take the time
    throttled = Probe({(0, 1): 0.0008, (1, 0): 0.088}, {(0, 1): 0.0007, (1, 0): 0.078})
    assert verdict([throttled, throttled], 4.0, 0.005, 2)[:2] == ([1], "egress")


def test_probe_rows_carry_full_then_small_times():
    rows = [[0.09, math.nan, 0.01, math.nan], [0.002, math.nan, 0.001, math.nan]]
    probe = probe_from_rows(rows, 2)
    assert probe.full == {(1, 0): 0.09, (0, 1): 0.002}
    assert probe.extra == pytest.approx({(1, 0): 0.08, (0, 1): 0.001})
    assert probe_from_rows([[math.nan] * 4] * 2, 2).empty


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_probe_on_three_ranks_ignores_a_late_rank():
    """Rank 2 reaches each step boundary 0.3 s late: the probe's clock starts only once the
    sender is there, so no link looks slow (a naive timer would see 300 ms)."""
    res = launch(launch_fns.watched_link_probe, nproc=3, args=(2, 0.3), backend="gloo",
                 deadline_s=90)
    assert res.ok, res
    for rank, value in res.values().items():
        assert value["findings"] == []
        for times in value["times"]:
            assert len(times) == 4 and all(0 < t < 0.05 for t in times), (rank, times)


def test_links_between_hosts_are_compared_with_each_other_only():
    """2 hosts x 2 ranks (hosts per rank: A A B B): loopback 0.3 ms, 1 GbE 9 ms is no
    fault; node B's egress at 100 Mbit/s is."""
    hosts = [7, 7, 9, 9]
    times = {(s, d): 0.0003 for d in range(4) for s in senders_to(d, 4)}
    for link in ((1, 2), (2, 1), (3, 0), (0, 3)):
        times[link] = 0.009
    assert slow_links(times, 4.0, 0.005, hosts) == {}
    assert slow_links(times, 4.0, 0.005) != {}  # without host kinds: a false alarm
    times[(2, 1)] = times[(3, 0)] = 0.085
    slow = slow_links(times, 4.0, 0.005, hosts)
    assert set(slow) == {(2, 1), (3, 0)} and culprits(slow) == ([2, 3], "egress")


def test_a_rank_slow_both_ways_is_named_itself():
    times = {(s, d): 0.001 for d in range(4) for s in senders_to(d, 4)}
    for link in ((2, 1), (2, 3), (1, 2), (3, 2)):
        times[link] = 0.09
    assert culprits(slow_links(times, 4.0, 0.005)) == ([2], "both")


def test_links_within_one_host_are_never_judged():
    """Recorded in CI (a healthy 2-rank job on a loaded 2-core host, both ranks on one
    host): 1->0 took 6.7 ms for 1 MiB against 0.8 ms, twice in a row, and the extra bytes
    were slow too (a rank starved for the whole transfer). Between two processes of one
    host there is no NIC: the kernel's loopback is slow only when the scheduler is."""
    starved = Probe({(0, 1): 0.0008, (1, 0): 0.0067}, {(0, 1): 0.0007, (1, 0): 0.0059})
    assert verdict([starved, starved], 4.0, 0.005, 2, hosts=[5, 5]) is None
    assert verdict([starved, starved], 4.0, 0.005, 2)[:2] == ([1], "egress")  # hosts unknown
    # 2 hosts x 2 ranks: the links within host 7 are not judged, even when one is slow
    hosts = [7, 7, 9, 9]
    times = {(s, d): 0.009 for d in range(4) for s in senders_to(d, 4)}
    times[(0, 1)] = times[(1, 0)] = 0.0003
    times[(3, 2)] = 0.08  # within host 9: a starved rank 3, not a link
    assert slow_links(times, 4.0, 0.005, hosts) == {}
