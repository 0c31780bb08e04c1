"""Blind run 91's lessons (committed run logs and an issue thread, URLs in their sidecars):

- srun's "0: " label in front of torchrun is a node's launcher, not a rank: told by the
  input's first lines (an agent's line, or two ranks naming themselves behind one label),
  the label is taken off and each line keeps the rank it names itself; srun's "task N"
  errors name no rank then either. Where srun starts the ranks, its tasks stay ranks.
- The agent's own exception (its rendezvous losing the store when the other node's agent
  went) after a rank's death is the launcher's fallout, not a rank's crash.
- A time in front of torchrun's "[rank13]:" prefix (a log viewer's column) does not hide it.
- NCCL's sequence numbers and enqueued work count per process group: ranks waiting on
  different groups are not compared; every rank on a group of its own is a mismatch of the
  groups' order (NVIDIA/nccl#1610: two threads on one communicator)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

from ddpdoctor.diagnose import LogInput, scan_inputs

REAL = Path("tests/fixtures/reallogs")
SIGBUS = REAL / "XE8_ulysses_rank1_sigbus_peer_node_store_lost.log"
NAMEERROR = REAL / "XF3_ulysses_rank0_nameerror_store_fallout.log"
GROUPS = REAL / "XF4_nccl_two_thread_alltoall_timeout.log"


def _tasks_are_nodes(path: Path) -> bool:
    return scan_inputs([LogInput(str(path), rank_from_path=False)]).stats[0].tasks_are_nodes


def test_srun_label_in_front_of_torchrun_is_a_node_not_a_rank():
    assert _tasks_are_nodes(SIGBUS)
    found = findings_of(SIGBUS)
    # torchrun's summary names rank 1 (local rank 1 on node 0, whose srun label is "0: ");
    # node 1's agent losing the store is not a second crash
    assert errors_of(found) == [("ENV_SHM_TOO_SMALL", [1])]
    assert errors_of(findings_of(NAMEERROR)) == [("RANK_CRASHED", [0])]


def test_two_ranks_behind_one_label_make_it_a_node(tmp_path):
    text = "".join(f"{n}: [Rank {r}] Loading dataset\n" for n, r in ((0, 0), (0, 1), (1, 2)))
    log = tmp_path / "job.log"
    log.write_text(text + "1: Traceback (most recent call last):\n"
                   '1:   File "train.py", line 3, in <module>\n'
                   "1: ValueError: bad shard\n")
    scan = scan_inputs([LogInput(str(log))])
    assert scan.stats[0].tasks_are_nodes
    # the traceback is node 1's (rank 2 or 3): not "rank 1"
    assert all(1 not in f.ranks for f in findings_in(tmp_path, log.read_text()))


def test_srun_tasks_that_are_ranks_stay_ranks():
    oom = REAL / "X8_megatron_ds_srun_host_oom_kill_task2_perlmutter.log"
    assert not _tasks_are_nodes(oom)
    assert errors_of(findings_of(oom))[0] == ("OOM", [2])
    net = REAL / "XE9_megatron_nccl_net_plugin_init_fail_one_node.log"
    assert not _tasks_are_nodes(net)
    assert errors_of(findings_of(net))[0] == ("COMM_CONNECTIVITY", [40, 41, 42, 43])


def test_a_time_before_the_rank_prefix_keeps_the_rank():
    found = findings_of(GROUPS)
    lines = found[0].evidence["lines"]
    assert isinstance(lines, list)
    assert all("[rank13]" in ln or "[rank14]" in ln or "[rank15]" in ln for ln in lines)


def test_ranks_on_groups_of_their_own_are_not_compared():
    found = findings_of(GROUPS)
    assert errors_of(found) == [("HANG_COLLECTIVE_MISMATCH", [])]
    assert "group 119" in found[0].title and "group 112" in found[0].title


def test_ranks_of_one_group_are_compared(tmp_path):
    # rank 14's work state moved into rank 13's group: it enqueued less there (152 < 220),
    # so it is the rank that never issued the collective
    text = GROUPS.read_text().replace("PG GUID 120", "PG GUID 119")
    assert ("HANG_RANK_MISSING_COLLECTIVE", [14]) in errors_of(findings_in(tmp_path, text))
