"""DeepSpeed's texts in the knowledge base: logs recorded from real deepspeed 0.19.8 (2 CPU
ranks, tests/fixtures/deepspeed/) and lines from public threads (their URLs beside them in
ddpdoctor/diagnose/kb/deepspeed.py)."""

from __future__ import annotations

import io
from pathlib import Path

from ddpdoctor.diagnose import LogInput, diagnose_logs, floor

FIX = Path(__file__).parents[1] / "fixtures" / "deepspeed"


def _diagnose(text: str):
    findings, _ = diagnose_logs([LogInput("job.log", stream=io.BytesIO(text.encode()),
                                          rank_from_path=False)])
    return findings


def _file(name: str):
    findings, _ = diagnose_logs([LogInput(str(FIX / name), rank_from_path=False)])
    return findings


def test_a_raise_on_rank_0_is_rank_0s_whatever_the_launcher_quotes():
    # the launcher's last line quotes '--local_rank=1' (its last spawned command)
    lead = _file("raise_first_of_two.log")[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])
    assert not any("rank 1" in x and "launcher" in x for x in lead.evidence.get("fallout", []))


def test_a_sigkill_reported_only_by_the_launcher_names_no_wrong_rank():
    """Rank 0 was SIGKILLed; the launcher says the command of --local_rank=1 "exits with
    return code = -9". From the log alone the rank is unknown (run names it by which
    process went first): SIGKILL's finding, exit code -9, and no rank."""
    lead = _file("sigkill_first_of_two.log")[0]
    assert (lead.id, lead.ranks, lead.evidence["exit_code"]) == ("OOM", [], -9)


def test_the_floor_keeps_the_launchers_rank_only_for_local_rank_0():
    one = floor.detect("[ERROR] [launch.py:434:sigkill_handler] ['python', '-u', 'main.py', "
                       "'--local_rank=0'] exits with return code = -9")
    last = floor.detect("[ERROR] [launch.py:259:sigkill_handler] ['python', '-u', 'main.py', "
                        "'--local_rank=1'] exits with return code = -9")
    assert (one.rank, last.rank) == (0, None)
    assert one.signal == last.signal == "SIGKILL"


def test_a_segfault_the_launcher_reports_is_a_crash():
    # DeepSpeedExamples#626: the only failure line in the log
    text = ("[2023-07-10 04:26:05,876] [INFO] [launch.py:318:sigkill_handler] Killing "
            "subprocess 94984\n"
            "[2023-07-10 04:26:35,999] [ERROR] [launch.py:324:sigkill_handler] ['/venv/bin/"
            "python3.10', '-u', 'trainCLM.py', '--local_rank=1', '--deepspeed', 'ds.json'] "
            "exits with return code = -11\n")
    lead = _diagnose(text)[0]
    assert lead.id == "RANK_CRASHED" and "SIGSEGV" in lead.title and lead.ranks == []


def test_deepspeed_refusing_its_batch_config_is_a_config_finding():
    # DeepSpeed#6914, as the ranks print it, then the launcher tears down
    text = ("[rank0]: AssertionError: Check batch related parameters. train_batch_size is not "
            "equal to micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 1\n"
            "[rank1]: AssertionError: Check batch related parameters. train_batch_size is not "
            "equal to micro_batch_per_gpu * gradient_acc_step * world_size 8 != 2 * 1 * 1\n"
            "[2024-12-25 10:00:00,000] [INFO] [launch.py:319:sigkill_handler] Killing "
            "subprocess 4242\n"
            "[2024-12-25 10:00:00,100] [ERROR] [launch.py:325:sigkill_handler] ['python', "
            "'-u', 'train.py', '--local_rank=1'] exits with return code = 1\n")
    findings = _diagnose(text)
    assert [f.id for f in findings if f.severity == "error"] == ["DS_CONFIG_INVALID"]
    ev = findings[0].evidence
    assert (ev["train_batch_size"], ev["micro_batch"], ev["world_size"]) == (8, 2, 1)
    assert findings[0].ranks == []


def test_fp16_and_bf16_both_enabled_is_a_config_finding():
    text = ("Traceback (most recent call last):\n"
            "  File \"train.py\", line 9, in <module>\n"
            "AssertionError: bfloat16 and fp16 modes cannot be simultaneously enabled\n")
    assert _diagnose(text)[0].id == "DS_CONFIG_INVALID"
