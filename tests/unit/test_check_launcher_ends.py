"""How the check's launcher settles each rank's end from its result file and exit code,
without processes (check/launcher/launch.py, _Ends)."""

from __future__ import annotations

from ddpdoctor.check.launcher.launch import _Ends
from ddpdoctor.check.launcher.outcome import (
    STATUS_DIED,
    STATUS_ERROR,
    STATUS_TORN_DOWN,
    RankOutcome,
)


def _settle(exitcodes, payloads):
    ends = _Ends(exitcodes, False, 60.0, payloads)
    out = {}
    for r in sorted(set(exitcodes) | set(payloads)):
        o = RankOutcome(rank=r, status=STATUS_DIED)
        ends.settle(o)
        out[r] = o
    return out


def test_a_rank_killed_while_its_peer_still_joined_is_the_one_that_died():
    # a loaded host: rank 0 SIGKILLed itself in its function while rank 1 was still in
    # init_process_group, which then lost its connection to rank 0 (a flake of
    # tests/functional/test_launcher.py::test_rank_killed_by_signal_is_reported_as_crashed
    # beside a 2-rank job)
    got = _settle({0: -9, 1: 1}, {1: {"status": STATUS_ERROR, "error": (
        "RuntimeError: [../third_party/gloo/gloo/transport/tcp/pair.cc:534] Connection "
        "closed by peer [127.0.0.1]:40112")}})
    assert (got[0].status, got[0].error) == (STATUS_DIED, "killed by signal SIGKILL")
    assert got[1].status == STATUS_ERROR


def test_a_rank_gone_after_another_raised_its_own_error_was_torn_down():
    got = _settle({0: -15, 1: 1}, {1: {"status": STATUS_ERROR,
                                       "error": "RuntimeError: planted failure on rank 1"}})
    assert got[0].status == STATUS_TORN_DOWN
    assert got[1].status == STATUS_ERROR
