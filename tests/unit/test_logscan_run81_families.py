"""Blind run 81's lesson. A wrapper between the launcher and Python (Determined's
`pid_client`) that exits with its child's returncode, -9 after a SIGKILL, reaches
DeepSpeed's launcher as the byte 256 - 9: "exits with return code = 247" is a death by
SIGKILL (a 2-node ZeRO-3 offload run whose host RAM filled while it saved a checkpoint;
called a crash with its own error missing). Real log, URL in its sidecar."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

BYTE = Path("tests/fixtures/reallogs/XD3_deepspeed_zero3_offload_host_ram_oom_checkpoint.log")


def test_a_signal_death_passed_on_as_a_byte_is_that_signal():
    lead = findings_of(BYTE)[0]
    assert lead.id == "OOM"
    assert "SIGKILL" in lead.title
    assert lead.evidence["exit_code"] == -9
    assert lead.evidence["reported_exit_code"] == 247


def test_a_code_that_is_no_signals_byte_is_a_crash(tmp_path):
    text = BYTE.read_text().replace("return code = 247", "return code = 3")
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "RANK_CRASHED"
    assert "code 3" in lead.title
