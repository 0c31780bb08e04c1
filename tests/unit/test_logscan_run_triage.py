"""run's crash triage and diagnose share one knowledge base and one set of rules."""

from __future__ import annotations

from ddpdoctor.run.progress import RankExit
from ddpdoctor.run.triage import triage_output


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
