"""tools/gpu_verify.py (issue #30): the step runner's deadlines, the result writers, the
analysis of a GPU run's output on recorded data, and the whole script on this CPU machine
(every GPU step skipped with its reason, exit 0).

No GPU is needed. Steps here are Python functions (no processes), except two tests marked
slow: the process-group kill, and the one run of the script (it starts one interpreter
that imports torch).
"""

from __future__ import annotations

import json
import os
import sys
import threading
from pathlib import Path

import pytest

# tools/ is no package and is not installed: its modules are found through sys.path
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tools"))
import gpu_verify
import gpu_verify_core as core
from gpu_verify_core import FAIL, PASS, SKIPPED, Session, Step, StepFailed

# `nvidia-smi -q` in the shape an H100 machine prints it (driver 580.159.04, as the device
# tool's machine notes record; to be replaced by the first real capture of `make gpu-verify`),
# cut to the sections the comparison reads, plus a second GPU that must not be read.
SMI_Q = """
==============NVSMI LOG==============

Timestamp                                 : Thu Nov 13 10:00:00 2026
Driver Version                            : 580.159.04
CUDA Version                              : 13.0

Attached GPUs                             : 2
GPU 00000000:18:00.0
    Product Name                          : NVIDIA H100 80GB HBM3
    Product Brand                         : NVIDIA
    PCI
        Bus                               : 0x18
        Bus Id                            : 00000000:18:00.0
    FB Memory Usage
        Total                             : 81559 MiB
        Reserved                          : 552 MiB
        Used                              : 1 MiB
    BAR1 Memory Usage
        Total                             : 131072 MiB
    ECC Mode
        Current                           : Enabled
        Pending                           : Enabled

GPU 00000000:2A:00.0
    Product Name                          : NVIDIA A100-SXM4-40GB
    FB Memory Usage
        Total                             : 40960 MiB
"""

NVML = {"driver_version": "580.159.04",
        "devices": [{"index": 0, "name": "NVIDIA H100 80GB HBM3",
                     "pci_bus_id": "00000000:18:00.0", "memory_total": 81559 * 2**20,
                     "ecc_mode_current": True}]}


def session(tmp_path: Path, gpu_missing: str | None = None) -> Session:
    s = Session(out=tmp_path, python=sys.executable)
    s.gpu_missing = gpu_missing
    return s


def ok(ctx) -> None:
    ctx.numbers["ran"] = 1


# --- the runner ----------------------------------------------------------------------


def test_a_step_past_its_deadline_is_stopped_and_the_next_one_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(core, "WRITE_RESERVE_S", 0.0)
    monkeypatch.setattr(core, "CANCEL_GRACE_S", 0.1)  # the step ignores the cancel anyway
    release = threading.Event()

    def hangs(ctx) -> None:
        ctx.numbers["before"] = 7
        release.wait(30)

    steps = [Step("hung", "hangs", hangs, 0.3), Step("after", "runs", ok, 5)]
    try:
        res = core.run_steps(steps, session(tmp_path), total_s=20)
    finally:
        release.set()
    assert [r.status for r in res] == [FAIL, PASS]
    assert res[0].reason == "deadline: the step ran past its 0 s and was stopped"
    assert res[0].numbers == {"before": 7}  # what it measured before it hung is kept
    assert res[1].numbers == {"ran": 1}


def test_a_failing_step_is_recorded_and_the_others_run(tmp_path):
    def bug(ctx) -> None:
        raise KeyError("probes")

    def check(ctx) -> None:
        raise StepFailed("expected OOM, found: none")

    def cannot(ctx) -> None:
        raise core.StepSkipped("nvidia-smi not found")

    steps = [Step("bug", "", bug, 5), Step("check", "", check, 5),
             Step("cannot", "", cannot, 5), Step("last", "", ok, 5)]
    res = core.run_steps(steps, session(tmp_path), total_s=60)
    assert [(r.status, r.reason) for r in res] == [
        (FAIL, "KeyError: 'probes'"), (FAIL, "expected OOM, found: none"),
        (SKIPPED, "nvidia-smi not found"), (PASS, "")]


def test_the_total_deadline_holds(tmp_path):
    """A fake clock: each step spends 60 s; with 120 s in all (5 kept for writing) the third
    step is not started and says why, and no step is given more than what is left."""
    now = [1000.0]
    budgets = []

    def spends(ctx) -> None:
        budgets.append(round(ctx.deadline - ctx.clock()))
        now[0] += 60

    steps = [Step(f"s{i}", "", spends, 100) for i in range(3)]
    res = core.run_steps(steps, session(tmp_path), total_s=120, clock=lambda: now[0])
    assert [r.status for r in res] == [PASS, PASS, SKIPPED]
    assert budgets == [100, 55]
    assert res[2].reason == "total deadline: 0 s left of 120 s"


def test_hung_steps_cannot_outlast_the_total_deadline(tmp_path, monkeypatch):
    """Real time: each step would hang 30 s on a budget of 20; the total is 1 s, so the
    first is stopped at 1 s and the rest are not started (the shortest step 0.5 s here)."""
    monkeypatch.setattr(core, "WRITE_RESERVE_S", 0.0)
    monkeypatch.setattr(core, "MIN_STEP_S", 0.5)
    monkeypatch.setattr(core, "CANCEL_GRACE_S", 0.1)
    release = threading.Event()
    steps = [Step(f"h{i}", "", lambda ctx: release.wait(30), 20) for i in range(3)]
    try:
        res = core.run_steps(steps, session(tmp_path), total_s=1.0)
    finally:
        release.set()
    assert [r.status for r in res] == [FAIL, SKIPPED, SKIPPED]
    assert res[0].reason.startswith("deadline: the step ran past its 1 s")
    assert res[1].reason.startswith("total deadline: 0 s left of 1 s")


def test_gpu_steps_are_skipped_with_the_reason_when_there_is_no_gpu(tmp_path):
    called = []
    steps = [Step("env", "", ok, 5, needs_gpu=False),
             Step("gpu", "", lambda ctx: called.append(1), 5)]
    res = core.run_steps(steps, session(tmp_path, "torch.cuda.is_available() is False"), 60)
    assert [r.status for r in res] == [PASS, SKIPPED]
    assert res[1].reason == "no GPU: torch.cuda.is_available() is False"
    assert called == []


@pytest.mark.slow
def test_a_command_past_its_timeout_is_killed_with_its_children(tmp_path):
    """The one process test of the runner: the command starts a child and both sleep; at
    the timeout the whole process group goes, not only the command."""
    pid_file = tmp_path / "child.pid"
    code = ("import subprocess, sys, time; p = subprocess.Popen([sys.executable, '-c', "
            "'import time; time.sleep(60)']); open(sys.argv[1], 'w').write(str(p.pid)); "
            "time.sleep(60)")
    s = session(tmp_path)
    ctx = core.StepContext(s, Step("kill", "", ok, 30), deadline=core.time.monotonic() + 30)
    with pytest.raises(StepFailed, match=r"ran past 3 s and was killed"):
        ctx.run([sys.executable, "-c", code, str(pid_file)], timeout=3)
    child = int(pid_file.read_text())
    # SIGKILL is sent to the group at once; on a loaded machine the kernel takes a moment
    # to reap the orphaned child: look until it is gone, for up to 10 s.
    for _ in range(100):
        if not _alive(child):
            break
        core.time.sleep(0.1)
    assert not _alive(child)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in state  # a zombie nobody reaped has already died


# --- the writers ---------------------------------------------------------------------


def results() -> list[core.StepResult]:
    return [core.StepResult("env", "versions", PASS, "", 2.0, {"torch": "2.11.0"}, ()),
            core.StepResult("watch_oom", "oom", FAIL, "expected OOM, found: a|b", 31.5,
                            {"exit": 1, "nested": {"x": 1}}, ("oom/events.jsonl",)),
            core.StepResult("watch_nan", "nan", SKIPPED, "no GPU: none", 0.0, {}, ())]


def test_result_json_and_markdown(tmp_path):
    facts = {"date": "2026-11-26 15:00 UTC", "device": "NVIDIA H100 80GB HBM3",
             "driver": "580.159.04", "cuda": "13.0", "nccl": "2.27.7", "torch": "2.11.0",
             "python": "3.12.3"}
    data = core.result_json(results(), facts, 480, 40.2)
    core.write_results(tmp_path, data)
    back = json.loads((tmp_path / "result.json").read_text())
    assert back["schema"] == "ddpdoctor.gpu-verify/1"
    assert back["counts"] == {"pass": 1, "fail": 1, "skipped": 1}
    assert back["steps"][1]["files"] == ["oom/events.jsonl"]
    assert back["steps"][1]["numbers"]["nested"] == {"x": 1}
    md = (tmp_path / "RESULT.md").read_text().splitlines()
    assert md[2] == ("2026-11-26 15:00 UTC · device: NVIDIA H100 80GB HBM3 · driver "
                     "580.159.04 · CUDA 13.0 · NCCL 2.27.7 · torch 2.11.0 · Python 3.12.3")
    assert md[4] == "1 pass, 1 fail, 1 skipped in 40 s (deadline 480 s)"
    assert "| env | pass | 2.0 | torch=2.11.0 |" in md
    # a pipe in a reason cannot break the table; nested numbers stay in the JSON only
    assert "| watch_oom | fail | 31.5 | expected OOM, found: a\\|b — exit=1 |" in md
    assert "| watch_nan | skipped | 0.0 | no GPU: none |" in md


# --- analysis on recorded data -------------------------------------------------------


def test_nvidia_smi_fields_first_gpu_only():
    f = core.smi_fields(SMI_Q)
    assert f["Driver Version"] == "580.159.04"
    assert f["Product Name"] == "NVIDIA H100 80GB HBM3"
    assert f["FB Memory Usage/Total"] == "81559 MiB"
    assert f["BAR1 Memory Usage/Total"] == "131072 MiB"
    assert f["PCI/Bus Id"] == "00000000:18:00.0"
    assert f["ECC Mode/Current"] == "Enabled"


def test_nvml_against_nvidia_smi():
    cmp = core.compare_nvml_smi(NVML, SMI_Q)
    assert {k: v["match"] for k, v in cmp.items()} == {
        "driver_version": True, "name": True, "memory_total_mib": True, "ecc_current": True,
        "pci_bus_id": True}
    other = dict(NVML, driver_version="550.54.15")
    assert core.compare_nvml_smi(other, SMI_Q)["driver_version"] == {
        "nvml": "550.54.15", "nvidia_smi": "580.159.04", "match": False}


def test_findings_of_an_events_file(tmp_path):
    ev = tmp_path / "events.jsonl"
    ev.write_text('{"kind": "note", "text": "x"}\nnot json\n'
                  '{"id": "GRAD_NONFINITE", "ranks": [0], "step": 2, "kind": "finding"}\n')
    found = core.findings_in_events(ev)
    assert core.finding(found, "GRAD_NONFINITE")["ranks"] == [0]
    with pytest.raises(StepFailed, match="expected OOM, found: GRAD_NONFINITE"):
        core.finding(found, "OOM")
    with pytest.raises(StepFailed, match="expected OOM, found: none"):
        core.finding(core.findings_in_events(tmp_path / "absent.jsonl"), "OOM")


def test_bench_numbers_from_the_benchmarks_summary():
    # the H200's 8x4096 line of bench-watch-overhead.txt, as the benchmark's --json holds it
    n = core.bench_numbers({"step_ms": 19.72, "overhead": 0.0010, "low": 0.0008,
                            "high": 0.0013, "cpu_us": -184.2, "check_extra": 0.066,
                            "findings": 0})
    assert n == {"bench_step_ms": 19.72, "watch_overhead": 0.001, "watch_overhead_low": 0.0008,
                 "watch_overhead_high": 0.0013, "watch_cpu_us_per_step": -184,
                 "check_step_extra": 0.066}


# --- steps on recorded output (ctx.run faked: no processes) ---------------------------


class Recorded(core.StepContext):
    """A step context whose commands do not run: ``answer(cmd, env)`` plays the command
    (writes the files it would write) and returns (rc, stdout, stderr)."""

    def __init__(self, sess: Session, step: Step, answer) -> None:
        super().__init__(sess, step, deadline=core.time.monotonic() + 60)
        self.answer = answer
        self.cmds: list[tuple[str, ...]] = []

    def run(self, cmd, timeout=None, env=None, log=None) -> core.Ran:
        cmd = tuple(str(c) for c in cmd)
        self.cmds.append(cmd)
        rc, out, err = self.answer(cmd, env or {})
        return core.Ran(cmd, rc, out, err, 0.1)


def _step(name: str) -> Step:
    return next(s for s in gpu_verify.STEPS if s.name == name)


H200 = Path(__file__).parents[1] / "fixtures" / "gpu_verify" / "h200-2026-11-27"


def _h200_trainer(bench_high: float = 0.0013):
    """Plays the H200 run: the trainer's JSON logs, the series file, the benchmark."""
    def answer(cmd, env):
        if "train" in cmd:
            jlog = Path(cmd[cmd.index("--json-log") + 1])
            if "--strategy" in cmd:
                jlog.write_text((H200 / "train-strategies.jsonl").read_text())
            elif "--watch" in cmd:
                jlog.write_text((H200 / "train-watched.jsonl").read_text())
                Path(env["DDPDOCTOR_EVENTS"]).with_name("watch-series-rank0.jsonl").write_text(
                    (H200 / "watch-series-rank0.jsonl").read_text())
            else:
                jlog.write_text((H200 / "train-plain.jsonl").read_text())
            return 0, "", ""
        if "bench_watch_overhead.py" in " ".join(cmd):
            Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(
                {"step_ms": 19.72, "overhead": 0.0010, "low": 0.0008, "high": bench_high,
                 "cpu_us": -184.2, "check_extra": 0.066}))
            return 0, "", ""
        if cmd[1] == "-c" and "get_device_capability" in cmd[2]:   # the workspace probe
            return 0, (H200 / "workspace.out").read_text(), ""
        return 0, json.dumps(NVML) + "\n", ""   # the NVML reader
    return answer


def test_strategies_step_on_the_h200_run_with_cublas_workspaces(tmp_path):
    ctx = Recorded(session(tmp_path), _step("train_strategies"), _h200_trainer())
    gpu_verify.step_strategies(ctx)
    n = ctx.numbers
    assert n["workspace_measured"]["first_thread"] == 32 * 2**20 + 16 * 2**10
    assert n["workspace_predicted"] == 2 * 32 * 2**20
    for name in gpu_verify.ONE_GPU_STRATEGIES:
        assert abs(n[name]["plan_peak_error"]) < 0.15, name
        assert n[name]["plan_states_error"] == 0


def test_strategies_step_without_the_workspaces_fails_as_the_first_h200_run_did(tmp_path,
                                                                              monkeypatch):
    import ddpdoctor.plan.workspace as ws

    monkeypatch.setattr(ws, "MATMUL_THREADS", 0)   # plan as it was before: -40% on ddp
    ctx = Recorded(session(tmp_path), _step("train_strategies"), _h200_trainer())
    with pytest.raises(StepFailed, match="plan off the measured max_memory_allocated"):
        gpu_verify.step_strategies(ctx)
    assert ctx.numbers["ddp"]["plan_peak_error"] == pytest.approx(-0.4046, abs=1e-3)


def test_watch_overhead_step_on_the_h200_run(tmp_path):
    ctx = Recorded(session(tmp_path), _step("watch_overhead"), _h200_trainer())
    gpu_verify.step_watch_overhead(ctx)
    n = ctx.numbers
    assert n["losses_identical"] is True
    assert n["watch_overhead"] == 0.001 and n["watch_overhead_high"] < 0.01
    g = n["watch_gpu_fields"]
    assert g["gpu_util_pct"] == 16 and g["cuda_allocated_mb"] == 121.7
    assert g["gpu_clock_events"] == []


def test_watch_overhead_step_fails_when_the_interval_passes_one_percent(tmp_path):
    ctx = Recorded(session(tmp_path), _step("watch_overhead"), _h200_trainer(bench_high=0.012))
    with pytest.raises(StepFailed, match="not shown within 1%"):
        gpu_verify.step_watch_overhead(ctx)


def test_watch_nan_step_on_recorded_events(tmp_path):
    def train(cmd, env):
        assert cmd[3:6] == ("train", "--nproc", "1") and "--watch" in cmd
        assert env["DDPDOCTOR_WATCH_EVERY"] == "2"
        Path(env["DDPDOCTOR_EVENTS"]).write_text(json.dumps(
            {"id": "GRAD_NONFINITE", "ranks": [0], "step": 2}) + "\n")
        return 0, "", ""

    ctx = Recorded(session(tmp_path), _step("watch_nan"), train)
    gpu_verify.step_watch_nan(ctx)
    assert ctx.numbers == {"exit": 0, "ranks": [0], "step": 2}


def _check_answer(gpu_status: str, bandwidth: str = "skipped"):
    report = {"probes": {
        "gpu": {"status": gpu_status, "data": {}},
        "topology": {"status": "ok", "data": {}},
        "connectivity": {"status": "ok", "data": {}},
        "bandwidth": {"status": bandwidth, "data": {}, "summary": (
            "skipped: one rank: no link to measure (run --nproc 2 or more)"
            if bandwidth == "skipped" else "all_reduce busbw 0.000 GB/s at 262144 KiB")},
        "limits": {"status": "warning", "data": {}}},
        "findings": [{"id": "ENV_LIMITS"}]}

    def answer(cmd, env):
        if cmd[0].endswith("nvidia-smi"):
            return 0, SMI_Q if cmd[1] == "-q" else "\tGPU0\nGPU0\t X \n", ""
        if cmd[1] == "-c":  # the NVML reader, as the snippet prints it
            return 0, json.dumps(NVML) + "\n", ""
        assert cmd[3:] == ("check", "--backend", "nccl", "--nproc", "1", "--deadline", "90",
                           "--json", cmd[-1])
        Path(cmd[-1]).write_text(json.dumps(report))
        return 1, "", ""
    return answer


def test_check_nccl_step_on_recorded_output(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_verify.shutil, "which", lambda name: f"/usr/bin/{name}")
    ctx = Recorded(session(tmp_path), _step("check_nccl"), _check_answer("ok"))
    gpu_verify.step_check_nccl(ctx)
    n = ctx.numbers
    assert all(v["match"] for v in n["nvml_vs_smi"].values())
    assert (n["check_exit"], n["findings"]) == (1, ["ENV_LIMITS"])
    assert n["bandwidth"].startswith("skipped: one rank")
    assert (tmp_path / "nvidia-smi-q.txt").read_text() == SMI_Q
    assert "nvml.json" in ctx.files and "check.json" in ctx.files


def test_check_nccl_step_fails_when_the_gpu_probe_skips(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu_verify.shutil, "which", lambda name: f"/usr/bin/{name}")
    ctx = Recorded(session(tmp_path), _step("check_nccl"), _check_answer("skipped"))
    with pytest.raises(StepFailed, match=r"probes in error or skipped: \['gpu'\]; NVML vs "
                                         r"nvidia-smi differ on: nothing"):
        gpu_verify.step_check_nccl(ctx)


def test_check_nccl_step_fails_when_one_rank_times_a_no_op(tmp_path, monkeypatch):
    # the first GPU run: check's bandwidth probe "ok" at 9,663 GB/s on one rank
    monkeypatch.setattr(gpu_verify.shutil, "which", lambda name: f"/usr/bin/{name}")
    ctx = Recorded(session(tmp_path), _step("check_nccl"), _check_answer("ok", "ok"))
    with pytest.raises(StepFailed, match=r"bandwidth \(not skipped at one rank\)"):
        gpu_verify.step_check_nccl(ctx)


NCCL_TEXT = """[rank1]: torch.distributed.DistBackendError: NCCL error in: ProcessGroupNCCL.cpp:1950, invalid usage (run with NCCL_DEBUG=WARN for details), NCCL version 2.27.7
[rank1]: ncclInvalidUsage: This usually reflects invalid usage of NCCL library.
[rank1]: Last error:
[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 18000
"""  # noqa: E501  (the lines as NCCL prints them)


def test_nccl_shared_device_step_keeps_the_text_and_drafts_the_fixture(tmp_path):
    sess = session(tmp_path)
    sess.facts.update(device="NVIDIA H100 80GB HBM3", nccl="2.27.7", torch="2.11.0",
                      date="2026-11-26 15:00 UTC")

    def answer(cmd, env):
        if "diagnose" in cmd:
            Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(
                {"findings": [{"id": "GPU_DEVICE_MAPPING"}]}))
            return 1, "", ""
        return 1, "", NCCL_TEXT

    ctx = Recorded(sess, _step("nccl_shared_device"), answer)
    gpu_verify.step_nccl_shared_device(ctx)
    assert ctx.numbers["duplicate_gpu_line"] == (
        "[rank1]: Duplicate GPU detected : rank 1 and rank 0 both on CUDA device 18000")
    assert ctx.numbers["diagnose_findings"] == ["GPU_DEVICE_MAPPING"]
    log = (tmp_path / "nccl_shared_device.log").read_text()
    assert log.startswith("# recorded by ddpdoctor tools/gpu_verify.py step "
                          "nccl_shared_device, 2026-11-26 15:00 UTC; NVIDIA H100 80GB HBM3")
    kb = json.loads((tmp_path / "nccl_shared_device.kb.json").read_text())
    assert kb["source"] == ("tests/fixtures/logs/recorded/"
                            "nccl_duplicate_gpu_nvidia_h100_80gb_hbm3.log")
    assert kb["expect"] == "GPU_DEVICE_MAPPING"


def test_nccl_shared_device_step_fails_when_diagnose_misses_it(tmp_path):
    def answer(cmd, env):
        if "diagnose" in cmd:
            Path(cmd[cmd.index("--json") + 1]).write_text(json.dumps(
                {"findings": [{"id": "UNRECOGNIZED_FAILURE"}]}))
            return 1, "", ""
        return 1, "", NCCL_TEXT

    ctx = Recorded(session(tmp_path), _step("nccl_shared_device"), answer)
    with pytest.raises(StepFailed, match=r"first finding is \['UNRECOGNIZED_FAILURE'\]"):
        gpu_verify.step_nccl_shared_device(ctx)


# --- the whole script, here --------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_the_script_on_this_cpu_machine_skips_every_gpu_step(tmp_path, capsys):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("a GPU is here: `make gpu-verify` runs the real steps")
    rc = gpu_verify.main(["--out", str(tmp_path), "--deadline", "100"])
    data = json.loads((tmp_path / "result.json").read_text())
    assert rc == 0
    steps = {s["name"]: s for s in data["steps"]}
    assert list(steps) == [s.name for s in gpu_verify.STEPS]
    assert steps["env"]["status"] == PASS
    assert data["facts"]["torch"] == torch.__version__
    for name, s in steps.items():
        if name != "env":
            assert s["status"] == SKIPPED, name
            assert s["reason"].startswith("no GPU: torch.cuda.is_available() is False"), name
    assert (tmp_path / "RESULT.md").read_text().startswith("# gpu-verify result")
    assert os.path.isdir(tmp_path / "work")


def test_unknown_step_names_are_a_usage_error():
    with pytest.raises(SystemExit, match="unknown step"):
        gpu_verify.select("watch_oom,nope")
