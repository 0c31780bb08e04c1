"""The HTML page's content, from recorded reports and a 64-rank synthetic job (no browser)."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
from click.testing import CliRunner
from html_pages import (
    FIXTURES,
    LOGS,
    bench_html,
    check_page,
    hang_page,
    synthetic_pages,
    train_page,
)

from ddpdoctor.cli import main
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Report
from ddpdoctor.report.charts_hang import stack_tree
from ddpdoctor.report.page import render_page, sections_for
from ddpdoctor.report.series import StepSeries, downsample
from ddpdoctor.report.verdict import verdict

MAX_BYTES = 5 * 1024 * 1024


def test_check_page_draws_the_sweep_and_the_link_matrix():
    report, html = check_page()
    assert verdict(report).headline == "No issues found"
    assert html.count('class="chart"') == 2
    assert "bus bandwidth vs message size" in html and "link bandwidth (GB/s)" in html
    assert "Every rank agrees" in html
    # self-contained: no tag loads anything (bokeh's JS is inlined; Chromium tests the rest)
    assert re.search(r"<(script|link|img|iframe)\b[^>]*\b(src|href)=", html) is None


def test_64_rank_check_names_the_slow_rank_and_its_odd_env():
    report = bench_html.check_report(64, culprit=37)
    assert {(f.id, tuple(f.ranks)) for f in report.findings} == {
        ("ENV_VAR_MISMATCH", (37,)), ("COMM_SLOW_RANK", (37,))}
    assert verdict(report).culprit == "rank 37"
    html = render_page(report)
    # the env table marks the odd rank's row
    table = html[html.index('<table class="env">'):]
    table = table[:table.index("</table>")]
    odd = re.findall(r'<tr class="odd-rank">(.*?)</tr>', table, re.S)
    assert len(odd) == 1 and "mlx5_1" in odd[0] and "37" in odd[0] and "odd one out" in odd[0]
    assert "mlx5_0" in table
    assert "Slowest link" in html and "37" in html


def test_train_page_marks_the_straggler_on_the_heatmap():
    report, series, html = train_page()
    v = verdict(report)
    assert (v.level, v.culprit) == ("warning", "rank 1")
    assert [(e.id, e.step, e.ranks) for e in series.events] == [("STRAGGLER", 10, [1])]
    assert html.count('class="chart"') == 5
    assert "slowest is rank 1" in html
    assert "STRAGGLER r1" in html  # the marker label on the step timeline
    assert "Playbook STRAGGLER" in html and "<h2>Fix</h2>" in html  # playbook as HTML
    assert html.count("<div class=\"fix\">") == 1  # the first finding's Fix, open


def test_run_hang_page_marks_the_culprit_branch_and_fr_lag():
    report, series, html = hang_page()
    assert [(f.id, f.ranks) for f in report.findings] == [("HANG_RANK_MISSING_COLLECTIVE", [1])]
    assert verdict(report).culprit == "rank 1"
    assert "injections.py:462" in verdict(report).first_line
    assert series.fr.by_group["0"] == {0: 10, 1: 9, 2: 10}
    assert "Rank 1 is behind collective #10" in html
    assert '<li class="frame culprit user-line">' in html and "your line" in html
    assert series.heartbeats and series.steps  # heartbeats and the trainer's log drawn too


def test_stack_tree_branches_where_the_culprit_parts_ways():
    report, _ = bench_html.hang_report(64, culprit=37)
    stacks = next(c for c in report.checks if c.name == "stacks")
    roots = stack_tree(stacks.data["groups"], stacks.data["states"], [37])
    assert len(roots) == 1 and roots[0].ranks == list(range(64))
    node, path = roots[0], []
    while node.children:
        split = [c for c in node.children if 37 in c.ranks]
        if len(node.children) > 1:
            assert [c.ranks for c in node.children if c not in split] == [
                [r for r in range(64) if r != 37]]
        node = split[0]
        path.append(node)
    assert all(n.culprit for n in path)
    assert node.frame.endswith("(data.py:41)") and node.user_line and node.leaf_state


def test_diagnose_page_quotes_the_root_cause_and_folds_the_cascade(tmp_path):
    out = tmp_path / "diag.html"
    res = CliRunner().invoke(main, ["diagnose", str(LOGS / "dataloader_bus.log"),
                                    "--json", str(tmp_path / "d.json"), "--html", str(out)])
    assert res.exit_code == 1, res.output
    data = json.loads((tmp_path / "d.json").read_text())
    root = data["findings"][0]
    assert (root["id"], root["ranks"]) == ("ENV_SHM_TOO_SMALL", [1])
    html = out.read_text()
    assert "Root cause in the logs" in html
    first = root["evidence"]["lines"][0]
    assert '<span class="first">' in html
    assert html.index("Root cause in the logs") < html.index("The cascade on the other ranks")
    from markupsafe import escape

    assert str(escape(first)) in html
    assert f"{len(root['evidence']['fallout'])} kind(s) of fallout" in html


def test_evidence_and_titles_are_escaped():
    report = Report("diagnose")
    report.add(Finding("RANK_CRASHED", "<script>alert(1)</script>", ranks=[3],
                       evidence={"lines": ["x.log:1: <img src=x onerror=alert(1)>"]}))
    html = render_page(report)
    assert "<script>alert(1)" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)" in html


def test_long_runs_are_downsampled_keeping_the_spike():
    n = 10_000
    s = StepSeries("ddp", steps=list(range(1, n + 1)), step_time_s=[0.1] * n,
                   loss=[1.0] * n, grad_norm=[1.0] * n,
                   rank_data_s=[[0.0, 0.0]] * n,
                   rank_compute_s=[[0.1, 5.0 if i == 7777 else 0.1] for i in range(n)],
                   rank_rss_mb=[[1.0, 1.0]] * n, rank_loss=[[1.0, 1.0]] * n)
    d = downsample(s, 600)
    assert len(d.steps) == 600 and d.downsampled_from == n
    assert max(row[1] for row in d.rank_compute_s) == 5.0


def test_64_rank_pages_stay_under_5_mb(tmp_path):
    pages = synthetic_pages(tmp_path)
    assert set(pages) == {"check", "run", "attach"}
    for kind, html in pages.items():
        assert len(html.encode()) < MAX_BYTES, kind
    assert "slowest is rank 37" in pages["run"]
    assert "Rank 37 is behind collective #812" in pages["attach"]


def test_sections_follow_the_report_kind():
    report, _ = bench_html.hang_report(8, culprit=3)
    titles = [s.title for s in sections_for(report, bench_html.RunSeries())]
    assert titles[0] == "Stacks of every rank, merged"
    assert not any("Bandwidth" in t for t in titles)


def test_report_command_usage_errors(tmp_path):
    runner = CliRunner()
    res = runner.invoke(main, ["report", str(tmp_path / "nope.json"), "--html", "x.html"])
    assert res.exit_code == 2 and "no such file" in res.output
    res = runner.invoke(main, ["report", str(LOGS / "exception.log"), "--html", "x.html"])
    assert res.exit_code == 2 and "not a ddpdoctor JSON report" in res.output
    res = runner.invoke(main, ["report", str(tmp_path), "--html", "x.html"])
    assert res.exit_code == 2 and "not a ddpdoctor run directory" in res.output
    res = runner.invoke(main, ["report", str(FIXTURES / "check-2ranks.json"), "--html",
                               str(tmp_path / "missing-dir" / "x.html")])
    # checked before any work: a folder that does not exist is a usage error
    assert res.exit_code == 2 and "does not exist" in res.output


def test_report_command_renders_a_run_directory(tmp_path):
    out = tmp_path / "hang.html"
    res = CliRunner().invoke(main, ["report", str(FIXTURES / "run-hang"), "--html", str(out)])
    assert res.exit_code == 0, res.output
    html = out.read_text()
    assert "HANG_RANK_MISSING_COLLECTIVE" in html and "Flight Recorder" in html


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("command", ["check", "diagnose", "attach", "run", "playbook"])
def test_other_commands_do_not_import_the_html_stack(command):
    code = (f"import sys, ddpdoctor.commands.{command}; "
            "bad = [m for m in ('bokeh', 'jinja2', 'ddpdoctor.report') if m in sys.modules]; "
            "print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_attach_html_goes_through_finish(tmp_path, monkeypatch):
    """`attach --html`: the same finish() path as --json; the diagnosis is attach's real
    analysis of 8 synthetic rank stacks (rank 3 stuck in its dataset's __getitem__)."""
    import ddpdoctor.attach.diagnosis as diagnosis

    stacks = bench_html._rank_stack
    from ddpdoctor.attach.analyze import analyze, group_stacks, headline
    from ddpdoctor.attach.classify import classify
    from ddpdoctor.attach.discover import Discovery

    rank_stacks = [stacks(r, 3) for r in range(8)]
    states = [classify(s) for s in rank_stacks]
    found = analyze(states, [])
    diag = diagnosis.HangDiagnosis(Discovery([], world_size=8), rank_stacks, states,
                                   group_stacks(states), found, headline(states, found))
    monkeypatch.setattr(diagnosis, "diagnose_hang", lambda *a, **k: diag)
    out = tmp_path / "hang.html"
    res = CliRunner().invoke(main, ["attach", "4711", "--json", str(tmp_path / "h.json"),
                                    "--html", str(out)])
    assert res.exit_code == 1, res.output
    data = json.loads((tmp_path / "h.json").read_text())
    assert [(f["id"], f["ranks"]) for f in data["findings"]] == [("HANG_DATALOADER", [3])]
    html = out.read_text()
    assert "Culprit: <strong>rank 3</strong>" in html
    assert "Stacks of every rank, merged" in html and "data.py:41" in html
