"""`train --checkpoint-dir DIR --save-every N` where no rank could save: one line, exit 2,
before anything is launched (not a PermissionError traceback from every rank)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).parents[2]


def _train(monkeypatch, *args: str):
    from ddpdoctor.commands import train

    def no_launch(*a, **k):
        raise AssertionError(f"a rank was launched: {a}")

    monkeypatch.setattr(train.subprocess, "Popen", no_launch)
    return CliRunner().invoke(train.command, ["--save-every", "1", *args])


def test_a_file_as_checkpoint_dir_is_refused(monkeypatch, tmp_path):
    f = tmp_path / "ckpt"
    f.write_text("not a dir\n")
    result = _train(monkeypatch, "--checkpoint-dir", str(f))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"ddpdoctor train: --checkpoint-dir {f}: is a file, not a directory"]


def test_a_checkpoint_dir_under_a_file_is_refused(monkeypatch, tmp_path):
    f = tmp_path / "passwd"
    f.write_text("root:x:0:0\n")
    result = _train(monkeypatch, "--checkpoint-dir", f"{f}/a/b")
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"ddpdoctor train: --checkpoint-dir {f}/a/b: cannot be created: {f} is a file"]


def test_a_dangling_symlink_as_checkpoint_dir_is_refused(monkeypatch, tmp_path):
    link = tmp_path / "ckpt"
    link.symlink_to(tmp_path / "gone")
    result = _train(monkeypatch, "--checkpoint-dir", str(link))
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        f"ddpdoctor train: --checkpoint-dir {link}: {link} is a dangling symlink"]


def test_a_checkpoint_dir_on_proc_is_refused_even_as_root(monkeypatch):
    """/proc's permission bits let root in; mkdir there still fails. The write is tried."""
    if not os.path.isdir("/proc/self"):
        pytest.skip("no procfs here")
    result = _train(monkeypatch, "--checkpoint-dir", "/proc/ddpdoctor-ckpt/x")
    assert result.exit_code == 2
    line, = result.output.strip().splitlines()
    assert line.startswith("ddpdoctor train: --checkpoint-dir /proc/ddpdoctor-ckpt/x: "
                           "cannot be created in /proc (")
    assert line.endswith("); the ranks could not save a checkpoint")


def test_a_writable_checkpoint_dir_passes_and_nothing_is_left_behind(monkeypatch, tmp_path):
    result = _train(monkeypatch, "--checkpoint-dir", str(tmp_path / "new" / "ckpt"),
                    "--dry-run")
    assert result.exit_code == 0, result.output
    assert "--checkpoint-dir" in result.output
    assert list(tmp_path.iterdir()) == []  # the probe is gone; the first save makes it
    existing = tmp_path / "ckpt"
    existing.mkdir()
    result = _train(monkeypatch, "--checkpoint-dir", str(existing), "--dry-run")
    assert result.exit_code == 0, result.output
    assert list(existing.iterdir()) == []


def test_the_rank_side_refuses_too(tmp_path):
    """`torchrun -m ddpdoctor.train` without the CLI: each rank refuses at its start."""
    from ddpdoctor.train.options import configs, worker_parser

    f = tmp_path / "ckpt"
    f.write_text("")
    args = worker_parser().parse_args(["--checkpoint-dir", str(f), "--save-every", "1"])
    with pytest.raises(ValueError, match="is a file, not a directory"):
        configs(vars(args))


def _unprivileged():
    """preexec_fn: this child keeps its uid but loses every capability, so permission bits
    apply to it as to any user (root: an empty bounding set, then exec)."""
    if os.geteuid() != 0:
        return
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0:  # PR_CAPBSET_DROP, up to the last cap
            break


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_a_checkpoint_dir_the_user_cannot_write_is_refused_before_launch(tmp_path):
    ckpt = tmp_path / "ckpt"
    ckpt.mkdir()
    ckpt.chmod(0o500)  # r-x: the user may look, not save
    probe = subprocess.run([sys.executable, "-c", "import sys; open(sys.argv[1], 'w')",
                            str(ckpt / "x")], capture_output=True, timeout=60,
                           preexec_fn=_unprivileged)
    if probe.returncode == 0:
        ckpt.chmod(0o700)
        pytest.skip("cannot run a child without the privilege to write anywhere here")
    # Popen replaced: if the CLI launched torchrun, the child says so and exits 99.
    code = ("import subprocess, sys\n"
            "def launched(*a, **k):\n"
            "    print('LAUNCHED', flush=True); sys.exit(99)\n"
            "subprocess.Popen = launched\n"
            "from ddpdoctor.cli import main\n"
            "sys.argv = ['ddpdoctor', 'train', *sys.argv[1:]]\n"
            "main()\n")
    try:
        p = subprocess.run([sys.executable, "-c", code, "--checkpoint-dir", str(ckpt),
                            "--save-every", "1"], capture_output=True, text=True,
                           timeout=120, cwd=ROOT, stdin=subprocess.DEVNULL,
                           preexec_fn=_unprivileged)
    finally:
        ckpt.chmod(0o700)
    assert p.returncode == 2, (p.stdout, p.stderr)
    assert "LAUNCHED" not in p.stdout
    assert p.stderr.strip().splitlines() == [
        f"ddpdoctor train: --checkpoint-dir {ckpt}: cannot write there (Permission denied); "
        "the ranks could not save a checkpoint"]
