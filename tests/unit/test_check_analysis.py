"""Pure analysis of check probes: planted evidence in, exact findings out. No processes."""

import math

import pytest

from ddpdoctor.check.analysis import bandwidth, connectivity, dataloader, env, rendezvous
from ddpdoctor.check.busbw import busbw_gbps
from ddpdoctor.check.schedule import hypercube


def _env(**over):
    d = {
        "hostname": "node-a", "pid": 1, "local_rank": 0,
        "versions": {"python": "3.11.7", "torch": "2.13.0", "cuda": "12.8", "nccl": "2.27.7"},
        "env": {"NCCL_DEBUG": "WARN", "MASTER_ADDR": "10.0.0.1"},
        "interfaces": {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"], "ib0": ["10.1.0.2"]},
        "shm": {"total": 8 << 30, "free": 8 << 30},
        "ulimit": {"nofile": [1048576, 1048576], "memlock": [None, None]},
        "cpu_count": 64, "affinity": list(range(16)), "numa_nodes": {"node0": "0-63"},
        "torch_threads": 4, "torch_interop_threads": 4, "local_world_size": 4,
    }
    for k, v in over.items():
        d[k] = v
    return d


def _ids(findings):
    return [(f.id, f.ranks) for f in findings]


def test_env_healthy_gives_no_findings():
    checks, findings = env.analyze({r: _env() for r in range(4)}, 4)
    assert findings == []
    assert [c.name for c in checks] == ["versions", "known bugs", "env vars", "socket config",
                                        "shm", "limits"]


def test_env_version_mismatch_names_the_odd_rank():
    per = {r: _env() for r in range(4)}
    per[2] = _env(versions={**per[2]["versions"], "torch": "2.12.1"})
    _, findings = env.analyze(per, 4)
    assert _ids(findings) == [("ENV_VERSION_MISMATCH", [2])]
    assert findings[0].evidence["ranks_by_value"] == {"2.13.0": "0-1,3", "2.12.1": "2"}


def test_known_upstream_bug_warns_on_the_ranks_running_the_affected_version():
    per = {r: _env() for r in range(3)}
    per[1] = _env(versions={**per[1]["versions"], "nccl": "2.18.5"})
    checks, findings = env.analyze(per, 3)
    bugs = [f for f in findings if f.id == "KNOWN_UPSTREAM_BUG"]
    assert [(f.ranks, f.severity, f.evidence["bug"]) for f in bugs] == \
        [([1], "warning", "nccl-2.18.5-cuda-invalid-argument")]
    assert bugs[0].evidence["upstream"] == "https://github.com/NVIDIA/nccl/issues/1024"
    assert next(c for c in checks if c.name == "known bugs").summary.startswith("1 known")


def test_env_var_differing_on_one_rank():
    per = {r: _env() for r in range(2)}
    per[1] = _env(env={**per[1]["env"], "NCCL_DEBUG": "INFO"})
    _, findings = env.analyze(per, 2)
    assert _ids(findings) == [("ENV_VAR_MISMATCH", [1])]
    assert findings[0].evidence["variable"] == "NCCL_DEBUG"


def test_env_var_per_rank_variables_are_not_mismatches():
    per = {r: _env(env={"CUDA_VISIBLE_DEVICES": str(r)}) for r in range(2)}
    assert env.analyze(per, 2)[1] == []


@pytest.mark.parametrize("var,value,bad", [
    ("GLOO_SOCKET_IFNAME", "bogus0", True),
    ("GLOO_SOCKET_IFNAME", "eth", True),       # gloo wants exact names
    ("GLOO_SOCKET_IFNAME", "eth0", False),
    ("NCCL_SOCKET_IFNAME", "eth", False),      # NCCL: a prefix
    ("NCCL_SOCKET_IFNAME", "=eth", True),      # '=': exact
    ("NCCL_SOCKET_IFNAME", "^docker,lo", False),  # '^': exclusion, never missing
    ("NCCL_SOCKET_IFNAME", "ib,enp", False),   # one of the prefixes matches
])
def test_socket_ifname_semantics(var, value, bad):
    per = {0: _env(env={var: value}), 1: _env(env={var: value})}
    _, findings = env.analyze(per, 2)
    got = [f for f in findings if f.id == "ENV_NCCL_CONFIG"]
    assert bool(got) == bad
    if bad:
        assert got[0].ranks == [0, 1] and got[0].evidence["variable"] == var


def test_shm_and_limits():
    per = {0: _env(), 1: _env(shm={"total": 64 << 20, "free": 60 << 20},
                              ulimit={"nofile": [1024, 4096], "memlock": [65536, 65536]},
                              torch_threads=8)}
    _, findings = env.analyze(per, 2, opts={"backend": "nccl"})
    assert _ids(findings) == [("ENV_SHM_TOO_SMALL", [1]), ("ENV_LIMITS", [1])]
    problems = findings[1].evidence["problems_by_rank"][1]
    assert any("open files" in p for p in problems)
    assert any("locked memory" in p for p in problems)
    assert any("32 threads on 16 CPUs" in p for p in problems)


def test_hypercube_gives_every_rank_log_n_partners_intra_node_first():
    for n in range(2, 40):
        rounds = hypercube(n)
        assert len(rounds) == math.ceil(math.log2(n))
        partners: dict[int, set[int]] = {r: set() for r in range(n)}
        for r in rounds:
            assert all(r[r[a]] == a for a in r)  # symmetric: a pair meets in one round
            for a, b in r.items():
                partners[a].add(b)
        assert all(partners[r] for r in range(n))  # nobody sits out every round
        if n & (n - 1) == 0:
            assert all(len(p) == len(rounds) for p in partners.values())
    # 8 ranks per node, numbered node by node: 3 rounds inside a node, then across nodes.
    rounds = hypercube(64)
    for k, r in enumerate(rounds):
        same_node = {a // 8 == b // 8 for a, b in r.items()}
        assert same_node == ({True} if k < 3 else {False})
    assert len(hypercube(512)) == 9 and len(hypercube(4096)) == 12


def _conn(p2p, ok=True):
    return {"allreduce_ok": ok, "allreduce_expected": 10.0, "allreduce_got": 10.0 if ok else 7.0,
            "allreduce_ms": 1.0, "p2p": p2p}


def test_connectivity_names_the_failing_pair():
    per = {0: _conn({"1": {"ok": True}, "2": {"ok": True}, "3": {"ok": True}}),
           1: _conn({"0": {"ok": True}, "2": {"ok": True}, "3": {"ok": False, "error": "t/o"}}),
           2: _conn({"0": {"ok": True}, "1": {"ok": True}, "3": {"ok": True}}),
           3: _conn({"0": {"ok": True}, "1": {"ok": False, "error": "t/o"}, "2": {"ok": True}})}
    check, findings = connectivity.analyze(per, 4)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [1, 3])]
    assert "3/4 rank pairs ok in 2 round(s)" in check.summary


def test_connectivity_names_a_rank_that_fails_with_everyone():
    # Hypercube on 4 ranks: 0-1 and 2-3, then 0-2 and 1-3. Rank 3 fails with both partners.
    bad = {"ok": False, "error": "Connection refused"}
    per = {0: _conn({"1": {"ok": True}, "2": {"ok": True}}),
           1: _conn({"0": {"ok": True}, "3": bad}),
           2: _conn({"3": bad, "0": {"ok": True}}), 3: _conn({"2": bad, "1": bad})}
    _, findings = connectivity.analyze(per, 4)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [3])]


def test_connectivity_one_partner_is_not_enough_to_blame_a_rank():
    # 3 ranks: rank 2 meets only rank 0; a failure there is the pair, not rank 2.
    bad = {"ok": False, "error": "Connection refused"}
    per = {0: _conn({"1": {"ok": True}, "2": bad}), 1: _conn({"0": {"ok": True}}),
           2: _conn({"0": bad})}
    _, findings = connectivity.analyze(per, 3)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [0, 2])]


def test_connectivity_allreduce_that_never_finishes():
    per = {0: {**_conn({}, ok=False), "allreduce_error": "RuntimeError: Timed out"},
           1: _conn({})}
    check, findings = connectivity.analyze(per, 2)
    assert _ids(findings) == [("COMM_CONNECTIVITY", [0])]
    assert findings[0].title == "world all-reduce did not finish"
    assert "unfinished on rank 0" in check.summary


def test_connectivity_blames_no_link_for_ranks_that_never_ran_it():
    # Ranks 1-3 never got past init: rank 0 alone ran the probe and timed out on them.
    lone = {**_conn({"1": {"ok": False, "error": "Timed out"},
                     "2": {"ok": False, "error": "pair closure"}}, ok=False),
            "allreduce_error": "RuntimeError: Operation timed out!"}
    check, findings = connectivity.analyze({0: lone}, 4)
    assert findings == []
    assert "unfinished on rank 0" in check.summary


def test_connectivity_wrong_allreduce_result():
    per = {0: _conn({}), 1: _conn({}, ok=False)}
    assert _ids(connectivity.analyze(per, 2)[1]) == [("COMM_CONNECTIVITY", [1])]


def test_busbw_formulas_match_nccl_tests():
    # 1 GB in 1 s on 8 ranks: algbw 1 GB/s
    assert busbw_gbps("all_reduce", 10**9, 1.0, 8) == pytest.approx(1.75)
    assert busbw_gbps("all_gather", 10**9, 1.0, 8) == pytest.approx(0.875)
    assert busbw_gbps("reduce_scatter", 10**9, 1.0, 8) == pytest.approx(0.875)
    assert busbw_gbps("broadcast", 10**9, 1.0, 8) == pytest.approx(1.0)


def _bw(host, links_in, ar_s=0.01):
    return {"host": host, "world_size": 2,
            "sweep": [{"collective": "all_reduce", "size": 16 << 20, "median_s": ar_s,
                       "times_s": [ar_s]}],
            "links_in": links_in}


def test_bandwidth_table_uses_the_slowest_rank():
    per = {0: _bw("a", {"1": 1.0}, ar_s=0.010), 1: _bw("a", {"0": 1.0}, ar_s=0.020)}
    check, findings = bandwidth.analyze(per, 2)
    row = check.data["table"][0]
    assert row["time_us"] == pytest.approx(20000.0)
    assert row["busbw_gbps"] == pytest.approx(busbw_gbps("all_reduce", 16 << 20, 0.02, 2),
                                              rel=1e-3)
    assert findings == []


def test_bandwidth_at_one_rank_is_skipped_not_a_number():
    # an H200's one-rank NCCL all_reduce "moved" 256 MiB in 27.8 us (docs/gpu-verified.md)
    check, findings = bandwidth.analyze({0: _bw("a", {}, ar_s=27.8e-6)}, 1)
    assert (check.status, findings) == ("skipped", [])
    assert check.summary.startswith("skipped: one rank: no link to measure")


def test_bandwidth_names_the_node_with_a_slow_egress():
    # node b's egress is throttled: links b->a are slow, a->b are fine
    per = {0: _bw("a", {"2": 0.01, "3": 0.012, "1": 2.0}), 1: _bw("a", {"2": 0.011, "3": 0.01,
                                                                      "0": 2.1}),
           2: _bw("b", {"0": 1.2, "1": 1.1, "3": 2.0}), 3: _bw("b", {"0": 1.3, "1": 1.2,
                                                                    "2": 2.2})}
    _, findings = bandwidth.analyze(per, 4)
    assert _ids(findings) == [("COMM_BANDWIDTH_LOW", [2, 3])]
    assert findings[0].evidence["node"] == "b"
    assert findings[0].evidence["direction"] == "egress"


def test_bandwidth_two_nodes_one_rank_each():
    per = {0: _bw("a", {"1": 0.012}), 1: _bw("b", {"0": 0.9})}
    _, findings = bandwidth.analyze(per, 2)
    assert _ids(findings) == [("COMM_BANDWIDTH_LOW", [1])]
    assert findings[0].evidence["node"] == "b"


def test_bandwidth_slow_rank_on_one_node():
    fast, slow = 2.0, 0.1
    per = {r: _bw("a", {str(p): (slow if 2 in (r, p) else fast) for p in range(4) if p != r})
           for r in range(4)}
    _, findings = bandwidth.analyze(per, 4)
    assert _ids(findings) == [("COMM_SLOW_RANK", [2])]


def test_bandwidth_below_expectation():
    per = {0: _bw("a", {"1": 1.0}, ar_s=0.1), 1: _bw("a", {"0": 1.0}, ar_s=0.1)}
    _, findings = bandwidth.analyze(per, 2, opts={"expect_busbw": 10.0})
    assert _ids(findings) == [("COMM_BANDWIDTH_LOW", [])]


def test_dataloader_shm_failure_and_other_failure():
    ok = {"ok": True, "workers": 2, "batch_bytes": 1 << 25, "batches": 4, "seconds": 1.0,
          "timeout_s": 10}
    shm = dict(ok, ok=False, error="RuntimeError: Caught RuntimeError in DataLoader worker "
               "process 0.", error_text="RuntimeError: unable to allocate shared memory(shm) "
               "for file </torch_1_2_3>: No space left on device (28)", cause=None)
    killed = dict(ok, ok=False, error="RuntimeError: DataLoader worker (pid(s) 42) exited "
                  "unexpectedly", error_text="", cause="RuntimeError: DataLoader worker (pid 42)"
                  " is killed by signal: Killed.")
    _, findings = dataloader.analyze({0: ok, 1: shm, 2: killed}, 3)
    assert _ids(findings) == [("ENV_SHM_TOO_SMALL", [1]), ("DATALOADER_WORKER_FAILURE", [2])]
    assert "No space left on device" in findings[0].evidence["detail"]


def test_rendezvous_findings():
    busy = {"master_addr": "127.0.0.1", "master_port": 29500, "resolved": "127.0.0.1",
            "local": True, "port_free": False, "bind_error": "[Errno 98] Address already in use",
            "owner": {"pid": 77}}
    assert _ids(rendezvous.analyze({0: busy}, 2)[1]) == [("ENV_PORT_IN_USE", [])]
    unresolved = {"master_addr": "nope", "master_port": 1, "resolve_error": "Name not known"}
    assert _ids(rendezvous.analyze({0: unresolved}, 2)[1]) == [
        ("ENV_RENDEZVOUS_UNREACHABLE", [])]
    remote_down = {"master_addr": "10.9.9.9", "master_port": 1, "resolved": "10.9.9.9",
                   "local": False, "reachable": False, "connect_error": "timed out after 3 s"}
    assert _ids(rendezvous.analyze({0: remote_down}, 2)[1]) == [
        ("ENV_RENDEZVOUS_UNREACHABLE", [])]
    remote_ok = dict(remote_down, reachable=True, listening=False)
    assert rendezvous.analyze({0: remote_ok}, 2)[1] == []


def test_bandwidth_between_nodes_below_the_nic_line_rate():
    nic = {"name": "eth0", "speed_mbps": 100000}  # 12.5 GB/s line rate
    per = {0: dict(_bw("a", {"1": 1.0}), nic=nic), 1: dict(_bw("b", {"0": 1.1}), nic=nic)}
    assert bandwidth.analyze(per, 2, opts={"backend": "nccl"})[1] == []  # IB carries NCCL
    _, findings = bandwidth.analyze(per, 2)
    assert _ids(findings) == [("COMM_BANDWIDTH_LOW", [0, 1])]
    assert findings[0].evidence["links"]["0->1"]["line_rate_gbps"] == 12.5
    # at line rate, or with unknown speeds (virtual NICs), nothing to say
    fast = {0: dict(_bw("a", {"1": 2.0}), nic=nic), 1: dict(_bw("b", {"0": 2.5}), nic=nic)}
    assert bandwidth.analyze(fast, 2)[1] == []
    unknown = {0: _bw("a", {"1": 1.0}), 1: _bw("b", {"0": 1.1})}
    assert bandwidth.analyze(unknown, 2)[1] == []


def _stuck(rank, step, progress, state="sleeping", stopped=()):
    from ddpdoctor.check.launcher import STATUS_TIMEOUT, RankOutcome

    return RankOutcome(rank=rank, status=STATUS_TIMEOUT, pid=1000 + rank, progress=progress,
                       last_step=step, process_state=state, stopped_children=list(stopped))


@pytest.mark.parametrize("step,finding", [
    ("bandwidth", "COMM_CONNECTIVITY"), ("bandwidth: link round 1 with rank 0",
                                         "COMM_CONNECTIVITY"),
    ("connectivity: p2p round 0 with rank 1", "COMM_CONNECTIVITY"),
    ("init_process_group", "COMM_CONNECTIVITY"), ("dataloader", "DATALOADER_WORKER_FAILURE"),
    ("env", "RANK_UNRESPONSIVE"), ("gpu", "RANK_UNRESPONSIVE"), ("", "RANK_UNRESPONSIVE"),
])
def test_a_deadline_overrun_is_named_by_the_step_it_hit(step, finding):
    from ddpdoctor.check.analysis.launch import analyze_launch
    from ddpdoctor.check.launcher import LaunchResult
    from ddpdoctor.check.run import PROBES

    # both ranks in the same step; rank 1's process is stopped: it is the culprit
    result = LaunchResult(2, "gloo", 30.0, 30.1, [_stuck(0, step, 4),
                                                  _stuck(1, step, 4, state="stopped")])
    stall = {n: p.stall_finding for n, p in PROBES.items()}
    findings = analyze_launch(result, stall)
    assert [(f.id, f.ranks) for f in findings] == [(finding, [1])]
    assert findings[0].evidence["process_state"] == {0: "sleeping", 1: "stopped"}
    assert findings[0].severity == "error"


def test_a_stopped_child_makes_its_rank_the_culprit():
    from ddpdoctor.check.analysis.launch import analyze_launch
    from ddpdoctor.check.launcher import LaunchResult

    result = LaunchResult(2, "gloo", 30.0, 30.1, [_stuck(0, "dataloader", 5),
                                                  _stuck(1, "dataloader", 5, stopped=[4242])])
    [f] = analyze_launch(result, {"dataloader": "DATALOADER_WORKER_FAILURE"})
    assert (f.id, f.ranks) == ("DATALOADER_WORKER_FAILURE", [1])
    assert f.evidence["stopped_children"] == {1: [4242]}
    assert f.evidence["also_unfinished"] == [0]  # not waiting for rank 1: just not done


def test_a_rank_that_raised_is_never_healthy():
    from ddpdoctor.check.launcher import STATUS_ERROR, STATUS_OK, LaunchResult, RankOutcome
    from ddpdoctor.check.run import assemble_report

    outcomes = [RankOutcome(0, STATUS_OK, value={}),
                RankOutcome(1, STATUS_ERROR, error="RuntimeError: boom", last_step="gpu")]
    report = assemble_report(LaunchResult(2, "gloo", 30.0, 1.0, outcomes), ["gpu"], {})
    assert [(f.id, f.ranks) for f in report.findings] == [("RANK_CRASHED", [1])]
    assert report.exit_code == 1


def test_a_rank_that_raised_while_another_is_stuck_is_the_culprit_not_a_crash():
    """Rank 0's probe raised; rank 1 sat in the collective until the deadline. The
    analysis used to look the raised rank up among the stuck ones (KeyError, no report)."""
    from ddpdoctor.check.launcher import STATUS_ERROR, LaunchResult, RankOutcome
    from ddpdoctor.check.run import assemble_report

    outcomes = [RankOutcome(0, STATUS_ERROR, error="RuntimeError: boom", last_step="bandwidth"),
                _stuck(1, "bandwidth", 6)]
    report = assemble_report(LaunchResult(2, "gloo", 30.0, 30.1, outcomes), ["bandwidth"], {})
    assert [(f.id, f.ranks) for f in report.findings] == [("RANK_CRASHED", [0])]
    assert report.exit_code == 1
