"""Probes and playbooks ship inside the wheel: build it, install it in a fresh venv, use it."""

import subprocess
import sys
import venv
import zipfile

import pytest
from jobs import REPO

pytestmark = [pytest.mark.slow]


@pytest.mark.timeout(300)
def test_wheel_ships_probes_and_playbooks_and_runs_from_a_fresh_venv(tmp_path):
    dist = tmp_path / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                    "--no-build-isolation", "-w", str(dist), str(REPO)],
                   check=True, timeout=240, cwd=tmp_path)
    wheel = next(dist.glob("ddpdoctor-*.whl"))
    names = zipfile.ZipFile(wheel).namelist()
    assert "ddpdoctor/playbooks/HANG_DATALOADER.md" in names
    assert "ddpdoctor/check/probes/connectivity.py" in names
    assert "ddpdoctor/cli.py" in names
    for init in sorted((REPO / "ddpdoctor").rglob("__init__.py")):
        if "__pycache__" in init.parts:
            continue
        rel = init.relative_to(REPO).as_posix()
        assert rel in names, f"{rel} missing from the wheel: setup.py discovery missed it"

    env_dir = tmp_path / "fresh"
    venv.create(env_dir, with_pip=True)
    py = env_dir / "bin" / "python"
    # torch is not needed for `playbook`; leaving it out keeps this test to seconds and
    # proves the torch-free commands really are torch-free once installed.
    subprocess.run([str(py), "-m", "pip", "install", "--quiet", "--no-deps", str(wheel),
                    "click", "rich", "markdown-it-py", "mdurl", "pygments"],
                   check=True, timeout=240)
    out = subprocess.run([str(env_dir / "bin" / "ddpdoctor"), "playbook", "--list"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "HANG_RANK_MISSING_COLLECTIVE" in out.stdout and "ENV_SHM_TOO_SMALL" in out.stdout
