"""A rank's uncaught exception crosses to the other nodes before the rank dies (issue #18).

The store usually lives in torchrun on the first node, which exits within ~0.2 s of its
ranks feeling another node's crash: a failure published when the crashed rank's process
exits often arrives after the store is gone. run now publishes on the exception's last
line, printed by torch's c10d excepthook while the rank still lives. Fixtures: node b's and
node a's output of a real two-node run (tests/fixtures/logs/README.md).
"""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.jobview.report import summary_line
from ddpdoctor.jobview.snapshot import Failure
from ddpdoctor.run.jobnode import NodeEnd, raised_failure, unaccounted
from ddpdoctor.run.process import OutputCopy

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def _fed(tmp_path: Path, name: str) -> tuple[OutputCopy, list[int]]:
    """The fixture fed line by line; the line numbers after which rank_raised was set."""
    copy = OutputCopy(tmp_path)
    raised = []
    for i, line in enumerate((LOGS / name).read_bytes().splitlines(keepends=True), 1):
        copy.add_line(line)
        if copy.rank_raised.is_set():
            raised.append(i)
            copy.rank_raised.clear()
    return copy, raised


def test_only_the_last_line_of_a_ranks_traceback_raises_the_flag(tmp_path):
    _, raised = _fed(tmp_path, "jobview_raised_node_b.log")
    assert raised == [15]  # "[rank3]: RuntimeError: planted crash on rank 3 at step 40"
    copy = OutputCopy(tmp_path / "other")
    for line in (b"RuntimeError: unprefixed, not a rank's excepthook\n",
                 b"[rank0]: step 5 done\n", b"[rank0]: Traceback (most recent call last):\n",
                 b"[rank0]:     raise RuntimeError(f'x')\n",
                 b"[rank1]: ErrorCount: 3 (a log line, no exception)\n"):
        copy.add_line(line)
    assert not copy.rank_raised.is_set()
    for line in (b"[rank1]: torch.OutOfMemoryError: CUDA out of memory.\n",
                 b"[rank2]: KeyboardInterrupt\n"):
        copy.add_line(line)
        assert copy.rank_raised.is_set(), line
        copy.rank_raised.clear()


class _Job:
    def __init__(self, copy: OutputCopy) -> None:
        self.copy = copy


class _Tracker:
    rank_pids = {3: 4242}


def test_the_raised_error_is_published_as_this_nodes_failure_before_any_exit(tmp_path):
    copy, _ = _fed(tmp_path, "jobview_raised_node_b.log")
    f = raised_failure(_Job(copy), _Tracker())
    assert f is not None and f.rank == 3 and f.pid == 4242 and not f.fallout
    assert f.finding_id == "RANK_CRASHED" and "planted crash on rank 3" in f.title


def test_a_peers_connection_closed_is_not_published_early(tmp_path):
    # fallout names no rank of its own ("another rank went away"): nothing to race for;
    # it is published when this node's ranks exit, as before
    copy, raised = _fed(tmp_path, "jobview_raised_node_a_fallout.log")
    assert raised == [59]
    assert raised_failure(_Job(copy), _Tracker()) is None


def test_no_rank_named_no_early_failure(tmp_path):
    copy = OutputCopy(tmp_path)
    copy.add_line(b"[rank0]: step 5 done\n")
    assert raised_failure(_Job(copy), _Tracker()) is None


def _f(node: int, rank: int, fallout: bool) -> Failure:
    return Failure(node, f"node-{node}", rank, 10, "RANK_CRASHED", "x", fallout, 1.0)


def test_a_node_that_sent_nothing_is_named_only_when_no_root_cause_came():
    nodes = {0: "node-a", 1: "node-b", 2: "node-c"}
    ours = _f(0, 0, True)
    # only fallout known: the nodes that told nothing are where the cause likely is
    assert unaccounted(nodes, 0, [ours, _f(2, 4, True)], ours) == ["node-b (node 1)"]
    # a root cause arrived: nothing to point at
    assert unaccounted(nodes, 0, [ours, _f(2, 4, False)], ours) == []


def test_the_job_view_check_warns_and_names_the_silent_node():
    end = NodeEnd("10.0.0.1:29500", True, 0, "", {0: "node-a", 1: "node-b"},
                  [_f(0, 0, True)], _f(0, 0, True), None, [], ["node-b (node 1)"])
    text, status = summary_line(end)
    assert status == "warning" and "no failure came from node-b (node 1)" in text
    ok, status = summary_line(NodeEnd("10.0.0.1:29500", True, 0, "", {}, [], None, None, []))
    assert status == "ok", ok
