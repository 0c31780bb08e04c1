"""`ddpdoctor scale` without torch processes: options, launch lines, errors, exit codes."""

import json
import subprocess
import sys

import pytest
from jobs import ddpdoctor_cmd

from ddpdoctor.scale.runner import with_nproc
from ddpdoctor.scale.sweep import parse_nproc_list, rank_batches


def scale(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*ddpdoctor_cmd(), "scale", *args], capture_output=True,
                          text=True, timeout=timeout)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("text,why", [
    ("1,x", "not all integers"), ("1", "at least two"), ("0,2", "1..4096"),
    ("2,2", "appears twice"), ("", "expected world sizes"), ("1,,2", "expected world sizes"),
])
def test_bad_nproc_list(text, why):
    with pytest.raises(ValueError, match=why):
        parse_nproc_list(text)
    r = scale("--nproc-list", text)
    assert r.returncode == 2
    assert why in r.stderr and len(r.stderr.strip().splitlines()) == 1


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_usage_errors_exit_2_with_one_line():
    for args, why in [
        (["--mode", "strong", "--global-batch", "6", "--nproc-list", "1,4"], "split evenly"),
        (["--inject", "straggler@3", "--nproc-list", "1,2"], "rank 3 is in none"),
        (["--inject", "nope", "--nproc-list", "1,2"], "unknown injection"),
        (["--warmup-steps", "10", "--steps", "10"], "leaves none"),
        (["--min-efficiency", "nan"], "finite"),
    ]:
        r = scale(*args)
        assert r.returncode == 2, (args, r.stderr)
        assert why in r.stderr, (args, r.stderr)


def test_rank_batches():
    assert rank_batches([1, 2, 4], "weak", 8, None) == {1: 8, 2: 8, 4: 8}
    assert rank_batches([1, 2, 4], "strong", 8, 32) == {1: 32, 2: 16, 4: 8}


@pytest.mark.parametrize("argv,want", [
    (["torchrun", "train.py", "--lr", "1"], ["torchrun", "--nproc-per-node=4", "train.py",
                                             "--lr", "1"]),
    (["torchrun", "--standalone", "--nproc-per-node", "8", "train.py", "--nproc-per-node",
      "x"], ["torchrun", "--standalone", "--nproc-per-node=4", "train.py",
             "--nproc-per-node", "x"]),
    (["/v/bin/torchrun", "--nproc_per_node=2", "-m", "pkg"],
     ["/v/bin/torchrun", "--nproc-per-node=4", "-m", "pkg"]),
    (["python", "-m", "torch.distributed.run", "--standalone", "t.py"],
     ["python", "-m", "torch.distributed.run", "--nproc-per-node=4", "--standalone", "t.py"]),
    (["./launch.sh", "--nproc-per-node", "2"], ["./launch.sh", "--nproc-per-node", "2"]),
])
def test_with_nproc_sets_torchruns_world_only(argv, want):
    assert with_nproc(argv, 4) == want


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_a_command_that_prints_no_throughput_is_exit_3(tmp_path):
    out = tmp_path / "r.json"
    r = scale("--nproc-list", "1,2", "--json", str(out), "--", sys.executable, "-c",
              "print('loss 3.1')")
    assert r.returncode == 3, r.stderr
    rep = json.loads(out.read_text())
    assert "printed no 'ddpdoctor-throughput" in rep["doctor_error"]
    assert rep["exit_code"] == 3 and rep["findings"] == []


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_a_command_that_changes_its_unit_is_exit_3(tmp_path):
    code = ("import os; u = 'samples/s' if os.environ['DDPDOCTOR_SCALE_NPROC'] == '1' "
            "else 'tokens/s'; print('ddpdoctor-throughput: 10', u)")
    r = scale("--nproc-list", "1,2", "--warmup-steps", "0", "--", sys.executable, "-c", code)
    assert r.returncode == 3
    assert "printed samples/s at 1 rank but tokens/s at 2 ranks" in r.stdout + r.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_a_failing_command_is_never_healthy(tmp_path):
    out = tmp_path / "r.json"
    code = "import os,sys; sys.exit(int(os.environ['DDPDOCTOR_SCALE_NPROC']) + 3)"
    r = scale("--nproc-list", "1,2", "--json", str(out), "--", sys.executable, "-c", code)
    assert r.returncode == 1
    rep = json.loads(out.read_text())
    [f] = rep["findings"]
    assert f["id"] == "UNRECOGNIZED_FAILURE" and f["evidence"]["exit_code"] == 4
    assert rep["probes"]["2 ranks"]["status"] == "skipped"  # no baseline, no comparison
    assert "FAILED (exit code 4)" in r.stderr


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_a_crash_is_triaged_and_the_rest_still_measured(tmp_path):
    out = tmp_path / "r.json"
    code = ("import os; n = int(os.environ['DDPDOCTOR_SCALE_NPROC'])\n"
            "if n == 2:\n    import torch; torch.empty(1 << 50, dtype=torch.uint8)\n"
            "for i in range(3): print(f'ddpdoctor-throughput: {100 * n} samples/s')")
    r = scale("--nproc-list", "1,2,4", "--warmup-steps", "0", "--json", str(out), "--",
              sys.executable, "-c", code)
    assert r.returncode == 1, r.stderr
    rep = json.loads(out.read_text())
    assert [f["id"] for f in rep["findings"]] == ["OOM"]
    assert rep["findings"][0]["evidence"]["world"] == 2
    assert rep["probes"]["4 ranks"]["data"]["efficiency"] == pytest.approx(1.0)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_a_run_past_its_deadline_is_killed_and_failed(tmp_path):
    out = tmp_path / "r.json"
    r = scale("--nproc-list", "1,2", "--run-timeout", "1", "--json", str(out), "--",
              sys.executable, "-c", "import time; time.sleep(60)", timeout=30)
    assert r.returncode == 1
    [f] = json.loads(out.read_text())["findings"]
    assert f["id"] == "UNRECOGNIZED_FAILURE" and "did not finish" in f["title"]


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_help_teaches_and_imports_no_torch():
    code = ("import sys; from click.testing import CliRunner; from ddpdoctor.cli import main\n"
            "r = CliRunner().invoke(main, ['scale', '--help']); print(r.output)\n"
            "assert 'torch' not in sys.modules, 'torch imported'")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    for text in ("--nproc-list", "weak", "strong", "ddpdoctor-throughput:",
                 "DDPDOCTOR_SCALE_NPROC", "SCALING_COMM_BOUND", "Exit code"):
        assert text in r.stdout
