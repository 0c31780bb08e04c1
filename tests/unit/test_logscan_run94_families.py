"""Blind run 94's lesson (batch XF7, a committed run log; URL in its sidecar): the host's
OOM killer took processes the ranks started (HF datasets' map workers), slurm counted the
kills ("Detected 4 oom_kill events"), and each rank raised that a subprocess "abruptly
died": OOM on those ranks, not four ranks' crashes. Without the kill record the rank's
words alone stay its crash."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

MAP_OOM = Path("tests/fixtures/reallogs/XF7_alignment_handbook_sft_4gpu_host_oom_kill_in_map.log")


def test_children_killed_for_memory_are_oom_on_the_ranks_that_said_so():
    assert errors_of(findings_of(MAP_OOM)) == [("OOM", [0, 1, 2, 3])]


def test_a_child_that_died_with_no_kill_record_is_the_ranks_crash(tmp_path):
    text = "".join(ln for ln in MAP_OOM.read_text().splitlines(keepends=True)
                   if "oom_kill" not in ln)
    assert errors_of(findings_in(tmp_path, text))[0] == ("RANK_CRASHED", [0, 1, 2, 3])
