"""Blind run 48's lessons (batches X36 to X39), each a family:

- nccl-tests reports a failed CUDA or NCCL call as "Test CUDA failure common.cu:389 '...'"
  and " .. host pid N: Test failure common.cu:519": the floor knows both (a failed job is
  never called healthy), and the CUDA message is read as the same CUDA error torch's
  wording carries (an illegal memory access; an invalid device ordinal, quoted or not;
  "CUDA-capable device(s) is/are busy or unavailable", a GPU in exclusive-process mode
  held by another process).
- An Ascend CANN runtime error code line ("EI0002: [PID: N] ...", an HCCL collective
  timing out) is a library's error: never healthy.
- argparse exits 2: every rank the launcher reports with code 2 printed its usage, not
  only the root failure that an unprefixed usage line is lent.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import findings_in, findings_of

DIR = Path("tests/fixtures/reallogs")
BUSY = DIR / "X36_exclusive_process_ompi_ofi_hmem_ranks_on_gpu0_busy.log"
ILLEGAL = DIR / "X36_nccl_tests_alltoall_nvl_device_kernel_multinode_illegal_memory_access.log"
ORDINAL = DIR / "X36_mpirun_two_slots_per_host_with_g2_invalid_device_ordinal.log"
HCCL = DIR / "X39_hccl_allreduce_timeout_peer_device_exited.log"
ARGPARSE = DIR / "X38_torchrun_argparse_bad_flag_value_exit2.log"


@pytest.mark.parametrize("log,fid,words", [
    (BUSY, "GPU_DEVICE_MAPPING", "busy or unavailable"),
    (ILLEGAL, "RANK_CRASHED", "illegal memory access"),
    (ORDINAL, "GPU_DEVICE_MAPPING", "invalid device ordinal"),
])
def test_nccl_tests_cuda_failures_are_their_cuda_errors(log, fid, words):
    lead = findings_of(log)[0]
    assert lead.id == fid and lead.severity == "error"
    assert words in lead.title


def test_nccl_tests_failure_lines_alone_are_never_healthy(tmp_path):
    text = "".join(x for x in BUSY.read_text().splitlines(True) if "Test failure" in x)
    assert text
    found = findings_in(tmp_path, text)
    assert found and found[0].severity == "error"


def test_an_unknown_nccl_tests_cuda_message_is_still_a_cuda_error(tmp_path):
    line = next(x for x in BUSY.read_text().splitlines(True) if "Test CUDA failure" in x)
    assert "Test CUDA failure" in line
    odd = line.replace("CUDA-capable device(s) is/are busy or unavailable", "unknown error")
    lead = findings_in(tmp_path, odd)[0]
    assert lead.id == "RANK_CRASHED" and "unknown error" in lead.title


def test_an_ascend_runtime_error_code_is_never_healthy():
    found = findings_of(HCCL)
    assert found and found[0].severity == "error"
    assert "EI0002" in found[0].title


def test_every_rank_the_launcher_reports_with_exit_2_refused_its_command_line():
    lead = findings_of(ARGPARSE)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0, 2])
    assert "refused its command line" in lead.title
