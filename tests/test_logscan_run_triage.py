"""run's crash triage and diagnose share one knowledge base and one set of rules."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.run.progress import RankExit
from ddpdoctor.run.triage import triage_output
from tools import corpus

REAL = Path(__file__).parent / "fixtures" / "reallogs"


def test_every_corpus_log_gets_the_same_first_finding_live_and_after_the_fact(tmp_path):
    for case in corpus.load(REAL):
        # run keeps the job's output under its own name: copy it there, as run does.
        out = tmp_path / "output.log"
        out.write_bytes(case.log.read_bytes())
        after = corpus.run(case)
        if case.healthy:  # a healthy run ends 0: run finds no error in its output either
            live, info = triage_output(out, [], returncode=0)
            assert not [f for f in live if f.severity == "error"], case.name
            continue
        live, info = triage_output(out, [], returncode=1)
        if after.got_id == "(none)":  # a known miss of the log rules (run's report still
            continue  # fails its job check with the exit code: tests/test_run_e2e.py)
        assert live and live[0].id == after.got_id, case.name
        assert info["events"] > 0


def test_run_names_the_first_exit_when_the_output_holds_nothing(tmp_path):
    out = tmp_path / "output.log"
    out.write_text("epoch 1 loss 0.5\n")
    findings, info = triage_output(out, [RankExit(rank=2, pid=4242, time=1.0)], returncode=-9)
    assert [(f.id, f.ranks) for f in findings] == [("RANK_CRASHED", [2])]
    assert info["first_exit"] == {"rank": 2, "pid": 4242}


def test_run_reports_an_unrecognized_failure_instead_of_nothing(tmp_path):
    out = tmp_path / "output.log"
    out.write_text("[rank3]: Traceback (most recent call last):\n"
                   '[rank3]:   File "/work/train.py", line 12, in <module>\n'
                   "[rank3]: mylib.WeirdThing: the flux capacitor is empty\n")
    findings, _ = triage_output(out, [], returncode=1)
    # the rank's own exception, its class unreadable: that rank's crash, never nothing
    assert [(f.id, f.ranks) for f in findings] == [("RANK_CRASHED", [3])]
