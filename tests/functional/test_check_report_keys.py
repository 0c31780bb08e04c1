"""The JSON keys of a check report are a contract (scripts and CI read them): the package
move of issue #17 must not change them. The 'before' key set was recorded from main at
commit 74ab0be (``python tests/functional/test_check_report_keys.py`` rewrites it) with the
same run."""

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from ports import free_port

FIXTURE = Path(__file__).parents[1] / "fixtures" / "check_report_keys.json"
PROBES = ["env", "rendezvous", "connectivity", "dataloader"]
# Levels of free-form data below a probe's "data" / a finding's "evidence" are the probe's
# own facts (env var names, peer ranks), not the report's schema.
OPEN_DICTS = ("data", "evidence", "world")


def key_paths(obj: Any, prefix: str = "", depth_left: int | None = None) -> set[str]:
    out: set[str] = set()
    if depth_left == 0:
        return out
    if isinstance(obj, dict):
        for k, v in obj.items():
            path = f"{prefix}.{k}" if prefix else str(k)
            out.add(path)
            left = 2 if k in OPEN_DICTS and depth_left is None else depth_left
            out |= key_paths(v, path, None if left is None else left - 1)
    elif isinstance(obj, list):
        for v in obj:
            out |= key_paths(v, prefix + "[]", depth_left)
    return out


def check_report_keys() -> list[str]:
    """A real check on 2 CPU ranks with a variable planted on rank 1 (ENV_VAR_MISMATCH)."""
    from ddpdoctor.check.run import run_check

    report = run_check(2, PROBES, "gloo", 60.0,
                       opts={"master_addr": "127.0.0.1", "master_port": free_port()},
                       rank_env={1: {"NCCL_DEBUG": "INFO"}})
    data = report.to_dict()
    # Only the planted finding: a rank slowed by a loaded machine may add its own finding,
    # whose evidence keys are that finding's, not the schema's.
    data["findings"] = [f for f in data["findings"] if f["id"] == "ENV_VAR_MISMATCH"]
    assert [f["ranks"] for f in data["findings"]] == [[1]]
    return sorted(key_paths(data))


@pytest.mark.slow
def test_check_report_keys_unchanged():
    assert check_report_keys() == json.loads(FIXTURE.read_text())


if __name__ == "__main__":
    FIXTURE.write_text(json.dumps(check_report_keys(), indent=1) + "\n")
    sys.exit(0)
