"""Blind run 87's lesson (committed run logs, URLs in their sidecars): the same failure
raised on several ranks (a DeepSpeed job's two ranks each out of HIP memory; two ranks of
an inference job each failing to open one netCDF file) was one finding per rank, the
first naming one rank. It is one finding naming every rank that raised it: the same id,
the same exception with its numbers and ids folded, the same place."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
HIP = REAL / "XE8_deepspeed_amd_hip_oom_two_ranks.log"


def test_each_ranks_own_oom_is_one_finding_naming_both():
    errors = [f for f in findings_of(HIP) if f.severity == "error"]
    assert [(f.id, f.ranks) for f in errors] == [("OOM", [0, 1])]
    assert errors[0].title.startswith("rank 0-1 ran out of memory")
    assert len(errors[0].evidence["also_raised_at"]) == 1


def test_the_same_error_with_another_id_in_it_is_still_one():
    found = findings_of(REAL / "XE8_sfno_inference_netcdf_permission_ranks02.log")
    errors = [f for f in found if f.severity == "error"]
    assert [(f.id, f.ranks) for f in errors] == [("RANK_CRASHED", [0, 2])]


def test_different_errors_stay_apart(tmp_path):
    lines = HIP.read_text().splitlines(keepends=True)
    text = "".join(ln.replace("HIP out of memory", "CUDA out of memory")
                   if ln.startswith("[rank0]: torch.OutOfMemoryError") else ln for ln in lines)
    errors = [f for f in findings_in(tmp_path, text) if f.severity == "error"]
    assert sorted(tuple(f.ranks) for f in errors) == [(0,), (1,)]
