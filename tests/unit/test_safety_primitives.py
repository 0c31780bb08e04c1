"""The shared safety primitives: safe file creation, redaction, finite numeric options."""

from __future__ import annotations

import os

import click
import pytest
from click.testing import CliRunner

from ddpdoctor.commands.common import FiniteFloat
from ddpdoctor.core import redact, safefile


def test_write_atomic_replaces_a_symlink_instead_of_following_it(tmp_path):
    victim = tmp_path / "victim"
    victim.write_text("keep")
    link = tmp_path / "heartbeat.json"
    link.symlink_to(victim)
    safefile.write_atomic(link, "{}")
    assert victim.read_text() == "keep"
    assert not link.is_symlink() and link.read_text() == "{}"
    assert oct(link.stat().st_mode & 0o777) == oct(0o600)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_touch_refuses_symlink_and_fifo(tmp_path):
    target = tmp_path / "elsewhere"
    link = tmp_path / "req"
    link.symlink_to(target)
    with pytest.raises(OSError):
        safefile.touch(link)
    assert not target.exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        safefile.touch(fifo)  # no reader: ENXIO at once (O_NONBLOCK), never a wait
    with pytest.raises(safefile.UnsafePathError):
        safefile.open_regular(fifo, os.O_RDONLY)  # opens at once, refused as not regular
    safefile.touch(tmp_path / "ok")
    assert (tmp_path / "ok").is_file()


def test_open_append_is_line_buffered(tmp_path):
    path = tmp_path / "out.log"
    f = safefile.open_append(path)
    f.write("one line\n")
    assert path.read_text() == "one line\n"  # visible before close
    f.close()


@pytest.mark.parametrize("name,secret", [
    ("HF_TOKEN", True), ("MASTER_PASSWORD", True), ("AWS_SECRET_ACCESS_KEY", True),
    ("WANDB_API_KEY", True), ("--api-key", True), ("my.credentials", True),
    ("NCCL_IB_PKEY", False), ("MASTER_PORT", False), ("PWD", False), ("OMP_NUM_THREADS", False),
    ("keys", False), ("tokens_per_s", False), ("key", False), ("signature", False),
    ("DB_PASS", True), ("PRIVATE_KEY", True), ("'HF_TOKEN'", True),
])
def test_secret_names(name, secret):
    assert redact.is_secret_name(name) is secret


def test_redact_argv_text_and_nested():
    assert redact.argv(["t.py", "--token", "abc", "--api-key=xyz", "--lr", "1", "HF_TOKEN=q"]) \
        == ["t.py", "--token", "***", "--api-key=***", "--lr", "1", "HF_TOKEN=***"]
    line = "python t.py --token abc123 MASTER_PASSWORD=hunter2 https://u:pw@h/x; token expired"
    out = redact.text(line)
    for secret in ("abc123", "hunter2", "pw@"):
        assert secret not in out
    assert "token expired" in out
    printed = redact.text("environ({'HF_TOKEN': 'hf_abc123', 'PATH': '/usr/bin'})")
    assert "hf_abc123" not in printed and "/usr/bin" in printed
    assert redact.text("wait key: rank_3_done timed out") == "wait key: rank_3_done timed out"
    nested = redact.deep({"env": {"HF_TOKEN": "x1", "A": "b"}, "cmd": ["--password=zz9"]})
    assert nested == {"env": {"HF_TOKEN": "***", "A": "b"}, "cmd": ["--password=***"]}


@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "NaN", "-1", "0", "x"])
def test_finite_float_refuses_with_exit_2(value):
    @click.command()
    @click.option("--t", type=FiniteFloat(min=0, min_open=True), default=1.0)
    def cmd(t: float) -> None:
        click.echo(t)

    result = CliRunner().invoke(cmd, ["--t", value])
    assert result.exit_code == 2, result.output
    assert CliRunner().invoke(cmd, ["--t", "2.5"]).output.strip() == "2.5"
