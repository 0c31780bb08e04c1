"""A hang recorded on a GPU (an H200, 2026-11-29, docs/gpu-verified.md): two gloo ranks on
cuda:0, rank 1 blocked in torch.cuda.synchronize() behind a kernel that spins while rank 0
waits in all_reduce. py-spy's dumps of it (JSON and text, with and without --native) are
replayed through attach's classifier and diagnose's dump reader:

- native frames (py-spy names their shared object) are never the user's line and never
  hide the Python frames: rank 0 waits in all_reduce with --native too (it was called
  healthy: "no rank waits in a collective");
- a host sync, in Python (torch.cuda.synchronize) or in C (cuCtxSynchronize_v2), is said:
  the rank waits on the GPU;
- a dump of the launcher's own process (torchrun's agent, idle) is not a rank: it was taken
  for the rank that never joined.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import errors_of, findings_of

from ddpdoctor.attach.analyze import analyze, headline
from ddpdoctor.attach.classify import COLLECTIVE, classify, device_wait
from ddpdoctor.attach.stacks import RUNNING, SLEEPING, Frame, RankStack, parse_py_spy_json
from ddpdoctor.diagnose import stackdump

G = Path("tests/fixtures/gpu_verify/h200-2026-11-29")
REC = Path("tests/fixtures/logs/recorded")


def _stacks(native: bool) -> list[RankStack]:
    kind = "native_" if native else ""
    return [RankStack(rank, pid, state,
                      parse_py_spy_json((G / f"pyspy_{kind}rank{rank}.json").read_text()))
            for rank, pid, state in ((0, 872, SLEEPING), (1, 873, RUNNING))]


@pytest.mark.parametrize("native,wait", [(False, "synchronize"), (True, "cuCtxSynchronize_v2")])
def test_the_rank_in_a_device_sync_is_the_one_that_never_joined(native, wait):
    states = [classify(s) for s in _stacks(native)]
    assert (states[0].kind, states[0].op) == (COLLECTIVE, "all_reduce")
    assert states[0].site is not None and states[0].site.short == "hung.py:11"
    assert states[1].gpu_wait == wait
    assert states[1].site is not None and states[1].site.short == "hung.py:10"
    assert f"(waits on the GPU in {wait})" in states[1].describe()
    found = analyze(states)
    assert [(f.id, f.ranks) for f in found] == [("HANG_RANK_MISSING_COLLECTIVE", [1])]


def test_native_frames_are_marked_by_py_spys_module_and_kept_in_the_stack():
    frames = _stacks(True)[1].threads[0].frames
    native = [f for f in frames if f.native]
    assert native and all(".so" in f.filename for f in native)
    assert {f.name for f in frames if not f.native} == {"synchronize", "<module>"}
    assert frames[0].native  # the innermost frame is libcuda's: shown, not classified


def test_every_rank_waiting_on_the_gpu_is_not_called_free_of_hangs():
    rank1 = _stacks(True)[1]
    states = [classify(RankStack(r, 873 + r, RUNNING, rank1.threads)) for r in (0, 1)]
    line = headline(states, analyze(states))
    assert line.startswith("every rank waits on the GPU (cuCtxSynchronize_v2 at hung.py:10")
    assert "no hang visible" not in line


def test_a_python_sync_frame_counts_only_when_innermost_and_one_of_torchs():
    sync = Frame("synchronize", "/x/site-packages/torch/cuda/__init__.py", 1162)
    user = Frame("step", "/home/u/train.py", 3)
    assert device_wait([sync, user]) == "synchronize"
    assert device_wait([user, sync]) == ""
    assert device_wait([Frame("synchronize", "/home/u/torch_utils.py", 9), user]) == ""
    assert device_wait([Frame("cudaMemcpyAsync", "/lib/libcudart.so.13", 0, native=True),
                        user]) == ""


def test_diagnose_does_not_take_torchruns_agent_for_a_rank():
    found = findings_of(REC / "pyspy_gpu_sync_hang_nvidia_h200.txt")
    assert errors_of(found) == [("HANG_RANK_MISSING_COLLECTIVE", [])]
    title = found[0].title
    assert title.startswith("process 3 (line 45) waits on the GPU (in synchronize) at "
                            "hung.py:10 in <module> while process 2 (line 37) waits in "
                            "all_reduce")
    assert "_invoke_run" not in title


def test_diagnose_reads_a_native_dump_to_the_python_frames_under_the_c_ones():
    path = REC / "pyspy_native_gpu_sync_hang_nvidia_h200.txt"
    found = findings_of(path)
    assert errors_of(found) == [("HANG_RANK_MISSING_COLLECTIVE", [])]
    assert "waits on the GPU (in cuCtxSynchronize_v2) at hung.py:10" in found[0].title
    procs = stackdump.classify(stackdump.parse(enumerate(path.read_text().splitlines(), 1)))
    assert [(p.kind, p.op) for p in procs] == [("collective", "all_reduce"),
                                              (stackdump.SYNC, "cuCtxSynchronize_v2")]


def test_a_native_read_is_the_same_place_for_the_spin_rule():
    from ddpdoctor.run.spinning import sample_of

    plain, native = (_stacks(n)[1] for n in (False, True))
    a, b = sample_of(plain, 1.0), sample_of(native, 1.0)
    assert a.user == b.user and [s.name for s in b.user] == ["<module>"]
    assert a.inner == b.inner == (("/opt/torch/.venv/lib/python3.12/site-packages/torch/cuda/"
                                   "__init__.py", "synchronize"),)
