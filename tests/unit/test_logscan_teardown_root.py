"""torchrun can call its own SIGTERM of a healthy rank the "first observed failure"."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.diagnose import LogInput, diagnose_logs

LOGS = Path(__file__).parents[1] / "fixtures" / "logs"


def test_a_sigkilled_rank_is_the_root_cause_not_the_rank_torchrun_sigtermed():
    # real: rank 1 SIGKILLed (oom-kill injection); torchrun's summary names rank 0's -15 first
    findings, _ = diagnose_logs([LogInput(str(LOGS / "torchrun_sigterm_named_first.log"))])
    first = findings[0]
    assert (first.id, first.ranks) == ("OOM", [1])
    assert first.evidence["exit_code"] == -9


def test_a_job_stopped_from_outside_stays_a_sigterm(tmp_path):
    # the same real log with rank 1's line made a SIGTERM too, as when a scheduler stops the
    # job: every failure is a SIGTERM, nothing else to prefer, torchrun's first stays first
    text = (LOGS / "torchrun_sigterm_named_first.log").read_text()
    text = text.replace("exitcode  : -9 (pid: 20941)  (SIGKILL)",
                        "exitcode  : -15 (pid: 20941)  (SIGTERM)")
    log = tmp_path / "all_sigterm.log"
    log.write_text(text)
    findings, _ = diagnose_logs([LogInput(str(log))])
    assert findings and findings[0].ranks == [0]
