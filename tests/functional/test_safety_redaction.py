"""Secrets never reach a report: a real 2-rank check with secret-looking variables that
differ across ranks, and a rendezvous port held by a process with ``--token`` on its
command line. The terminal view and the JSON are searched for the secret values."""

import json
import subprocess
import sys
import textwrap

import pytest
from jobs import run_job

from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Check, Report

pytestmark = [pytest.mark.slow]

SECRETS = {
    "MASTER_PASSWORD": ("hunter2-rank0-Zq81", "hunter2-rank1-Zq82"),
    "TORCH_HUB_TOKEN": ("tok-aaaa-77f1e", "tok-bbbb-77f2e"),
}
PORT_TOKEN = "SECRET-port-token-5d1c"


def _port_holder():
    code = ("import socket, sys, time\n"
            "s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen()\n"
            "print(s.getsockname()[1], flush=True); time.sleep(120)\n")
    proc = subprocess.Popen([sys.executable, "-c", code, "--token", PORT_TOKEN],
                            stdout=subprocess.PIPE, text=True)
    return proc, int(proc.stdout.readline())


@pytest.mark.timeout(150)
def test_check_report_masks_secret_env_values_and_command_lines(tmp_path):
    holder, port = _port_holder()
    out = tmp_path / "report.json"
    rank_env = {r: {name: values[r] for name, values in SECRETS.items()} for r in (0, 1)}
    script = textwrap.dedent(f"""
        from ddpdoctor.commands.common import finish
        from ddpdoctor.check.run import run_check
        report = run_check(2, ["env", "rendezvous"], "gloo", 90,
                           opts={{"master_addr": "127.0.0.1", "master_port": {port}}},
                           rank_env={rank_env!r})
        raise SystemExit(finish(report, {str(out)!r}, verbose=True))
    """)
    try:
        rc, terminal = run_job([sys.executable, "-c", script], 140)
    finally:
        holder.kill()
        holder.wait()
    assert rc == 1, terminal
    text = out.read_text()
    report = json.loads(text)
    ids = sorted((f["id"], f["ranks"]) for f in report["findings"])
    assert ids == [("ENV_PORT_IN_USE", []), ("ENV_VAR_MISMATCH", [1]),
                   ("ENV_VAR_MISMATCH", [1])], report["findings"]
    secrets = [v for values in SECRETS.values() for v in values] + [PORT_TOKEN]
    for where, content in (("terminal", terminal), ("json", text)):
        leaked = [s for s in secrets if s in content]
        assert not leaked, f"{where} shows {leaked}"
        assert "***" in content, where
    by_var = {f["evidence"]["variable"]: f["evidence"] for f in report["findings"]
              if f["id"] == "ENV_VAR_MISMATCH"}
    assert set(by_var) == set(SECRETS)
    # which ranks differ is still said, without the values
    assert by_var["MASTER_PASSWORD"]["ranks_by_value"] == {"*** (value 1)": "0",
                                                           "*** (value 2)": "1"}
    owner = next(f for f in report["findings"] if f["id"] == "ENV_PORT_IN_USE")
    assert owner["evidence"]["owner"]["pid"] == holder.pid
    assert "--token ***" in owner["evidence"]["owner"]["cmdline"]


def test_every_report_goes_through_the_catch_all():
    """Evidence written by any command (here by hand, as a new probe might) is masked in
    the JSON and the terminal view alike."""
    import io

    from rich.console import Console

    from ddpdoctor.core.render import render

    report = Report("run")
    report.add(Finding("RANK_CRASHED", "rank 0 died: HF_TOKEN=hf_abcdefgh123", ranks=[0],
                       evidence={"cmdline": "python train.py --api-key sk-live-999",
                                 "env": {"WANDB_API_KEY": "wandb-key-888"},
                                 "url": "https://bob:pa55word@example.com/x"}))
    report.checks.append(Check("launch", "torchrun --password=letmein-42", data={
        "argv": ["--secret", "xyzzy-31337"]}))
    buf = io.StringIO()
    render(report, console=Console(file=buf, width=200), verbose=True)
    for content in (buf.getvalue(), report.to_json()):
        for secret in ("hf_abcdefgh123", "sk-live-999", "wandb-key-888", "pa55word",
                       "letmein-42"):
            assert secret not in content
        assert "***" in content
    # the report object itself is untouched: analysis code keeps the real evidence
    assert report.findings[0].evidence["env"]["WANDB_API_KEY"] == "wandb-key-888"
