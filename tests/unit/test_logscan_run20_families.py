"""Evidence families learned from locked run 20 (batch X1_, scored blind first: 2/3): the
GPU runtime's own fault reports on ROCm. "HW Exception by GPU node-N ... reason :GPU Hang"
(the HSA runtime: the device stopped) before the other ranks' RCCL watchdog timeouts is the
GPU's health, not a rank that skipped a collective; "Memory access fault by GPU node-N ...
on address" (a kernel's page fault) is a crash, and a GPU Hang after it is its
consequence; PyTorch's ROCm build says "HIP error" where the CUDA build says "CUDA error".
Real logs and lines (URLs in the sidecars and beside each line)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
HANG = REAL / "X1_gpu_hang_hw_exception_mi300x_axolotl_rccl_timeout.log"

# https://github.com/ROCm/ROCm/issues/5443 (as the issue shows them, one after the other)
FAULT_THEN_HANG = (
    "Memory access fault by GPU node-1 (Agent handle: 0x556e9b7e3360) on address "
    "0x7f52c3f5f000. Reason: Page not present or supervisor privilege.\n"
    "HW Exception by GPU node-1 (Agent handle: 0x563e71f098b0) reason :GPU Hang\n"
    "Aborted (core dumped)\n")
# https://github.com/ROCm/legacy-rocm-build/issues/5742
HIP_ILLEGAL = ("torch.AcceleratorError: HIP error: an illegal memory access was encountered\n"
               "Search for `hipErrorIllegalAddress' in "
               "https://rocm.docs.amd.com/projects/HIP/en/latest/index.html for more "
               "information.\n")


def test_a_gpu_hang_before_the_collective_timeouts_is_the_gpu_not_a_missing_rank():
    found = findings_of(HANG)
    assert found[0].id == "GPU_HEALTH" and "GPU node-9: GPU Hang" in found[0].title
    assert "amdgpu" in found[0].evidence["action"]
    assert not [f for f in found if f.id.startswith("HANG_")]


def test_the_timeouts_alone_still_name_the_ranks_that_never_entered(tmp_path):
    timeouts = "".join(x for x in HANG.read_text().splitlines(True) if "[rank" in x
                       and not x.startswith("(axolotl)"))
    lead = findings_in(tmp_path, timeouts)[0]
    assert lead.id != "GPU_HEALTH"


def test_a_page_fault_then_a_hang_is_the_crash_of_the_kernel_that_faulted(tmp_path):
    lead = findings_in(tmp_path, FAULT_THEN_HANG)[0]
    assert lead.id == "RANK_CRASHED" and "memory access fault" in lead.title
    assert "0x7f52c3f5f000" in lead.title


def test_the_rocm_build_says_hip_where_the_cuda_build_says_cuda(tmp_path):
    lead = findings_in(tmp_path, HIP_ILLEGAL)[0]
    assert lead.id == "RANK_CRASHED" and "illegal memory access" in lead.title
