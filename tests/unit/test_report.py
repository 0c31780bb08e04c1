import json

from rich.console import Console

from ddpdoctor.core.findings import Finding
from ddpdoctor.core.render import render
from ddpdoctor.core.report import (
    EXIT_DOCTOR_FAILED,
    EXIT_FINDINGS,
    EXIT_HEALTHY,
    SCHEMA,
    Check,
    Report,
)


def _report() -> Report:
    r = Report("check", world={"world_size": 2, "backend": "gloo"})
    r.checks.append(Check("env", "2 ranks, torch 2.13.0", group="Environment"))
    r.checks.append(Check("shm", "/dev/shm 1 MiB", group="Environment"))
    r.checks.append(Check("gpu", "skipped: no NVIDIA driver", status="skipped", group="GPU"))
    r.add(Finding("ENV_SHM_TOO_SMALL", "/dev/shm is 1 MiB", ranks=[1],
                  evidence={"shm_bytes": 1048576}), check="shm")
    r.add(Finding("STRAGGLER", "rank 3 is slow", ranks=[3]))
    return r


def test_exit_codes():
    assert Report("x").exit_code == EXIT_HEALTHY
    warn = Report("x", findings=[Finding("STRAGGLER", "slow", ranks=[1])])
    assert warn.exit_code == EXIT_HEALTHY  # warnings are allowed in a healthy run
    assert _report().exit_code == EXIT_FINDINGS
    broken = _report()
    broken.doctor_error = "py-spy not found"
    assert broken.exit_code == EXIT_DOCTOR_FAILED


def test_json_follows_the_schema():
    data = json.loads(_report().to_json())
    assert data["schema"] == SCHEMA
    assert {"command", "started", "duration_s", "world", "findings", "probes"} <= set(data)
    assert data["world"] == {"world_size": 2, "backend": "gloo"}
    first = data["findings"][0]
    assert set(first) == {"id", "severity", "title", "ranks", "evidence", "playbook"}
    assert first["id"] == "ENV_SHM_TOO_SMALL" and first["ranks"] == [1]
    assert first["playbook"] == "ENV_SHM_TOO_SMALL"
    assert [f["severity"] for f in data["findings"]] == ["error", "warning"]
    assert data["probes"]["shm"]["status"] == "error"
    assert data["probes"]["gpu"]["status"] == "skipped"
    assert data["probes"]["env"]["status"] == "ok"
    assert data["exit_code"] == EXIT_FINDINGS


def _text(report: Report) -> str:
    console = Console(record=True, width=120, color_system=None)
    render(report, console=console)
    return console.export_text()


def test_terminal_view_is_flutter_doctor_style():
    out = _text(_report())
    lines = out.splitlines()
    assert lines[0].startswith("ddpdoctor check · 2 ranks · gloo")
    assert "[✓] env: 2 ranks, torch 2.13.0" in out
    assert "[✗] shm: /dev/shm 1 MiB" in out
    assert "[-] gpu: skipped: no NVIDIA driver" in out
    # the finding sits under its check, with its rank and a hint to the playbook
    shm_line = next(i for i, ln in enumerate(lines) if "[✗] shm" in ln)
    assert "ENV_SHM_TOO_SMALL" in lines[shm_line + 1] and "(rank 1)" in lines[shm_line + 1]
    assert "→ ddpdoctor playbook ENV_SHM_TOO_SMALL" in out
    # a finding that belongs to no check is listed under Findings
    assert "Findings" in out and "STRAGGLER" in out
    assert "1 error(s), 1 warning(s)" in lines[-1]


def test_terminal_view_healthy_and_doctor_failure():
    assert "No issues found!" in _text(Report("check"))
    r = Report("attach")
    r.doctor_error = "no such process: 999999"
    assert "ddpdoctor could not run: no such process: 999999" in _text(r)


def test_long_evidence_is_cut_in_the_terminal_but_whole_in_json():
    r = Report("diagnose")
    lines = [f"line {i}" for i in range(50)]
    r.add(Finding("RANK_CRASHED", "rank 1 died", ranks=[1], evidence={"stack": lines}))
    out = _text(r)
    assert "line 11" in out and "line 12" not in out and "38 more (see --json)" in out
    assert json.loads(r.to_json())["findings"][0]["evidence"]["stack"] == lines


def test_report_round_trips_through_json():
    original = _report().finish()
    copy = Report.from_dict(json.loads(original.to_json()))
    assert copy.to_dict() == original.to_dict()


def test_failed_check_without_finding_is_not_no_issues():
    r = Report("run")
    r.checks.append(Check("job", "hung; no stacks could be read", status="error"))
    out = _text(r)
    assert "No issues found" not in out
    assert "1 check(s) failed without a diagnosis: job" in out


def test_a_check_in_error_without_a_finding_is_not_healthy():
    from ddpdoctor.core.report import Check, Report

    report = Report("check")
    report.checks.append(Check("bandwidth", "no data from rank(s) 1", status="error"))
    assert report.exit_code == 1
    report.checks[0].status = "skipped"
    assert report.exit_code == 0
