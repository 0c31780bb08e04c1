"""`ddpdoctor plan` as a user runs it: the table, --json, no torch, usage errors."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jobs import REPO

PLAN_7B = ["plan", "--params", "7e9", "--nproc", "8", "--gpu-mem", "80G"]


def _run(*args: str, importtime: bool = False) -> subprocess.CompletedProcess:
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "ddpdoctor", *args], cwd=REPO,
                          capture_output=True, text=True, timeout=60)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_7b_on_8_gpus_prints_the_table_fast_without_torch() -> None:
    t0 = time.monotonic()
    proc = _run(*PLAN_7B, importtime=True)
    elapsed = time.monotonic() - t0
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = proc.stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("strategy"))
    # zero1 is the cheapest that fits; ddp (16 B/param = 104 GiB of states) does not
    assert lines[header + 2].split()[:2] == ["zero1", "0-7"]
    ddp = next(line for line in lines if line.startswith("ddp "))
    assert ddp.endswith("NO")
    assert "Cheapest that fits in 80 GiB: zero1" in proc.stdout
    assert "ddpdoctor train --nproc 8 --strategy zero1" in proc.stdout
    imported = [line.split("|")[-1].strip() for line in proc.stderr.splitlines()
                if line.startswith("import time:")]
    assert "click" in imported and not any(m == "torch" or m.startswith("torch.")
                                           for m in imported)
    assert elapsed < 5  # about 0.2 s alone; a loaded test machine gets slack


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_json_report_holds_the_same_table(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    proc = _run(*PLAN_7B, "--json", str(out))
    assert proc.returncode == 0
    report = json.loads(out.read_text())
    assert report["schema"] == "ddpdoctor.report/1" and report["command"] == "plan"
    data = report["probes"]["plan"]["data"]
    assert data["best"] == "zero1" and data["gpu_mem"] == 80 * 2**30
    rows = {s["strategy"]: s for s in data["strategies"]}
    assert rows["ddp"]["fits"] is False and rows["zero1"]["fits"] is True
    zero1 = rows["zero1"]["ranks"][0]
    # mixed precision: 2 + 2 bytes whole, 12 bytes of optimizer state over 8 ranks
    assert zero1["weights"] + zero1["grads"] == pytest.approx(4 * 7e9)
    assert zero1["optimizer"] == pytest.approx(12 * 7e9 / 8)
    assert report["findings"] == [] and report["exit_code"] == 0


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_nothing_fits_is_a_predicted_oom_warning(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    proc = _run("plan", "--params", "70B", "--nproc", "2", "--gpu-mem", "24G",
                "--json", str(out))
    assert proc.returncode == 0  # a warning: nothing crashed yet
    assert "Nothing fits" in proc.stdout
    report = json.loads(out.read_text())
    (finding,) = report["findings"]
    assert finding["id"] == "OOM" and finding["severity"] == "warning"
    assert report["probes"]["plan"]["data"]["best"] is None


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_preset_with_a_strategy_list() -> None:
    proc = _run("plan", "--size", "tiny", "--nproc", "2", "--strategy", "ddp,zero3",
                "--precision", "fp32", "--batch-size", "8", "--gpu-mem", "8G")
    assert proc.returncode == 0, proc.stderr
    assert "--strategy ddp --size tiny --batch-size 8 --precision fp32" in proc.stdout
    assert "zero1" not in proc.stdout


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_without_gpu_memory_fit_is_unknown_and_says_so() -> None:
    proc = _run("plan", "--params", "1B", "--nproc", "2")
    assert proc.returncode == 0
    assert "pass --gpu-mem" in proc.stdout


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_workspace_and_reserve_take_zero_and_land_in_the_setup(tmp_path: Path) -> None:
    out = tmp_path / "plan.json"
    proc = _run(*PLAN_7B, "--workspace", "0", "--reserve", "0", "--json", str(out))
    assert proc.returncode == 0, proc.stderr
    setup = json.loads(out.read_text())["probes"]["plan"]["data"]["setup"]
    assert (setup["workspace"], setup["reserve"]) == (0, 0)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("args,words", [
    (["--params", "7e9", "--gpu-mem", "nan"], "not a size"),
    (["--params", "7e9", "--gpu-mem", "80X"], "unknown unit"),
    (["--params", "7e9", "--gpu-mem", "-80G"], "not a size"),
    (["--params", "nan"], "not a count"),
    (["--params", "7e9", "--margin", "inf"], "finite"),
    (["--params", "7e9", "--nproc", "0"], "0"),
    (["--params", "7e9", "--strategy", "zero4"], "unknown strategy"),
    (["--params", "7e9", "--size", "tiny"], "exactly one of"),
    ([], "exactly one of"),
    (["--params", "1000"], "smaller than the embeddings"),
    (["--params", "7e9", "--workspace", "-1M"], "not a size"),
    (["--params", "7e9", "--gpu-mem", "0"], "positive"),
])
def test_bad_input_is_a_one_line_usage_error(args: list[str], words: str) -> None:
    proc = _run("plan", *args)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert words in proc.stderr
    assert "Traceback" not in proc.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_model_factory_from_the_current_directory() -> None:
    """--model imports the user's module as `python -m` would, from the working directory,
    and builds it on the meta device."""
    proc = subprocess.run([str(Path(sys.executable).parent / "ddpdoctor"), "plan", "--model",
                           "test_plan_model:tiny_gpt", "--seq", "128", "--nproc", "2",
                           "--gpu-mem", "8G", "--strategy", "ddp"],
                          cwd=REPO / "tests" / "unit", capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "Cheapest that fits in 8 GiB: ddp" in proc.stdout
    bad = _run("plan", "--model", "ddpdoctor.train.model:GPT")
    assert bad.returncode == 2 and "GPT() raised TypeError" in bad.stderr
