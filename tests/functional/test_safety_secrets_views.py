"""One scrub for every view: each secret form goes through every view and is found in none.

The forms are the ones a real log, command line or config dump carries (docs/safety.md);
the views: diagnose's terminal view (plain and -v), its JSON and HTML, `report --html` from
a JSON whose evidence holds secrets, the watch's sinks (Python warning, logging, JSONL,
framework console logger, Prometheus labels), and `run`'s report of a job that printed them.
"""

from __future__ import annotations

import json
import logging
import sys
import warnings

import pytest
from click.testing import CliRunner

from ddpdoctor.cli import main
from ddpdoctor.core import redact
from ddpdoctor.core.findings import Finding

FORMS = [
    "https://alice:{v}@host/path",
    "HF_TOKEN={v}",
    "--api-key {v}",
    "Authorization: Bearer {v}",
    "password={v}",
    "redis://:{v}@cache:6379/0",
    "MLFLOW_TRACKING_PASSWORD = {v}",
    "-p {v}",
    "--password {v}",
    "--token {v}",
    "https://u:{v}@h/",
    "--api-key={v}",
    "WANDB_API_KEY: {v}",
    "AWS_SECRET_ACCESS_KEY={v}",
    'export HF_TOKEN="{v}"',
    "Authorization: Basic {v}",
    '{{"password": "{v}"}}',
    "postgresql://trainer:{v}@db:5432/runs",
    "'Authorization': 'token {v}'",
    "--hf_token {v}",
]


def _value(i: int) -> str:
    return f"Zq{i}kSecretValue{i}x"


SECRETS = [(form.format(v=_value(i)), _value(i)) for i, form in enumerate(FORMS)]


def _leaks(text: str) -> list[str]:
    return [v for _, v in SECRETS if v in text]


def test_every_form_is_masked_by_the_text_scrub():
    for line, value in SECRETS:
        masked = redact.text(f"RuntimeError: failed with {line} on rank 1")
        assert value not in masked, (line, masked)
        assert redact.MASK in masked, line


def test_harmless_text_stays_readable():
    for text in ("torchrun --nproc-per-node 2 -p 29500 train.py", "mkdir -p /tmp/ckpt",
                 "the token expired", "store key: rank_3_done", "https://host:8080/x",
                 "Tokens per second: 1200", "ssh -p 22 node1"):
        assert redact.text(text) == text


def _crash_log(tmp_path):
    lines = ["[rank1]: Traceback (most recent call last):",
             '[rank1]:   File "/work/train.py", line 12, in <module>']
    lines += [f"[rank1]: launching with {line}" for line, _ in SECRETS]
    lines += [f"[rank1]: RuntimeError: could not connect ({SECRETS[0][0]} {SECRETS[5][0]} "
              f"{SECRETS[6][0]} {SECRETS[7][0]})"]
    log = tmp_path / "crash.log"
    log.write_text("\n".join(lines) + "\n")
    return log


def test_diagnose_terminal_json_and_html_show_no_secret(tmp_path):
    log = _crash_log(tmp_path)
    out_json, out_html = tmp_path / "r.json", tmp_path / "r.html"
    for verbose in ([], ["-v"]):
        res = CliRunner().invoke(main, ["diagnose", *verbose, "--json", str(out_json),
                                        "--html", str(out_html), str(log)])
        assert res.exit_code == 1, res.output
        assert _leaks(res.output) == [], res.output
        assert _leaks(out_json.read_text()) == []
        assert _leaks(out_html.read_text()) == []
    data = json.loads(out_json.read_text())
    assert data["findings"][0]["ranks"] == [1]
    assert redact.MASK in json.dumps(data["findings"])
    res = CliRunner().invoke(main, ["diagnose", "--json", "-", str(log)])
    assert _leaks(res.output) == []


def test_report_html_from_a_json_with_secrets(tmp_path):
    evidence = {"lines": [line for line, _ in SECRETS], "command": SECRETS[9][0],
                "HF_TOKEN": SECRETS[1][1], "env": {"WANDB_API_KEY": SECRETS[12][1]}}
    raw = {"schema": "ddpdoctor.report/1", "command": "diagnose",
           "started": "2026-11-26T00:00:00+00:00", "world": {"command": SECRETS[8][0]},
           "findings": [{"id": "RANK_CRASHED", "severity": "error",
                         "title": f"rank 1 died ({SECRETS[2][0]})", "ranks": [1],
                         "evidence": evidence, "playbook": "RANK_CRASHED"}],
           "probes": {"logs": {"status": "error", "summary": SECRETS[3][0], "data": {}}}}
    src, page = tmp_path / "in.json", tmp_path / "page.html"
    src.write_text(json.dumps(raw))
    res = CliRunner().invoke(main, ["report", str(src), "--html", str(page)])
    assert res.exit_code == 0, res.output
    html = page.read_text()
    assert "RANK_CRASHED" in html
    assert _leaks(html) == []


def test_watch_sinks_get_the_scrubbed_finding(tmp_path, monkeypatch, caplog):
    from ddpdoctor.integrations.common import ConsoleSink
    from ddpdoctor.watch.stream import EventStream

    stream = EventStream(str(tmp_path / "events.jsonl"), rank=1, warn=True)
    framework_logger = logging.getLogger("framework.under.test")
    stream.add(ConsoleSink(framework_logger))
    seen: list[Finding] = []

    class Probe:
        def finding(self, finding, step, rank):
            seen.append(finding)

    stream.add(Probe())  # type: ignore[arg-type]
    finding = Finding("GRAD_NONFINITE", f"NaN after {SECRETS[1][0]}", [1],
                      {"lines": [line for line, _ in SECRETS], "PASSWORD": SECRETS[4][1]})
    with caplog.at_level(logging.DEBUG), warnings.catch_warnings(record=True) as warned:
        warnings.simplefilter("always")
        stream.finding(finding, step=3)
    stream.close()
    assert seen and seen[0].id == "GRAD_NONFINITE" and seen[0].ranks == [1]
    assert _leaks(json.dumps(seen[0].to_dict())) == []
    assert _leaks(caplog.text) == []
    assert _leaks("\n".join(str(w.message) for w in warned)) == []
    assert _leaks((tmp_path / "events.jsonl").read_text()) == []


def test_prometheus_job_label_is_scrubbed(monkeypatch):
    from ddpdoctor.core.contract import METRICS_JOB
    from ddpdoctor.watch.prometheus import _job

    monkeypatch.setenv(METRICS_JOB, f"train {SECRETS[9][0]}")
    assert _leaks(_job()) == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_run_report_of_a_job_that_printed_secrets(tmp_path):
    import subprocess

    script = tmp_path / "job.py"
    script.write_text("import sys\n"
                      + "".join(f"print({line!r}, flush=True)\n" for line, _ in SECRETS)
                      + f"raise RuntimeError({SECRETS[0][0]!r})\n")
    out_json, out_html = tmp_path / "run.json", tmp_path / "run.html"
    proc = subprocess.run([sys.executable, "-m", "ddpdoctor", "run", "--run-dir",
                           str(tmp_path / "rd"), "--json", str(out_json), "--html",
                           str(out_html), "--", sys.executable, str(script), "--token",
                           SECRETS[9][1]], capture_output=True, text=True, timeout=110)
    assert proc.returncode == 1, proc.stderr[-2000:]
    report = json.loads(out_json.read_text())
    assert report["findings"], report
    # The job's own stdout is the job's (run echoes it as is); every view of ddpdoctor's
    # report is scrubbed: the terminal report on stderr, the JSON, the page, report.json.
    view = proc.stdout[proc.stdout.rindex("ddpdoctor run ·"):]
    assert "Findings" in view or "RANK_CRASHED" in view or "UNRECOGNIZED" in view, view
    assert _leaks(view) == [], view
    assert _leaks(out_json.read_text()) == []
    assert _leaks(out_html.read_text()) == []
    assert _leaks((tmp_path / "rd" / "report.json").read_text()) == []
