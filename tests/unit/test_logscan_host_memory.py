"""A death with no error of its own just after the job's last reading of host memory said
it was nearly full (DeepSpeed's see_memory_usage, `CPU Virtual Memory: ... percent =
84.6%`) is most likely the kernel's OOM killer, whose SIGKILL the launcher's report does
not name (found among the development set's misses: a ZeRO-2 CPU-offload job called an
unexplained failure). Real log, URL in its sidecar."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

LOG = Path("tests/fixtures/reallogs/F1_deepspeed_offload_host_oom_killed.log")


def test_a_silent_death_after_host_memory_near_full_is_an_oom():
    lead = findings_of(LOG)[0]
    assert lead.id == "OOM" and "84.6% used" in lead.title
    assert lead.evidence["certainty"] == "likely"


def test_host_memory_with_room_left_says_nothing(tmp_path):
    text = LOG.read_text().replace("percent = 84.6%", "percent = 50.7%")
    assert findings_in(tmp_path, text)[0].id == "UNRECOGNIZED_FAILURE"


def test_a_reading_after_the_death_is_not_its_cause(tmp_path):
    lines = LOG.read_text().splitlines(True)
    reading = next(x for x in lines if "CPU Virtual Memory" in x)
    text = "".join(x for x in lines if x is not reading) + reading
    assert findings_in(tmp_path, text)[0].id == "UNRECOGNIZED_FAILURE"


def test_the_reading_alone_in_a_healthy_log_is_no_finding(tmp_path):
    reading = next(x for x in LOG.read_text().splitlines(True) if "CPU Virtual Memory" in x)
    assert not [f for f in findings_in(tmp_path, reading + "step 10 loss 1.0\n")
                if f.severity == "error"]
