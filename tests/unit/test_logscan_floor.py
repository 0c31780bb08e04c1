"""The floor: failure evidence in any wording is never "healthy"; healthy lines stay quiet.

Every pattern's real example lines (public threads, URLs in ddpdoctor/diagnose/floor.py) are
detected with their evidence kind; lines of healthy runs that look alike are not; and a log
made of nothing but a launcher's death report gets an error finding of the right family.
"""

from __future__ import annotations

import io

import pytest

from ddpdoctor.diagnose import LogInput, diagnose_logs, floor
from ddpdoctor.diagnose.floor import Evidence

EXAMPLES = [(p.name, line, url) for p in floor.PATTERNS for line, url in p.examples]


@pytest.mark.parametrize("name,line,url", EXAMPLES, ids=[f"{n}:{i}" for i, (n, _, _)
                                                          in enumerate(EXAMPLES)])
def test_every_example_is_failure_evidence(name, line, url):
    assert url.startswith("https://")
    hit = floor.detect(line)
    assert hit is not None, line
    assert hit.pattern == name


@pytest.mark.parametrize("line", [
    # normal dynamic loss scaling (BVAE-TTS#3, MS-G3D#9: "nothing to worry about")
    "Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 32768.0",
    "Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to 131072.0",
    "[INFO] [launch.py:351:main] Process 3966 exits successfully.",
    "process exited with exit code 0",
    "subprocess returned non-zero exit status 0",
    "epoch 3 loss: 0.3521 lr: 1e-4",
    "NCCL INFO Channel 00/02 :    0   1",
    "WARNING:torch.distributed.run:Setting OMP_NUM_THREADS environment variable for each "
    "process to be 1 in default",
    "mkdir -p /tmp/killed_runs",
    "the loss scale is 65536",
])
def test_healthy_lines_are_not_evidence(line):
    assert floor.detect(line) is None


def test_hits_carry_code_signal_and_rank():
    hit = floor.detect(EXAMPLES[0][1])
    assert (hit.evidence, hit.exit_code, hit.signal, hit.rank) == (
        Evidence.LAUNCHER_DEATH, -9, "SIGKILL", 0)
    hit = floor.detect("mpirun noticed that process rank 7 with PID 0 on node HOSTNAME exited "
                       "on signal 9 (Killed).")
    assert (hit.signal, hit.rank) == ("SIGKILL", 7)
    hit = floor.detect("srun: error: gpu001: task 0: Out Of Memory")
    # srun's task: a rank unless the input shows srun started a launcher per node
    assert hit.oom and (hit.rank, hit.task) == (None, 0)
    assert floor.detect("RuntimeError: mpirun failed with exit code 139").signal == "SIGSEGV"


def _diagnose(text: str):
    stream = io.BytesIO(text.encode())
    findings, _ = diagnose_logs([LogInput("job.log", stream=stream, rank_from_path=False)])
    return findings


@pytest.mark.parametrize("text,fid,ranks", [
    # deepspeed's launcher alone (DeepSpeed#3232): a SIGKILL with no error of its own is the
    # OOM killer's (the family), the rank from --local_rank
    ("[2023-04-14 13:11:27,879] [INFO] [launch.py:428:sigkill_handler] Killing subprocess 13266\n"
     "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['/usr/bin/python3', "
     "'-u', 'main.py', '--local_rank=0', '--zero_stage', '2', '--deepspeed'] exits with return "
     "code = -9\n", "OOM", [0]),
    # mpirun (horovod#469)
    ("Primary job  terminated normally, but 1 process returned\n"
     "a non-zero exit code. Per user-direction, the job has been aborted.\n"
     "mpirun noticed that process rank 7 with PID 0 on node HOSTNAME exited on signal 9 "
     "(Killed).\n", "OOM", [7]),
    # mp.spawn's report of a segfault (MP-SENet#7): a crash of that rank
    ("torch.multiprocessing.spawn.ProcessExitedException: process 0 terminated with signal "
     "SIGSEGV\n", "RANK_CRASHED", [0]),
    # slurm's OOM kill (ArjunaUsers#52)
    ("Epoch: [0][511/1736]\t Loss 0.5117 MAE 0.6075 RMSE 0.7153\n"
     "slurmstepd: error: Detected 1 oom-kill event(s) in StepId=191.batch cgroup. Some of your "
     "processes may have been killed by the cgroup out-of-memory handler.\n", "OOM", []),
    # the loss scale collapsing (apex#318)
    ("".join(f"Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to {s}\n"
             for s in ("4.0", "2.0", "1.0", "0.5", "8.165126103939127e-202")),
     "GRAD_NONFINITE", []),
    # a GPU lost (OWOD#81)
    ("Unable to determine the device handle for GPU 0000:02:00.0: GPU is lost. Reboot the "
     "system to recover this GPU\n", "GPU_HEALTH", []),
    # a bare exit code from mpirun (horovod#1421): its "Process name: [[job,1],R]" is rank R,
    # a bare exit like every other launcher's report of one
    ("mpirun detected that one or more processes exited with non-zero status, thus causing\n"
     "the job to be terminated. The first process to do so was:\n\n"
     "  Process name: [[29973,1],0]\n  Exit code:    1\n", "RANK_CRASHED", [0]),
    # slurm's time limit (JAX-Toolbox#398)
    ("slurmstepd: error: *** JOB 18886 ON compute-permanent-node-954 CANCELLED AT "
     "2023-11-24T10:25:54 DUE TO TIME LIMIT ***\n", "UNRECOGNIZED_FAILURE", []),
])
def test_a_log_of_only_a_death_report_is_an_error_of_its_family(text, fid, ranks):
    findings = _diagnose(text)
    assert findings, "a failed job called healthy"
    assert findings[0].id == fid and findings[0].severity == "error"
    assert findings[0].ranks == ranks


def test_a_healthy_log_with_early_overflows_stays_healthy():
    text = ("".join(f"Gradient overflow. Skipping step, loss scaler 0 reducing loss scale to {s}\n"
                    for s in ("65536.0", "32768.0", "16384.0"))
            + "epoch 1 loss: 0.52\nepoch 2 loss: 0.31\n")
    assert [f for f in _diagnose(text) if f.severity == "error"] == []


def test_the_floor_never_overrides_a_signature():
    """A known cause and the launcher's report of the same death: the cause leads, the
    report is counted as fallout."""
    text = ("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. "
            "GPU 0 has a total capacity of 79.15 GiB of which 1.12 GiB is free.\n"
            "[2023-04-14 13:11:27,885] [ERROR] [launch.py:434:sigkill_handler] ['python', "
            "'-u', 'main.py', '--local_rank=0'] exits with return code = 1\n")
    findings = _diagnose(text)
    assert findings[0].id == "OOM"
    assert any("launcher or failure report" in f for f in findings[0].evidence.get("fallout", []))


def test_nccl_versions_that_differ_across_nodes_are_a_mismatch():
    """Two nodes' NCCL banners (the version lines as NCCL prints them; the versions are the
    two of nccl#1267, where one node's pip NCCL differed) compared."""
    text = ("node-a:440225:440225 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n"
            "node-a:440226:440226 [1] NCCL INFO NCCL version 2.19.3+cuda12.3\n"
            "node-b:81234:81234 [0] NCCL INFO NCCL version 2.20.5+cuda12.4\n"
            "node-a:440225:440225 [0] NCCL INFO Bootstrap : Using ens7:10.128.0.30<0>\n")
    (f,) = [f for f in _diagnose(text) if f.id == "ENV_VERSION_MISMATCH"]
    assert f.severity == "error"
    assert f.evidence["nccl_versions"] == {"2.19.3": ["node-a"], "2.20.5": ["node-b"]}
    assert "node-b" in f.title


def test_one_nccl_version_everywhere_is_no_finding():
    text = ("node-a:1:1 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n"
            "node-b:2:2 [0] NCCL INFO NCCL version 2.19.3+cuda12.3\n")
    assert [f for f in _diagnose(text) if f.id == "ENV_VERSION_MISMATCH"] == []
