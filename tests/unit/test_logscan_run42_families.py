"""Run 41's two leftovers, each a family:

- A torchrun failure summary lists each failed rank as a record whose multi-line traceback
  is that rank's: its frames and exception line belong to the record's rank, since the
  rank's own output is often not in the log at all. A CUDA OOM every rank printed was
  named for two of four ranks (the one whose prefixed output was kept, and the root cause).
- init_process_group's store barrier at its deadline ("Timed out initializing process
  group in store based barrier ... worker_count=M"): the ranks that raise it waited for
  ranks that never came; they did not crash. A 256-rank job was called a crash of rank 94.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

OOM_LOG = Path("tests/fixtures/reallogs/X22_kd_teacher_student_cuda_oom.log")
BARRIER_LOG = Path("tests/fixtures/reallogs/X22_megds_256rank_init_store_barrier_node_missing.log")


def _summary(text: str) -> str:
    """torchrun's ChildFailedError block alone (from its header to its last ruler)."""
    lines = text.splitlines(True)
    start = next(i for i, x in enumerate(lines) if x.strip() == "Failures:") - 2
    return "".join(lines[start:])


def test_every_record_of_the_summary_names_its_rank(tmp_path):
    lead = findings_of(OOM_LOG)[0]
    assert (lead.id, lead.ranks) == ("OOM", [0, 1, 2, 3])


def test_the_summary_alone_names_every_rank_that_raised(tmp_path):
    lead = findings_in(tmp_path, _summary(OOM_LOG.read_text()))[0]
    assert (lead.id, lead.ranks) == ("OOM", [0, 1, 2, 3])


def test_a_record_without_traceback_lends_its_rank_to_nothing_after_the_block(tmp_path):
    # after the block's closing ruler a bare exception line is no record's
    text = _summary(OOM_LOG.read_text()) + "ValueError: after the summary\n"
    found = findings_in(tmp_path, text)
    assert not [f for f in found if "after the summary" in f.title and f.ranks]


def test_the_store_barrier_timeout_is_ranks_missing_not_a_crash():
    found = findings_of(BARRIER_LOG)
    assert found[0].id == "HANG_RANK_MISSING_COLLECTIVE"
    assert "9 of 256 ranks never reached init_process_group" in found[0].title
    assert not [f for f in found if f.id == "RANK_CRASHED"]


def _timeout_line(rank: int) -> str:
    line = next(x for x in BARRIER_LOG.read_text().splitlines() if "Timed out init" in x)
    body = line.split(": ", 1)[1]
    return (f"{rank}: " + body.replace("rank: 94", f"rank: {rank}")
            .replace("world_size=256, worker_count=247", "world_size=4, worker_count=3") + "\n")


def test_the_one_rank_that_never_came_is_named(tmp_path):
    lead = findings_in(tmp_path, "".join(_timeout_line(r) for r in (0, 1, 3)))[0]
    assert (lead.id, lead.ranks) == ("HANG_RANK_MISSING_COLLECTIVE", [2])


def test_a_barrier_still_waiting_is_an_unresponsive_rank(tmp_path):
    waiting = ("INFO:root:Waiting in store based barrier to initialize process group for "
               "rank: {r}, key: store_based_barrier_key:1 (world_size=4, worker_count=3, "
               "timeout=0:30:00)\n")
    lead = findings_in(tmp_path, "".join(waiting.format(r=r) for r in (0, 1, 3)))[0]
    assert (lead.id, lead.ranks) == ("RANK_UNRESPONSIVE", [2])
