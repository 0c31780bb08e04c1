"""The job view without processes: endpoints, the leader's pure decisions, the merge of
every node's stacks into one verdict, the report, and the protocol over a real TCPStore."""

from __future__ import annotations

import time

import pytest

from ddpdoctor.attach.classify import RankState
from ddpdoctor.attach.stacks import Frame
from ddpdoctor.jobview import keys
from ddpdoctor.jobview.leader import Policy, ProgressClock, root_cause, should_look, threshold
from ddpdoctor.jobview.merge import decide, state_of, state_to_dict
from ddpdoctor.jobview.report import crash_finding, hang_findings
from ddpdoctor.jobview.snapshot import (
    Failure,
    NodeSnap,
    RankSnap,
    Request,
    StackReply,
    Verdict,
)
from ddpdoctor.run.jobnode import STARTUP_EVENTS, NodeEnd, StepTimes

TORCHRUN = ["python", "-m", "torch.distributed.run"]


# ---- endpoints and keys

@pytest.mark.parametrize("args,want", [
    (["--nnodes", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "head:29401", "t.py"],
     ("head", 29401, "--rdzv-endpoint")),
    (["--rdzv_endpoint=head", "--nnodes=4", "-m", "pkg"], ("head", 29400, "--rdzv-endpoint")),
    (["--nnodes", "2", "--master-addr", "10.0.0.1", "--master-port", "1234", "t.py"],
     ("10.0.0.1", 1234, "--master-addr/--master-port")),
    (["--standalone", "t.py", "--rdzv-endpoint", "x:1"], None),  # the script's own flag
    (["--nproc-per-node", "2", "--master-addr", "h", "t.py"], None),  # one node
    (["--nnodes", "2", "--rdzv-backend", "etcd", "--rdzv-endpoint", "e:2379", "t.py"], None),
])
def test_endpoint_from_the_launch_command(args, want):
    got = keys.endpoint_from_command(TORCHRUN + args)
    assert (None if got is None else (got.host, got.port, got.source)) == want


def test_no_launcher_no_endpoint_and_bad_endpoints_are_refused():
    assert keys.endpoint_from_command(["python", "train.py", "--rdzv-endpoint", "h:1"]) is None
    for bad in ("", "h:0", "h:x", ":12", "h:70000"):
        with pytest.raises(ValueError):
            keys.parse_endpoint(bad)
    assert str(keys.parse_endpoint("[::1]:5")) == "::1:5"


def test_every_key_lives_under_the_prefix_torchrun_never_uses():
    made = [keys.NODE_COUNT, keys.REQUEST, keys.ATTACH_REQUEST, keys.VERDICT,
            keys.FAIL_COUNT, keys.JOB, keys.ATTACH_COUNT, keys.node_key(3),
            keys.reply_key("h1", 2), keys.failure_key(0)]
    assert all(k.startswith(keys.PREFIX) for k in made)
    assert len(set(made)) == len(made)
    for theirs in ("torch.rendezvous.", "torchelastic/", "default_pg/", "0"):
        assert not keys.PREFIX.startswith(theirs)


# ---- the leader's decisions

def test_threshold_fixed_warmup_and_adaptive():
    assert threshold([1.0] * 50, Policy(fixed_s=42.0))[0] == 42.0
    assert threshold([1.0] * 3, Policy())[0] == 300.0  # too few steps seen
    assert threshold([1.0] * 100, Policy())[0] == 10.0  # 5 x 1 s < the floor
    limit, how = threshold([4.0] * 99 + [9.0], Policy(hang_min_s=10))
    assert limit == 45.0 and "p99" in how


def _snap(node, beat, progress, ended=False, steps=()):
    return NodeSnap(node, f"node-{node}", beat, progress, step_times=tuple(steps),
                    ranks=(RankSnap(2 * node, 100 + node),), ended=ended)


def test_clock_quiet_and_lost_nodes_on_the_leaders_clock():
    clock = ProgressClock(0.0)
    clock.observe([_snap(0, 1, 1, steps=[1.0] * 10), _snap(1, 1, 1)], 0.0)
    clock.observe([_snap(0, 2, 2, steps=[1.0] * 10), _snap(1, 2, 1)], 5.0)
    assert clock.stalled_for(8.0) == 3.0  # node 0 moved at 5 s
    clock.observe([_snap(0, 3, 2, steps=[1.0] * 10), _snap(1, 2, 1)], 20.0)
    assert [s.node for s in clock.lost(20.0, 15.0)] == [1]  # beat unchanged since 5 s
    assert [s.node for s in clock.live(20.0, 15.0)] == [0]
    d = should_look(clock, 20.0, Policy(), busy=False)
    assert d.look and d.threshold_s == 10.0 and d.stalled_s == 15.0
    assert not should_look(clock, 20.0, Policy(), busy=True).look
    assert not should_look(clock, 14.0, Policy(), busy=False).look


def test_a_node_that_said_its_job_ended_is_not_lost():
    clock = ProgressClock(0.0)
    clock.observe([_snap(0, 1, 1, ended=True)], 0.0)
    assert clock.lost(100.0, 15.0) == []


def _failure(node, rank, fallout, at, fid="RANK_CRASHED"):
    return Failure(node, f"node-{node}", rank, 10 + rank, fid, f"rank {rank} failed", fallout,
                   at)


def test_root_cause_is_the_first_failure_that_is_not_fallout():
    reset = _failure(0, 0, True, 1.0)
    crash = _failure(1, 3, False, 2.0)
    assert root_cause([reset, crash]) == crash
    assert root_cause([reset]) == reset
    assert root_cause([]) is None
    assert root_cause([_failure(1, 3, False, 5.0), _failure(0, 1, False, 4.0)]).rank == 1


def test_step_times_skip_startup_and_cpu_samples():
    class T:
        last_progress = 0.0
        last_what = "output"
        step = 0

    steps, t = StepTimes(), T()
    for i in range(1, 8):
        t.last_progress = float(i)
        t.last_what = "output" if i != 6 else "CPU time of rank 0 (50% of a core)"
        steps.observe(t)
    assert steps.progress == 7
    assert steps.times == [1.0, 1.0, 2.0]  # after 3 startup events; 6 was CPU: 7 - 5


def _paced(steps: StepTimes, intervals: list[float], looked: set[int]) -> None:
    """Heartbeat events ``intervals`` apart; the leader looked (no hang) during those in
    ``looked`` (indices)."""
    class T:
        last_progress = 0.0
        last_what = "heartbeat of rank 0 (step 1)"
        step = 0

    t = T()
    for _ in range(STARTUP_EVENTS + 1):
        t.last_progress += 1.0
        steps.observe(t)
    for i, dt in enumerate(intervals):
        if i in looked:
            steps.looked()
        t.last_progress += dt
        steps.observe(t)


def test_a_long_evaluation_that_was_looked_at_does_not_raise_the_threshold():
    policy = Policy(hang_min_s=10)
    steps = StepTimes()
    # 30 one-second steps, a 42 s evaluation the leader looked at (no hang), 30 more
    _paced(steps, [1.0] * 30 + [42.0] + [1.0] * 30, looked={30})
    assert threshold(steps.times, policy)[0] == 10.0
    assert max(steps.raw) == 42.0  # still recorded
    # few intervals known (a node whose only events are heartbeats), the steps right after
    # flagged too (the look's py-spy read slowed them): still only the evaluation is dropped
    steps = StepTimes()
    _paced(steps, [1.0] * 7 + [42.0, 1.0, 1.0], looked={7, 8, 9})
    assert threshold(steps.times, policy)[0] == 10.0
    # not looked at (shorter than the threshold then): a step time like any other
    steps = StepTimes()
    _paced(steps, [1.0] * 30 + [42.0] + [1.0] * 30, looked=set())
    assert threshold(steps.times, policy)[0] == 210.0


def test_when_slow_looked_at_steps_are_the_jobs_pace_they_count():
    # the job slowed to 20 s a step: each step was looked at, then they are the pace
    steps = StepTimes()
    _paced(steps, [1.0] * 10 + [20.0] * 10, looked=set(range(10, 20)))
    assert threshold(steps.times, Policy(hang_min_s=10))[0] == 100.0


# ---- records over the wire

def test_records_round_trip_and_malformed_input_is_a_value_error():
    s = _snap(1, 3, 4, steps=[0.5])
    assert NodeSnap.from_json(s.to_json()) == s
    f = _failure(1, 3, False, 2.0)
    assert Failure.from_json(f.to_json()) == f
    r = Request("h1", "quiet", 2.5, observe_only=True)
    assert Request.from_json(r.to_json()) == r
    for bad in ("", "[]", "{}", '{"node": "x"}', b"\xff"):
        for cls in (NodeSnap, Failure, Request, StackReply, Verdict):
            with pytest.raises(ValueError):
                cls.from_json(bad)


# ---- the merge: stacks from every node, one verdict

def _frames(*names):
    return tuple(Frame(n, f"/job/{f}", line) for n, f, line in names)


def _waiting(rank, pid):
    fr = _frames(("all_reduce", "torch/distributed/distributed_c10d.py", 2800),
                 ("main", "train.py", 56))
    return RankState(rank, pid, "collective", "all_reduce", fr[1], "", "MainThread", fr)


def _sleeping(rank, pid):
    fr = _frames(("_stuck_forever", "train.py", 23), ("main", "train.py", 48))
    return RankState(rank, pid, "sleeping", "", fr[0], "sleeping", "MainThread", fr)


def _replies(busy=(), moved=False, **more):
    a = StackReply(0, "node-a", tuple(state_to_dict(s) for s in (_waiting(0, 10),
                                                                 _waiting(1, 11))))
    b = StackReply(1, "node-b", tuple(state_to_dict(s) for s in (_waiting(2, 20),
                                                                 _sleeping(3, 21))),
                   busy=tuple(busy), moved=moved, **more)
    return [a, b]


def test_state_survives_the_wire():
    s = _sleeping(3, 21)
    assert state_of(state_to_dict(s)) == s


def test_merged_stacks_name_the_culprit_on_the_other_node():
    v = decide("h1", _replies(), [], moved=False)
    assert v.confirmed, v.reason
    [c] = v.culprits
    assert (c.rank, c.host, c.pid, c.where) == (3, "node-b", 21, "train.py:23 in _stuck_forever")
    assert v.findings[0]["id"] == "HANG_RANK_MISSING_COLLECTIVE"
    assert v.findings[0]["ranks"] == [3]
    assert set(v.nodes) == {"node-a", "node-b"}
    assert any("node-a, node-b" in g for g in v.groups)


def test_one_node_alone_sees_no_culprit():
    v = decide("h1", _replies()[:1], ["node-b (node 1)"], moved=False)
    assert not v.confirmed and v.culprits == ()


def test_a_culprit_still_working_or_a_job_that_moved_is_not_a_hang():
    busy = decide("h1", _replies(busy=[3]), [], moved=False)
    assert not busy.confirmed and "still working" in busy.reason
    moved = decide("h1", _replies(moved=True), [], moved=False)
    assert not moved.confirmed and "progress" in moved.reason
    assert not decide("h1", _replies(), [], moved=True).confirmed


def test_a_culprit_its_node_could_not_measure_is_not_a_confirmed_hang():
    """Its CPU could not be read before and after the recheck: not known to be idle."""
    replies = [StackReply.from_json(r.to_json()) for r in _replies(unmeasured=(3,))]
    v = decide("h1", replies, [], moved=False)
    assert not v.confirmed and "rank(s) 3 could not be measured" in v.reason, v.reason


def test_the_verdict_says_what_the_node_saw_its_culprit_do():
    idle = ("rank 3 used 0.00 s of CPU in 3.0 s",)
    v = decide("h1", _replies(rechecked=idle), [], moved=False)
    assert v.confirmed and v.reason.endswith("(rank 3 used 0.00 s of CPU in 3.0 s)"), v.reason
    working = ("rank 3 used 2.91 s of CPU in 3.0 s (11 of its 11 stacks found it inside a "
               "native call with the GIL released (a torch op, a kernel): native work, not a "
               "Python spin)",)
    v = decide("h1", _replies(busy=[3], rechecked=working), [], moved=False)
    assert not v.confirmed and "2.91 s of CPU" in v.reason and v.working == (3,), v.reason
    assert Verdict.from_json(v.to_json()).working == (3,)


def test_a_rank_in_a_debugger_on_another_node_is_not_a_hang():
    """A person stepping through rank 3 under gdb/pdb on node b (tracing stop): its node
    says so, and the leader must not stop the job (hang/verdict.py's rule, job-wide)."""
    a, b = _replies()
    stopped = RankState(3, 21, "stopped", "", None, "stopped", "MainThread", ())
    b = StackReply(1, "node-b", (state_to_dict(_waiting(2, 20)), state_to_dict(stopped)))
    sigstop = decide("h1", [a, b], [], moved=False)
    assert sigstop.confirmed and [c.rank for c in sigstop.culprits] == [3]
    traced = StackReply.from_json(StackReply(1, "node-b", b.states, traced=(21,)).to_json())
    v = decide("h1", [a, traced], [], moved=False)
    assert not v.confirmed and "debugger" in v.reason, v.reason


def test_no_stacks_from_any_node_is_not_a_hang():
    v = decide("h1", [StackReply(0, "node-a", (), error="py-spy not found")], [], False)
    assert not v.confirmed and "py-spy not found" in v.reason


# ---- the report

def test_hang_findings_name_rank_host_pid_and_line():
    [f] = hang_findings(decide("h1", _replies(), [], moved=False))
    assert f.ranks == [3] and "rank 3 on node-b (pid 21, train.py:23 in _stuck_forever)" \
        in f.title
    assert f.evidence["culprits"][0]["host"] == "node-b"


def _end(index, own, failures):
    return NodeEnd("h:1", index == 0, index, "", {0: "node-0", 1: "node-1"}, failures, own,
                   None, [])


def test_a_crash_on_another_node_leads_and_ours_is_its_fallout():
    ours = _failure(0, 0, True, 1.0)
    theirs = _failure(1, 3, False, 1.5)
    f = crash_finding(_end(0, ours, [ours, theirs]))
    assert f is not None and f.ranks == [3] and f.evidence["host"] == "node-1"
    assert "fallout" in f.title
    assert crash_finding(_end(1, theirs, [ours, theirs])) is None  # ours is the cause


# ---- the protocol over a real TCPStore (in-process server)

def test_leader_and_member_over_a_real_store():
    from torch.distributed import TCPStore

    from ddpdoctor.jobview.agent import JobView
    from ddpdoctor.jobview.store import JobStore

    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    ep = keys.Endpoint("127.0.0.1", server.port, "test")
    policy = Policy(fixed_s=1.0, node_timeout_s=30)

    def view(host, leader):
        client = TCPStore("127.0.0.1", server.port, is_master=False, wait_for_workers=False)
        return JobView(ep, host, leader, policy, reply_timeout_s=5, interval=0.05,
                       store=JobStore.wrap(client, ep)).start()

    lead, member = view("node-a", True), view("node-b", False)
    # per rank, from the watch's heartbeats: rank 3 stopped a step before the others
    lead.update(0, "", [], (RankSnap(0, 10, 41), RankSnap(1, 11, 41)))
    member.update(0, "", [], (RankSnap(2, 20, 41), RankSnap(3, 21, 40, "forward")))
    try:
        got: dict[str, Request] = {}
        t_end = time.monotonic() + 20
        while len(got) < 2 and time.monotonic() < t_end:
            for v in (lead, member):
                req = v.take_request()
                if req is not None:
                    got[v.host] = req
                    r = _replies()[0 if v.host == "node-a" else 1]
                    v.put_reply(req.id, r)
            time.sleep(0.05)
        assert len(got) == 2 and got["node-a"].id == got["node-b"].id
        verdicts = {}
        while len(verdicts) < 2 and time.monotonic() < t_end:
            for v in (lead, member):
                x = v.take_verdict()
                if x is not None:
                    verdicts[v.host] = x
            time.sleep(0.05)
        assert verdicts["node-a"] == verdicts["node-b"] and verdicts["node-a"].confirmed
        assert verdicts["node-b"].culprits[0].host == "node-b"
        assert verdicts["node-b"].culprits[0].step == 40
        assert dict(verdicts["node-a"].steps) == {0: 41, 1: 41, 2: 41, 3: 40}
        [f] = hang_findings(verdicts["node-a"])
        assert f.evidence["job_view"]["ranks_by_last_step"] == {"41": [0, 1, 2], "40": [3]}
        assert "rank 3 on node-b (pid 21, train.py:23 in _stuck_forever, after step 40)" \
            in f.title
        member.report_failure(_failure(-1, 3, False, time.time()))
        while not lead.failures() and time.monotonic() < t_end:
            time.sleep(0.05)
        assert lead.failures()[0].node == member.index
    finally:
        lead.stop()
        member.stop()


def test_a_store_that_never_answers_is_a_lost_view_within_the_deadline(monkeypatch):
    from ddpdoctor.jobview import agent
    from ddpdoctor.jobview.agent import JobView

    monkeypatch.setattr(agent, "STORE_TIMEOUT_S", 1.0)  # the deadline, not its length
    v = JobView(keys.Endpoint("127.0.0.1", 9, "test"), "node-x", False, Policy(),
                connect_wait_s=0.5).start()
    v._thread.join(15)
    assert not v._thread.is_alive() and "cannot reach the job's store" in v.lost


@pytest.mark.parametrize("on_host", [(False, False, False), (True, True, False),
                                     (False, True, False)])
def test_exactly_one_node_leads(monkeypatch, on_host):
    """No node on the store's host (a service name): the first to claim after the grace
    leads. Two on it (two runs on one machine, an endpoint every node resolves locally),
    or one that started after another claimed: still one leader."""
    from torch.distributed import TCPStore

    from ddpdoctor.jobview import agent
    from ddpdoctor.jobview.store import JobStore

    monkeypatch.setattr(agent, "LEADER_GRACE_S", 0.2)
    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    ep = keys.Endpoint("127.0.0.1", server.port, "test")
    views = [agent.JobView(ep, f"node-{i}", local, Policy(), interval=0.05, store=JobStore.wrap(
        TCPStore("127.0.0.1", server.port, is_master=False, wait_for_workers=False), ep)
    ).start() for i, local in enumerate(on_host)]
    try:
        t_end = time.monotonic() + 10
        while not all(v._claimed for v in views) and time.monotonic() < t_end:
            time.sleep(0.05)
        assert sum(v.leader for v in views) == 1
    finally:
        for v in views:
            v.stop()


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("argv", [["attach", "--help"], ["attach", "2147483000"],
                                  ["run", "--help"]])
def test_attach_and_run_without_a_job_view_do_not_import_torch(argv):
    import subprocess
    import sys

    code = ("import sys\nfrom ddpdoctor.cli import main\n"
            "import ddpdoctor.run.runner, ddpdoctor.jobview.agent\n"
            f"try:\n    main({argv!r}, standalone_mode=False)\nexcept BaseException:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr


def test_a_rank_that_finished_cleanly_is_no_failure_but_a_raised_error_is(tmp_path):
    from ddpdoctor.run.jobnode import local_failure
    from ddpdoctor.run.progress import RankExit

    class Copy:
        combined_path = tmp_path / "output.log"

    class Job:
        copy = Copy()

    class Tracker:
        exits = [RankExit(1, 4242, 1.0)]

    Copy.combined_path.write_text("[rank0]: step 5 done\n")
    assert local_failure(Job(), Tracker(), None) is None
    # as torchrun 2.13 printed it for tests/lib/jobview_job.py --crash 1:40 (rank renumbered)
    Copy.combined_path.write_text(
        "[rank1]: Traceback (most recent call last):\n"
        '[rank1]:   File "/work/tests/jobview_job.py", line 64, in <module>\n'
        "[rank1]:     sys.exit(main())\n"
        "[rank1]:              ^^^^^^\n"
        '[rank1]:   File "/work/tests/jobview_job.py", line 51, in main\n'
        '[rank1]:     raise RuntimeError(f"planted crash on rank {rank} at step {step}")\n'
        "[rank1]: RuntimeError: planted crash on rank 1 at step 40\n")
    f = local_failure(Job(), Tracker(), None)
    assert f is not None and f.rank == 1 and f.pid == 4242 and not f.fallout
    assert f.finding_id == "RANK_CRASHED" and "planted crash" in f.title


# ---- Flight Recorder across nodes


def _recorded_fr(name: str, ranks: range) -> dict:
    from attach_helpers import recorded_fr_path

    from ddpdoctor.attach.flight_recorder import parse_fr_trace

    out = {}
    for r in ranks:
        with open(recorded_fr_path(name, r), "rb") as fh:
            out[r] = parse_fr_trace(fh.read(), r)
    return out


def _node_reply(node: int, host: str, ranks: list[int], traces: dict) -> StackReply:
    from ddpdoctor.attach.flight_recorder import trace_to_dict

    # every stack alike (all parked in the same all_reduce): only the dumps tell who is behind
    states = tuple(state_to_dict(RankState(r, 100 + r, "collective", "all_reduce"))
                   for r in ranks)
    reply = StackReply(node, host, states, traces=tuple(trace_to_dict(traces[r])
                                                        for r in ranks if r in traces))
    return StackReply.from_json(reply.to_json())  # as it crosses the store


def test_the_rank_behind_in_flight_recorder_is_named_across_nodes():
    from ddpdoctor.jobview.merge import merge_replies

    # real gloo dumps of a 3-rank hang where rank 1 skipped an all_reduce (tests/fixtures/hangs)
    traces = _recorded_fr("missing-3ranks", range(3))
    replies = [_node_reply(0, "node-a", [0, 2], traces), _node_reply(1, "node-b", [1], traces)]
    diag = merge_replies(replies)
    assert [(f.id, f.ranks) for f in diag.findings] == [("HANG_RANK_MISSING_COLLECTIVE", [1])]
    assert diag.hosts[1] == "node-b"
    (v,) = diag.fr_verdicts
    assert v.behind == {1: 2}
    # the same stacks without the dumps cannot name rank 1
    bare = [StackReply(r.node, r.host, r.states) for r in replies]
    assert [f.ranks for f in merge_replies(bare).findings] != [[1]]


def test_a_malformed_trace_from_a_node_is_dropped():
    from ddpdoctor.jobview.merge import merge_traces

    reply = StackReply(0, "node-a", (), traces=({"rank": "x"}, {"entries": "nope"}))
    assert merge_traces([reply]) == {}


def test_each_ranks_step_phase_and_last_progress_are_published():
    from ddpdoctor.run.jobnode import rank_snaps
    from ddpdoctor.run.progress import Heartbeat, RankExit

    class Tracker:
        exits = [RankExit(1, 11, 5.0)]
        rank_pids = {0: 10, 1: 11}

    beats = {0: Heartbeat(0, 41, 1700.5, 1701.0, "backward"), 2: Heartbeat(2, 40, 1699.0, 1701.0)}
    snaps = {s.rank: s for s in rank_snaps(Tracker(), beats)}
    assert snaps[0] == RankSnap(0, 10, 41, "backward", "running", 1700.5)
    assert snaps[1] == RankSnap(1, 11, -1, "", "exited", 0.0)  # no heartbeat: unknown
    assert snaps[2].step == 40 and snaps[2].pid == 0  # a heartbeat before the sampler saw it
    back = NodeSnap.from_json(NodeSnap(0, "node-a", 1, 1, ranks=tuple(snaps.values())).to_json())
    assert back.ranks == tuple(snaps.values())
