"""The pure logic of ranks no launcher numbered and of restart attempts, with no process.

- ``rankclaim``: the rank in a py-spy ``--locals`` dump (a local ``rank`` beats mp.spawn's
  index; a torch.distributed argument beats a user local; an index alone says so), the
  watch's heartbeat / Flight Recorder files for a pid (a file older than the process is
  not its claim), which processes multiprocessing started;
- ``run.spawn_ranks.name_spawn_culprit``: "-- Process 0 terminated" is mp.spawn's index;
- ``run.attempts``: attempts from TORCHELASTIC_RESTART_COUNT or, without it, from a rank
  seen again under a new pid; torchrun's agent failure lines;
- ``run.attempt_report``: each attempt's lines, what ended it, whether restarting helped.
"""

from __future__ import annotations

import json
import os
import time

from ddpdoctor.core.findings import Finding
from ddpdoctor.core.rankclaim import (
    RankSource,
    claim_from_files,
    claim_from_locals,
    is_mp_child,
)
from ddpdoctor.run.attempt_report import AttemptEnd, ending, slice_lines, stopped, verdict
from ddpdoctor.run.attempts import Attempt, Attempts, RankProc, agent_exits
from ddpdoctor.run.progress import RankExit
from ddpdoctor.run.spawn_ranks import name_spawn_culprit

SPAWN = "/venv/lib/python3.11/site-packages/torch/multiprocessing/spawn.py"
C10D = "/venv/lib/python3.11/site-packages/torch/distributed/distributed_c10d.py"
MP = "/usr/lib/python3.11/multiprocessing/process.py"
USER = "/home/u/train_spawn.py"


def frame(name: str, filename: str, line: int = 1, **locals_: object) -> dict:
    return {"name": name, "filename": filename, "line": line,
            "locals": [{"name": k, "repr": str(v), "arg": True} for k, v in locals_.items()]}


def dump(*frames: dict, pid: int = 7) -> list[dict]:
    return [{"thread_name": "gloo", "os_thread_id": 8, "frames": [frame("run", MP)]},
            {"thread_name": "MainThread", "os_thread_id": pid, "frames": list(frames)}]


# -- rankclaim ------------------------------------------------------------------------------

def test_a_local_rank_beats_the_spawn_index():
    # mp.spawn gave index 0; the function runs rank world - 1 - i = 1
    got = claim_from_locals(dump(frame("backward", USER, 20),
                                 frame("worker", USER, 12, i=0, world=2, rank=1),
                                 frame("_wrap", SPAWN, 87, i=0)))
    assert (got.rank, got.source, got.spawn_index) == (1, RankSource.LOCALS, 0)
    assert "rank=1 in worker" in got.detail


def test_the_outermost_user_rank_wins_over_an_inner_one():
    got = claim_from_locals(dump(frame("send_to", USER, 40, rank=0),
                                 frame("worker", USER, 12, rank=1),
                                 frame("_wrap", SPAWN, 87, i=1)))
    assert got.rank == 1


def test_a_rank_passed_to_torch_distributed_beats_the_user_locals():
    got = claim_from_locals(dump(frame("init_process_group", C10D, 1500, rank=3),
                                 frame("worker", USER, 12, rank=9),
                                 frame("_wrap", SPAWN, 87, i=0)))
    assert (got.rank, got.source) == (3, RankSource.LOCALS)
    # init_process_group(rank=-1) (env://) is no rank
    got = claim_from_locals(dump(frame("init_process_group", C10D, 1500, rank=-1),
                                 frame("worker", USER, 12, rank=2)))
    assert got.rank == 2


def test_only_the_spawn_index_says_it_is_an_index():
    got = claim_from_locals(dump(frame("main", USER, 5, gpu=1, args="Namespace()"),
                                 frame("_wrap", SPAWN, 87, i=1)))
    assert (got.rank, got.source) == (1, RankSource.SPAWN_INDEX)
    assert "index" in got.detail and "may differ" in got.detail


def test_no_rank_in_the_stack_is_no_claim():
    assert claim_from_locals(dump(frame("main", USER, 5, n=3))) is None
    assert claim_from_locals([]) is None
    # a library's `rank` local is not the user's
    lib = "/venv/lib/python3.11/site-packages/foo/bar.py"
    assert claim_from_locals(dump(frame("helper", lib, 5, rank=4))) is None


def _write(path, data, mtime=None):
    path.write_text(json.dumps(data))
    if mtime is not None:
        os.utime(path, (mtime, mtime))


def test_the_watch_heartbeat_names_the_process_groups_rank(tmp_path):
    hb, fr = tmp_path / "hb", tmp_path / "fr"
    hb.mkdir()
    fr.mkdir()
    _write(hb / "rank0.json", {"rank": 0, "pid": 100})
    _write(hb / "rank1.json", {"rank": 1, "pid": 101})
    got = claim_from_files(101, time.time() - 5, str(hb), str(fr))
    assert (got.rank, got.source) == (1, RankSource.PROCESS_GROUP)
    assert "rank1.json" in got.detail
    assert claim_from_files(102, time.time() - 5, str(hb), str(fr)) is None


def test_the_flight_recorder_ready_file_counts_and_a_stale_file_does_not(tmp_path):
    fr = tmp_path / "fr"
    fr.mkdir()
    _write(fr / "ddpdoctor-fr-rank1.ready", {"pid": 55})
    assert claim_from_files(55, time.time() - 5, "", str(fr)).rank == 1
    # written an hour before this process started: another process with a reused pid
    _write(fr / "ddpdoctor-fr-rank1.ready", {"pid": 55}, mtime=time.time() - 3600)
    assert claim_from_files(55, time.time() - 5, "", str(fr)) is None


def test_which_processes_multiprocessing_started():
    py = "/venv/bin/python"
    assert is_mp_child([py, "-B", "-c", "from multiprocessing.spawn import spawn_main; "
                        "spawn_main(tracker_fd=4, pipe_handle=6)", "--multiprocessing-fork"])
    assert is_mp_child([py, "train.py"], [py, "train.py"])  # a fork
    assert not is_mp_child([py, "train.py"], ["bash", "run.sh"])
    assert not is_mp_child([py, "-B", "-c", "from multiprocessing.resource_tracker import "
                            "main;main(3)"], [py, "train.py"])


def test_spawn_culprit_maps_the_process_index_to_the_rank():
    lead = Finding("RANK_CRASHED", "the job raised ProcessRaisedException", ranks=[])
    text = "torch.multiprocessing.spawn.ProcessRaisedException:\n\n-- Process 0 terminated " \
           "with the following error:\nRuntimeError: boom\n"
    name_spawn_culprit([lead], text, {0: 1, 1: 0}, {})
    assert lead.ranks == [1] and "index 0, which is rank 1" in lead.evidence["rank_from"]
    unknown = Finding("RANK_CRASHED", "t", ranks=[])
    name_spawn_culprit([unknown], "process 1 terminated with signal SIGKILL", {}, {})
    assert unknown.ranks == [] and "could not be read" in unknown.evidence["rank_from"]
    named = Finding("OOM", "t", ranks=[3])
    name_spawn_culprit([named], text, {0: 1}, {})
    assert named.ranks == [3]  # a rank the triage named stays
    # ... unless it is the index itself: diagnose reads a one-node log's index as its rank,
    # the job says which rank index 0 ran
    indexed = Finding("RANK_CRASHED", "t", ranks=[0])
    name_spawn_culprit([indexed], text, {0: 1, 1: 0}, {})
    assert indexed.ranks == [1] and "index 0, which is rank 1" in indexed.evidence["rank_from"]
    # mp.spawn's own words beat the order the processes died in (run/exit_watch.py)
    timed = Finding("RANK_CRASHED", "t", ranks=[0],
                    evidence={"rank_from": "exit times: rank 0 (pid 5) died 0.02 s before"})
    name_spawn_culprit([timed], text, {0: 1}, {})
    assert timed.ranks == [1] and "index 0, which is rank 1" in timed.evidence["rank_from"]
    timed.evidence["rank_from"] = "exit times: rank 0 (pid 5) died 0.02 s before"
    name_spawn_culprit([timed], text, {}, {})
    assert timed.evidence["rank_from"].startswith("exit times")


# -- attempts -------------------------------------------------------------------------------

def test_attempts_from_the_restart_count():
    a = Attempts()
    a.observe(1.0, 4, [RankProc(10, 0, 0), RankProc(11, 1, 0)])
    a.observe(2.0, 9, [RankProc(10, 0, 0)])  # rank 1 went away first
    a.observe(3.0, 12, [])
    a.observe(4.0, 15, [RankProc(20, 0, 1), RankProc(21, 1, 1)])
    assert [x.number for x in a.attempts] == [0, 1] and a.restarted
    first, second = a.attempts
    assert first.pids == {0: 10, 1: 11} and second.pids == {0: 20, 1: 21}
    assert [e.rank for e in first.exits] == [1, 0]
    assert (first.first_line, second.first_line) == (4, 15)


def test_attempts_without_the_variable_count_a_rank_seen_again():
    a = Attempts()
    a.observe(1.0, 0, [RankProc(10, 0, None), RankProc(11, 1, None)])
    a.observe(2.0, 5, [])
    a.observe(3.0, 7, [RankProc(20, 0, None)])
    a.observe(4.0, 8, [RankProc(20, 0, None), RankProc(21, 1, None)])
    assert [sorted(x.pids.items()) for x in a.attempts] == [[(0, 10), (1, 11)],
                                                            [(0, 20), (1, 21)]]
    one = Attempts()
    one.observe(1.0, 0, [RankProc(10, 0, None)])
    one.observe(2.0, 0, [RankProc(10, 0, None), RankProc(11, 1, None)])  # a late rank
    assert not one.restarted


def test_agent_exit_lines():
    lines = ["E1126 21:43:35.719000 21590 torch/distributed/elastic/multiprocessing/api.py:1002]"
             " failed (exitcode: 1) local_rank: 1 (pid: 21594) of binary: /venv/bin/python3",
             "failed (exitcode: -9) local_rank: 0 (pid: 7) of binary: python"]
    got = agent_exits(lines)
    assert [(e.exit_code, e.local_rank, e.pid) for e in got] == [(1, 1, 21594), (-9, 0, 7)]


# -- attempt_report -------------------------------------------------------------------------

def _attempt(n: int, first_line: int, pids: dict[int, int]) -> Attempt:
    return Attempt(n, float(n), first_line, dict(pids))


def test_each_attempt_gets_its_lines():
    lines = [f"{i}\n" for i in range(10)]
    parts = slice_lines(lines, [_attempt(0, 2, {}), _attempt(1, 6, {})])
    assert parts == [lines[:6], lines[6:]]  # the launcher's first lines go to attempt 0


def test_what_ended_an_attempt():
    att = _attempt(0, 0, {0: 10, 1: 11})
    att.exits = [RankExit(0, 10, 1.0)]
    crash = Finding("RANK_CRASHED", "rank 1 raised ValueError", ranks=[1])
    agent = ["failed (exitcode: -9) local_rank: 1 (pid: 11) of binary: python"]
    end = ending(att, agent, [crash], last=False, job_rc=1, log="a0.log")
    assert (end.rank, end.exit_code, end.finding, end.how) == (1, -9, "RANK_CRASHED",
                                                               "killed by SIGKILL")
    # no agent line, no rank in the finding: the rank whose process went away first
    bare = ending(att, [], [Finding("UNRECOGNIZED_FAILURE", "t", ranks=[])], last=True,
                  job_rc=1, log="")
    assert (bare.rank, bare.exit_code) == (0, 1)
    assert ending(att, [], [], last=True, job_rc=0, log="").succeeded


def test_whether_restarting_helped():
    fail = AttemptEnd(0, False, 1, 1, "RANK_CRASHED")
    line, status = verdict([fail, AttemptEnd(1, True)])
    assert status == "warning" and "restarting helped" in line and "attempt 1 succeeded" in line
    line, status = verdict([fail, AttemptEnd(1, False, 1, 1, "RANK_CRASHED")])
    assert status == "error" and "every attempt failed the same way" in line
    line, status = verdict([fail, AttemptEnd(1, False, 0, 1, "OOM")])
    assert status == "error" and "ended differently" in line


def test_an_attempt_run_stopped_is_ended_by_its_hang_not_by_run_s_signal():
    """The last attempt hung and run stopped it: its ranks died of run's SIGTERM (the
    agent's 'SignalException: got signal 15' in the log), which is not what ended it."""
    att = _attempt(1, 0, {0: 20, 1: 21})
    hang = Finding("HANG_RANK_MISSING_COLLECTIVE", "rank 0 waits in all_reduce; rank 1 is "
                   "at restart_job.py:31", ranks=[1])
    end = stopped(att, "a confirmed hang", [hang], "a1.log")
    assert not end.succeeded and (end.rank, end.finding) == (1, "HANG_RANK_MISSING_COLLECTIVE")
    assert end.summary() == ("attempt 1: stopped by ddpdoctor run (a confirmed hang): "
                             "HANG_RANK_MISSING_COLLECTIVE on rank 1")
    line, status = verdict([AttemptEnd(0, False, 1, 1, "RANK_CRASHED"), end])
    assert status == "error" and "ended differently" in line and "stopped by" in line
    # stopped with nothing found (a SIGTERM run received): said as such, no rank
    bare = stopped(att, "SIGTERM received", [], "")
    assert bare.summary() == "attempt 1: stopped by ddpdoctor run (SIGTERM received)"


def test_a_lead_rank_stays_where_the_index_was_not_read():
    text = "-- Process 1 terminated with the following error:\nRuntimeError: boom\n"
    lead = Finding("RANK_CRASHED", "t", ranks=[1], evidence={"rank_from": "its prefix"})
    name_spawn_culprit([lead], text, {0: 1}, {})
    assert lead.ranks == [1] and lead.evidence["rank_from"] == "its prefix"
