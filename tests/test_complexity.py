"""Decision trees stay small: ruff's McCabe check (C901) at 15 over the parts of the package
already split into one function per finding (issue #17). Add a folder here once it passes."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
MAX_COMPLEXITY = 15
CHECKED = ("ddpdoctor/logscan", "ddpdoctor/html", "ddpdoctor/plan",
           "ddpdoctor/commands/diagnose.py")


def _ruff() -> list[str]:
    beside = Path(sys.executable).with_name("ruff")
    if beside.exists():
        return [str(beside)]
    found = shutil.which("ruff")
    if not found:
        pytest.skip("ruff is not installed (pip install -e '.[test]')")
    return [found]


def _c901(paths: list[str]) -> subprocess.CompletedProcess:
    return subprocess.run(
        [*_ruff(), "check", "--no-cache", "--select", "C901", "--config",
         f"lint.mccabe.max-complexity={MAX_COMPLEXITY}", "--output-format", "concise", *paths],
        cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_no_function_above_the_complexity_limit():
    result = _c901(list(CHECKED))
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_check_fails_on_a_decision_tree(tmp_path: Path):
    branches = "\n".join(f"    if x == {i}:\n        return {i}" for i in range(MAX_COMPLEXITY + 1))
    tree = tmp_path / "tree.py"
    tree.write_text(f"def tree(x):\n{branches}\n    return -1\n")
    result = _c901([str(tree)])
    assert result.returncode == 1 and "C901" in result.stdout, result.stdout
