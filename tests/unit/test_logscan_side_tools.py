"""A side tool (a dashboard a training loop reports to) printing a traceback of its own.

A traceback whose header is followed by a frame inside the side tool was printed by the
tool's own handler: an uncaught exception's traceback starts at the program's entry. Its
exception line, though a wording the knowledge base knows ("Connection refused"), is the
dashboard that is down, not the job's rendezvous, and no rank died of it. The same message
raised through the side tool up to the training script is still the rank's crash.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in

# a real healthy excerpt (URL in its sidecar): printed every few iterations while the model
# trained on
VISDOM = Path("tests/fixtures/reallogs/c_healthy_visdom_own_traceback_cyclegan.log").read_text()


def test_a_dashboards_own_traceback_is_neither_a_crash_nor_the_rendezvous(tmp_path):
    found = findings_in(tmp_path, VISDOM)
    assert [f for f in found if f.severity == "error"] == []
    assert "ENV_RENDEZVOUS_UNREACHABLE" not in [f.id for f in found]


def test_the_same_refusal_raised_up_to_the_training_script_is_its_crash(tmp_path):
    head, frames = VISDOM.split("\n", 1)
    script = '  File "/home/u/train.py", line 88, in <module>\n    vis.line(X, Y)'
    raised = f"{head}\n{script}\n{frames}"
    lead = findings_in(tmp_path, raised)[0]
    assert lead.id == "RANK_CRASHED" and lead.severity == "error"


def test_an_excerpt_cut_below_its_header_is_not_read_as_the_tools_own(tmp_path):
    # no header: the first frame kept need not be the outermost (the excerpt was cut)
    cut = VISDOM.split("\n", 1)[1]
    assert findings_in(tmp_path, cut)[0].id == "RANK_CRASHED"
