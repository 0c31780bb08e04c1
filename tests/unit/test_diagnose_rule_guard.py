"""One rule's bug never loses what the others found, and never makes a log look clean.

Blind run 68: an old NCCL watchdog line with no SeqNum made the timeout rule raise
KeyError, and `diagnose` stopped with "log triage failed" (exit 3) on two real logs whose
timeouts every other rule could read. Each rule now runs guarded; the error is kept on the
lead finding (and, where nothing else was found, said as an incomplete diagnosis)."""

from __future__ import annotations

import importlib
import io
import json
from pathlib import Path

import pytest
from logscan_helpers import findings_in, findings_of

from ddpdoctor.diagnose.index import Rule

# the module (the package exports its function under the same name)
triage = importlib.import_module("ddpdoctor.diagnose.triage")
DIR = Path("tests/fixtures/reallogs")
CRASH = ("[rank1]: Traceback (most recent call last):\n"
         '[rank1]:   File "/home/u/train.py", line 9, in <module>\n'
         "[rank1]: ValueError: bad batch\n")


def _raises(ix, earlier):
    raise KeyError("seq")


@pytest.fixture
def broken_rule(monkeypatch):
    monkeypatch.setattr(triage, "RULES", (Rule("broken", _raises),) + triage.RULES)


def test_the_old_watchdog_line_without_a_seqnum_is_read():
    for name in ("X92_accelerate_eval_broadcast_timeout_2gpu",
                 "X92_accelerate_single_gpu_eval_timeout_broadcast"):
        lead = findings_of(DIR / f"{name}.log")[0]
        assert (lead.id, "rule_errors" in lead.evidence) == ("COLLECTIVE_TIMEOUT", False), name
        assert "(BROADCAST)" in lead.title


def test_a_broken_rule_keeps_the_others_findings(tmp_path, broken_rule):
    found = findings_in(tmp_path, CRASH)
    assert (found[0].id, found[0].ranks, found[0].severity) == ("RANK_CRASHED", [1], "error")
    assert found[0].evidence["rule_errors"] == ["broken: KeyError: 'seq'"]


def test_a_broken_rule_alone_is_never_a_clean_log(tmp_path, broken_rule):
    found = findings_in(tmp_path, "epoch 1 loss 0.5\n")
    assert [(f.id, f.severity) for f in found] == [("UNRECOGNIZED_FAILURE", "warning")]
    assert "a rule of its own failed (broken: KeyError: 'seq')" in found[0].title


def test_diagnose_says_a_broken_rule_made_the_diagnosis_incomplete(tmp_path, broken_rule):
    from click.testing import CliRunner

    from ddpdoctor.commands.diagnose import command

    log = tmp_path / "job.log"
    log.write_text("epoch 1 loss 0.5\n")
    result = CliRunner().invoke(command, ["--json", "-", str(log)])
    assert result.exit_code == 3
    report = json.loads(result.output)
    assert "a rule of ddpdoctor failed on this log" in report["doctor_error"]


def test_no_rule_raises_on_cut_or_thinned_corpus_logs():
    """Real logs cut anywhere (an excerpt pasted into a thread) or with half their lines
    gone (interleaved output lost): no rule may raise on what is left. Seeded, so a
    failure names a reproducible input."""
    import random

    from ddpdoctor.diagnose import LogInput, diagnose_logs
    from tools import corpus

    rnd = random.Random(68)
    broken = {}
    for i, case in enumerate(corpus.load()):
        lines = case.log.read_bytes().splitlines(keepends=True)
        a = rnd.randrange(len(lines))
        b = rnd.randrange(a, len(lines) + 1)
        # one of the two per log, in turn: each log is read once (a corpus pass is the
        # cost of this test)
        name, part = ((f"[{a}:{b}]", lines[a:b]) if i % 2 == 0 else
                      ("[half]", [x for x in lines if rnd.random() < 0.5]))
        found, _ = diagnose_logs([LogInput(case.name, stream=io.BytesIO(b"".join(part)),
                                           rank_from_path=False)])
        errors = [e for f in found for e in f.evidence.get("rule_errors", ())]
        if errors:
            broken[case.name + name] = errors
    assert broken == {}
