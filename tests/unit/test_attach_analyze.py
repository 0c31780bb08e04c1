"""analyze: every rank's state -> the hang finding and its culprit (pure, no processes)."""

import pytest
from attach_helpers import (
    TRAIN,
    f,
    in_collective,
    in_getitem,
    load_recorded,
    rank,
    recorded_fr_path,
    thread,
)

from ddpdoctor.attach.analyze import analyze, group_stacks, headline
from ddpdoctor.attach.classify import MISSING, RankState, classify
from ddpdoctor.attach.flight_recorder import compare_traces, parse_fr_trace
from ddpdoctor.attach.stacks import DEAD, STOPPED, ZOMBIE, RankStack

SLEEP = [f("wait_for_checkpoint", TRAIN, 61, "time.sleep(3600)"), f("main", TRAIN, 9)]


def states(*stacks):
    return [classify(s) for s in stacks]


def ids(findings):
    return [(x.id, x.ranks) for x in findings]


def test_missing_collective_leads_with_the_odd_one_out():
    st = states(*[rank(r, thread(in_collective("all_reduce", 88))) for r in (0, 2, 3)],
                rank(1, thread(in_getitem(41))))
    found = analyze(st)
    assert ids(found) == [("HANG_DATALOADER", [1])]
    assert found[0].title == ("ranks [0,2,3] wait in all_reduce at train.py:88 in step; "
                              "rank 1 is at data.py:41 in __getitem__ (in Dataset.__getitem__)")
    assert headline(st, found) == found[0].title
    assert found[0].evidence["waiting"]["ranks"] == [0, 2, 3]


def test_rank_elsewhere_is_missing_the_collective():
    st = states(rank(0, thread(in_collective("all_reduce"))), rank(1, thread(SLEEP)),
                rank(2, thread(in_collective("all_reduce"))))
    found = analyze(st)
    assert ids(found) == [("HANG_RANK_MISSING_COLLECTIVE", [1])]
    assert "rank 1 is at train.py:61 in wait_for_checkpoint (sleeping)" in found[0].title
    assert found[0].evidence["stack of rank 1"][0] == "wait_for_checkpoint (train.py:61)"


def test_stopped_rank_is_missing_the_collective():
    st = states(rank(0, thread(in_collective("barrier"))),
                RankStack(1, 7, STOPPED, error="the process is stopped"))
    assert ids(analyze(st)) == [("HANG_RANK_MISSING_COLLECTIVE", [1])]


def test_different_collectives_majority_names_the_minority():
    st = states(rank(0, thread(in_collective("all_reduce", 88))),
                rank(1, thread(in_collective("broadcast", 93))),
                rank(2, thread(in_collective("all_reduce", 88))))
    found = analyze(st)
    assert ids(found) == [("HANG_COLLECTIVE_MISMATCH", [1])]
    assert "rank 1 waits in broadcast at train.py:93" in found[0].title


def test_different_collectives_tie_without_evidence_is_undecided():
    # two plain user calls, no guard, no FR, no steps: nothing tells the sides apart
    st = states(rank(0, thread(in_collective("all_reduce", 88))),
                rank(1, thread(in_collective("broadcast", 93))))
    found = analyze(st)
    assert ids(found) == [("HANG_COLLECTIVE_MISMATCH", [0, 1])]
    assert "undecided" in found[0].title
    assert found[0].evidence["attribution"]["decided"] is False
    assert "innermost user frame" in found[0].evidence["attribution"]["undecided"]


def test_same_collective_from_different_lines_is_a_mismatch():
    st = states(*[rank(r, thread(in_collective("all_reduce", 88))) for r in range(3)],
                rank(3, thread(in_collective("all_reduce", 140, func="evaluate"))))
    assert ids(analyze(st)) == [("HANG_COLLECTIVE_MISMATCH", [3])]


def test_p2p_deadlock_everyone_receives():
    st = states(*[rank(r, thread(in_collective("recv", 12, "exchange"))) for r in range(3)])
    found = analyze(st)
    assert ids(found) == [("HANG_P2P_DEADLOCK", [0, 1, 2])]


def test_p2p_deadlock_irecv_wait():
    frames = [f("exchange", TRAIN, 14, "req.wait()"), f("main", TRAIN, 30)]
    st = states(rank(0, thread(frames)), rank(1, thread(frames)))
    assert ids(analyze(st)) == [("HANG_P2P_DEADLOCK", [0, 1])]


def test_recv_while_the_peer_computes_is_not_a_deadlock():
    st = states(rank(0, thread(in_collective("recv"))), rank(1, thread(SLEEP)))
    assert ids(analyze(st)) == [("HANG_RANK_MISSING_COLLECTIVE", [1])]


@pytest.mark.parametrize("state", [DEAD, ZOMBIE, MISSING])
def test_crashed_rank_while_others_wait(state):
    st = states(rank(0, thread(in_collective("all_reduce"))), RankStack(1, 5, state),
                rank(2, thread(in_collective("all_reduce"))))
    found = analyze(st)
    assert ids(found) == [("RANK_CRASHED", [1])]
    assert "while ranks [0,2] wait in all_reduce" in found[0].title


def test_all_ranks_in_the_same_place_gives_no_stack_culprit():
    st = states(*[rank(r, thread(in_collective("all_reduce"))) for r in range(4)])
    assert analyze(st) == []
    assert "no odd one out" in headline(st, [])
    assert len(group_stacks(st)) == 1


def test_no_collective_no_hang():
    st = states(rank(0, thread(SLEEP)), rank(1, thread(SLEEP)))
    assert analyze(st) == []
    assert "no hang visible" in headline(st, [])


def test_grouping_merges_identical_stacks_biggest_first():
    st = states(rank(3, thread(SLEEP)),
                *[rank(r, thread(in_collective("all_reduce"))) for r in (0, 1, 2)])
    groups = group_stacks(st)
    assert [g.ranks for g in groups] == [[0, 1, 2], [3]]


def test_many_culprits_read_as_few_lines():
    st = states(*[rank(r, thread(in_collective("all_reduce"))) for r in range(0, 4096, 2)],
                *[rank(r, thread(SLEEP)) for r in range(1, 4096, 2)])
    found = analyze(st)
    assert found[0].id == "HANG_RANK_MISSING_COLLECTIVE" and len(found[0].ranks) == 2048
    assert len(found[0].title) < 300


def _recorded(name):
    stacks = load_recorded(name)
    traces = {}
    for r in stacks:
        with open(recorded_fr_path(name, r), "rb") as fh:
            traces[r] = parse_fr_trace(fh.read(), r)
    return states(*stacks.values()), compare_traces(traces)


@pytest.mark.parametrize("name,finding", [
    ("missing-3ranks", ("HANG_RANK_MISSING_COLLECTIVE", [1])),
    ("compute-2ranks", ("HANG_RANK_MISSING_COLLECTIVE", [1])),
    ("mismatch-3ranks", ("HANG_COLLECTIVE_MISMATCH", [1])),
    ("p2p-2ranks", ("HANG_P2P_DEADLOCK", [0, 1])),
    ("data-workers-2ranks", ("HANG_DATALOADER", [1])),
])
def test_recorded_hangs(name, finding):
    st, verdicts = _recorded(name)
    found = analyze(st, verdicts)
    assert ids(found) == [finding]


def test_flight_recorder_names_the_rank_behind_when_stacks_look_alike():
    st, verdicts = _recorded("missing-3ranks")
    # Pretend rank 1's stack looked like the others' (e.g. all parked in the same wait).
    alike = [s if s.rank != 1 else RankState(1, 101, s.kind) for s in st]
    alike = [RankState(s.rank, s.pid, "collective", "all_reduce") for s in alike]
    found = analyze(alike, verdicts)
    assert ids(found) == [("HANG_RANK_MISSING_COLLECTIVE", [1])]
    assert "did not" in found[0].title and "#3" in found[0].title


def test_flight_recorder_mismatch_when_stacks_look_alike():
    st, verdicts = _recorded("mismatch-3ranks")
    alike = [RankState(s.rank, s.pid, "collective", "all_reduce") for s in st]
    found = analyze(alike, verdicts)
    assert ids(found) == [("HANG_COLLECTIVE_MISMATCH", [1])]
    assert "broadcast" in found[0].title


def test_lone_collective_on_a_side_group_is_a_missing_collective_with_flight_recorder():
    from ddpdoctor.attach.flight_recorder import PgVerdict

    # ranks 0 and 2 wait in the step's all_gather; rank 1 alone in an all_reduce
    st = states(rank(0, thread(in_collective("all_gather", 74))),
                rank(1, thread(in_collective("all_reduce", 90))),
                rank(2, thread(in_collective("all_gather", 74))))
    assert [(f.id, f.ranks) for f in analyze(st)] == [("HANG_COLLECTIVE_MISMATCH", [1])]
    # FR: no group where ranks disagree; rank 1 is behind on the default group, the others
    # on the side group rank 1 alone entered
    verdicts = [PgVerdict("0", "default_pg", 12, "all_gather", behind={1: 11},
                          pending={"all_gather": [0, 2]}),
                PgVerdict("1", "side", 3, "all_reduce", behind={0: 2, 2: 2},
                          pending={"all_reduce": [1]})]
    got = analyze(st, verdicts)
    assert [(f.id, f.ranks) for f in got] == [("HANG_RANK_MISSING_COLLECTIVE", [1])]
    # a real mismatch on one group stays a mismatch
    clash = [PgVerdict("0", "default_pg", 12, "all_gather",
                       pending={"all_gather": [0, 2], "all_reduce": [1]})]
    assert [f.id for f in analyze(st, clash)] == ["HANG_COLLECTIVE_MISMATCH"]
