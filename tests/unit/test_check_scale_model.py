"""The check's scale model (ddpdoctor/check/scale_model.py): the simulation alone, no
processes. Tiny costs are chosen so that each phase can be computed by hand."""

import math
from dataclasses import replace

import pytest

from ddpdoctor.check import mesh, schedule
from ddpdoctor.check import scale_model as sm
from ddpdoctor.check.probes import connectivity


def _costs(**kw):
    base = sm.Costs(doctor_s=0.0, rank_start_s=0.0, torchrun_s=0.0, import_s=0.0, exit_s=0.0,
                    store_op_s=0.0, store_rtt_s=0.0, store_byte_s=0.0, env_s=0.0,
                    dataloader_s=0.0, conn_cpu_s=0.0, pg_fixed_s=0.0, pg_pair_s=0.0,
                    report_rank_s=0.0, mesh_row_bytes=0.0, addr_bytes=0.0,
                    intra=sm.Link(0.0, 0.0), inter=sm.Link(0.0, 0.0))
    return replace(base, **kw)


def _job(nodes, per_node=8, **kw):
    return sm.Job(nodes, per_node, float(per_node), "torchrun", **kw)


def test_constants_mirror_the_check():
    assert sm.MAX_CONNECTING == mesh.MAX_CONNECTING
    assert sm.P2P_BYTES == connectivity.P2P_ELEMENTS * 4
    for n in (2, 3, 8, 100, 4096):
        rounds = schedule.hypercube(n)
        assert sm.hypercube_rounds(n) == len(rounds)
        assert all(sm.partner(r, i, n) == rnd.get(r) for i, rnd in enumerate(rounds)
                   for r in range(n))


def test_a_tiny_case_by_hand():
    """2 nodes x 1 rank, a few non-zero costs: the wall is their sum, exactly."""
    costs = _costs(torchrun_s=1.0, env_s=0.5, dataloader_s=0.25, inter=sm.Link(0.01, 0.0))
    depth = sm.Depth(collectives=("all_reduce",), min_bytes=1024, max_bytes=1024,
                     trials=1, trial_budget_s=None, iters=1, warmup=0, link_iters=1)
    res = sm.simulate(sm.Job(2, 1, 1.0, "torchrun", depth=depth), costs)
    # start 1, env .5, mesh (one wave = 2 alphas; its barrier waits, no polling),
    # all-reduce 2 alphas, p2p 2 alphas, sweep: barrier 1 alpha + 1 all-reduce 2 alphas,
    # links 2 dirs x 2 alphas, dataloader .25, reporter poll/2
    expected = (1 + 0.5 + 0.02 + 0.02 + 0.02 + 0.01 + 0.02 + 0.04 + 0.25 + 0.1)
    assert res.wall_s == pytest.approx(expected, abs=1e-9)


def test_p2p_and_link_rounds_grow_with_log2_n():
    costs = _costs(inter=sm.Link(0.001, 0.0), intra=sm.Link(0.001, 0.0))
    depth = sm.Depth(collectives=())
    walls = {n: sm.simulate(_job(n // 8, depth=depth), costs).wall_s for n in (16, 64, 512)}
    # each round: a p2p exchange (2 alphas) and a link round (2 x link_iters x 2 alphas);
    # the world all-reduce adds 2(N-1) alphas, the mesh's connect waves ceil((N-1)/32) RTTs
    for n, wall in walls.items():
        rounds = math.ceil(math.log2(n))
        fixed = 2 * (n - 1) * 0.001 + sm.mesh_waves(n - 1) * 0.002 + sm.REPORTER_POLL_S / 2
        assert wall == pytest.approx(fixed + rounds * (0.002 + 2 * 3 * 0.002), abs=1e-9)


def test_a_blocked_pair_on_nccl_adds_the_mesh_timeout_and_its_p2p_deadline_once():
    costs = _costs(inter=sm.Link(0.001, 0.0), intra=sm.Link(0.001, 0.0), nccl=_nccl())
    job = _job(8, depth=sm.Depth(collectives=()), backend="nccl")
    healthy = sm.simulate(job, costs)
    blocked = sm.simulate(replace(job, bad_pair=(0, 32)), costs)  # partners in the last round
    assert healthy.ended_by == blocked.ended_by == "report"
    # the mesh: the dead peer's slot ends the timeout after it started (the other waves
    # overlap it); the p2p round: its deadline instead of 2 alphas + the lazy connect
    extra = (sm.mesh_connect_timeout_s(120) - sm.mesh_waves(63) * 0.002
             + sm.p2p_deadline_s(120, 64) - 2 * 0.001 - 0.01)
    assert blocked.wall_s - healthy.wall_s == pytest.approx(extra, abs=0.01)
    phases = dict(blocked.phases)
    assert "process group init" in phases and "bandwidth" in phases  # nccl's init is not cut


def test_a_blocked_pair_on_gloo_ends_after_the_mesh():
    costs = _costs(torchrun_s=1.0, env_s=0.5, inter=sm.Link(0.001, 0.0),
                   intra=sm.Link(0.001, 0.0), pg_pair_s=1.0, dataloader_s=5.0)
    res = sm.simulate(_job(8, bad_pair=(0, 63)), costs)
    assert res.ended_by == "report"
    assert res.wall_s == pytest.approx(1.0 + 0.5 + sm.mesh_connect_timeout_s(120)
                                       + sm.REPORTER_POLL_S / 2, abs=0.01)
    phases = dict(res.phases)
    assert "process group init" not in phases and "bandwidth" not in phases
    assert "dataloader" not in phases  # a rank-stage probe: "could not run"
    assert dict(res.store_ops_by).get("init", 0) == 0


def _nccl(**kw):
    base = sm.Nccl(root_per_rank_s=0.0, bootstrap_step_s=0.0, bootstrap_allgathers=3,
                   init_fixed_s=0.0, base_s=0.0, ring_nvlink_s=0.0, ring_net_s=0.0,
                   tree_nvlink_s=0.0, tree_net_s=0.0, busbw_node=1e12, busbw_nodes=1e12,
                   p2p_intra=sm.Link(0.0, 0.0), p2p_inter=sm.Link(0.0, 0.0),
                   p2p_connect_s=0.01)
    return replace(base, **kw)


def test_nccl_init_is_linear_in_n():
    nccl = _nccl(root_per_rank_s=1e-4, bootstrap_step_s=1e-5, p2p_connect_s=0.0)
    costs = _costs(nccl=nccl)
    depth = sm.Depth(collectives=())
    for n in (64, 512):
        res = sm.simulate(_job(n // 8, depth=depth, backend="nccl"), costs)
        assert dict(res.phases)["process group init"] == pytest.approx(
            n * 1e-4 + 3 * (n - 1) * 1e-5, abs=1e-4)
        assert dict(res.store_ops_by)["init"] == n  # the unique id: one get a rank


def test_nccl_collectives_follow_its_tuning_model():
    nc = _nccl(base_s=6.6e-6, ring_nvlink_s=0.47e-6, ring_net_s=2.7e-6, tree_nvlink_s=0.52e-6,
               tree_net_s=5e-6, busbw_node=450e9, busbw_nodes=400e9)
    # small all-reduce at 4,096 ranks on 512 nodes: the tree, ~log2(nodes) network hops
    tree = 6.6e-6 + 2 * (7 * 0.52e-6 + 9 * 5e-6) + 2 * 8 / 400e9
    assert sm.nccl_collective_s("all_reduce", 8, 4096, 512, nc) == pytest.approx(tree)
    # all-gather: ring only, N-1 steps (nodes-1 of them on the network)
    ring = 6.6e-6 + (4095 - 511) * 0.47e-6 + 511 * 2.7e-6 + 4095 / 4096 * 1024 / 400e9
    assert sm.nccl_collective_s("all_gather", 1024, 4096, 512, nc) == pytest.approx(ring)
    # large all-reduce: the ring's bandwidth term wins
    big = 1 << 30
    assert sm.nccl_collective_s("all_reduce", big, 16, 2, nc) == pytest.approx(
        6.6e-6 + 28 * 0.47e-6 + 2 * 2.7e-6 + 2 * 15 / 16 * big / 400e9)
    with pytest.raises(ValueError):
        sm.simulate(_job(1, backend="nccl"), _costs())  # nccl needs its costs


def test_the_mesh_grows_with_its_connection_waves():
    for peers in (1, 31, 32, 33, 63, 64, 65, 4095):
        t = sm.mesh_connect_s(peers, rtt_s=0.001, conn_cpu_s=0.0, contention=1.0)
        assert t == pytest.approx(math.ceil(peers / 32) * 0.001)
    # CPU-bound once a wave's CPU exceeds its round trip
    assert sm.mesh_connect_s(4095, 0.001, 1e-4, 1.0) == pytest.approx(4095 * 1e-4)
    # a dead peer: its slot waits the timeout from when it started
    assert sm.mesh_connect_s(100, 0.001, 0.0, 1.0, bad_position=99, timeout_s=5.0) == \
        pytest.approx(3 * 0.001 + 5.0)


def test_the_mesh_takes_o1_store_ops_per_rank():
    costs = _costs(store_op_s=1e-5)
    depth = sm.Depth(collectives=())
    per_rank = {}
    for n in (64, 512, 4096):
        res = sm.simulate(_job(n // 8, depth=depth, bad_pair=(0, n // 2)), costs)
        per_rank[n] = dict(res.store_ops_by)["mesh"] / n
    assert max(per_rank.values()) < 8 and per_rank[4096] == pytest.approx(per_rank[64], abs=0.1)


def test_gloo_init_is_quadratic_on_the_store_and_serialised():
    costs = _costs(store_op_s=1e-5)
    depth = sm.Depth(collectives=())
    ops = {n: dict(sm.simulate(_job(n // 8, depth=depth), costs).store_ops_by)["init"]
           for n in (64, 128, 256)}
    # torch's gloo rendezvous: 1 set + N waits + N gets a rank
    assert all(ops[n] == n * (2 * n + 1) for n in ops)
    res = sm.simulate(_job(32, depth=depth), costs)
    assert res.wall_s >= res.store_ops * 1e-5  # one server: its ops cannot overlap


def test_wall_time_is_monotonic_in_n():
    costs = _costs(store_op_s=1e-5, store_rtt_s=2e-5, env_s=0.1, conn_cpu_s=1e-4,
                   pg_pair_s=1e-4, report_rank_s=1e-5, intra=sm.Link(1e-5, 1e-10, 1e-10),
                   inter=sm.Link(2e-5, 1e-10, 1e-10))
    walls = [sm.simulate(_job(n // 8), costs).wall_s for n in (8, 16, 32, 64, 128)]
    assert walls == sorted(walls) and walls[0] < walls[-1]


def test_cpu_contention_slows_cpu_work():
    costs = _costs(env_s=1.0)
    one = sm.simulate(sm.Job(1, 2, 2.0, "local", depth=sm.Depth(collectives=())), costs)
    four = sm.simulate(sm.Job(1, 8, 2.0, "local", depth=sm.Depth(collectives=())), costs)
    assert four.wall_s - one.wall_s == pytest.approx(3.0, abs=0.1)


def test_collective_formulas():
    link = sm.Link(1e-5, 1e-9, 1e-10)
    n, size = 8, 1 << 20
    share = 7 / 8 * size
    assert sm.collective_s("all_reduce", size, n, link) == pytest.approx(
        14 * 1e-5 + 2 * share * 1e-9 + share * 1e-10)
    assert sm.collective_s("all_gather", size, n, link) == pytest.approx(7e-5 + share * 1e-9)
    assert sm.collective_s("broadcast", size, n, link) == pytest.approx(3 * (1e-5 + size * 1e-9))
    assert sm.collective_s("all_reduce", size, 1, link) == 0.0
