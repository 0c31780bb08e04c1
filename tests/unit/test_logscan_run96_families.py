"""Blind run 96's lesson (batch XG3, an mmsegmentation thread; URL in its sidecar):
Python's CalledProcessError for a child that a signal ended says "died with
<Signals.SIGKILL: 9>", not "returned non-zero exit status -9": torch.distributed.launch's
report in those words is read as the other wording is. Its --local_rank is the launcher's
LAST child's, whichever child died (torch/distributed/launch.py v1.8 raises with the
spawning loop's last ``cmd``): it names no rank, it sizes the node (2026-11-30)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

KILLED = Path("tests/fixtures/reallogs/XG3_mmseg_launch_validation_host_oom_sigkill.log")


def test_a_child_the_kernel_killed_is_an_oom_of_no_named_rank():
    assert errors_of(findings_of(KILLED)) == [("OOM", [])]


def test_the_other_wording_of_the_same_death_reads_the_same(tmp_path):
    text = KILLED.read_text().replace("died with <Signals.SIGKILL: 9>",
                                      "returned non-zero exit status -9")
    assert errors_of(findings_in(tmp_path, text)) == [("OOM", [])]


def test_a_child_that_died_of_another_signal_is_its_crash(tmp_path):
    text = (KILLED.read_text().replace("died with <Signals.SIGKILL: 9>",
                                       "died with <Signals.SIGSEGV: 11>")
            .replace("'--local_rank=1'", "'--local_rank=0'"))
    found = errors_of(findings_in(tmp_path, text))
    assert found and found[0] == ("RANK_CRASHED", [])
