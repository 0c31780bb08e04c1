"""The odd rank out of the ranks' environments: a finding about a setting names the rank
a launch set up differently (ddpdoctor/core/oddrank.py, run/rank_env.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from run_helpers import PY, RunJob, findings, run_all

from ddpdoctor.core.findings import Finding
from ddpdoctor.core.oddrank import env_differences, shared_env
from ddpdoctor.core.report import Report
from ddpdoctor.run.rank_env import name_odd_ranks

WRAPPER = str(Path(__file__).parents[1] / "fixtures" / "launches" / "odd_ifname.sh")


def test_shared_env_keeps_the_distributed_set_up_and_not_the_per_rank_ids():
    env = {"RANK": "1", "LOCAL_RANK": "1", "CUDA_VISIBLE_DEVICES": "1", "HOME": "/root",
           "NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "eth0", "MASTER_ADDR": "h"}
    assert dict(shared_env(env)) == {"NCCL_DEBUG": "INFO", "GLOO_SOCKET_IFNAME": "eth0",
                                     "MASTER_ADDR": "h"}


def test_the_minority_is_named_and_unset_is_a_value():
    per_rank = {0: {"NCCL_IB_DISABLE": "0"}, 1: {"NCCL_IB_DISABLE": "0"}, 2: {},
                3: {"NCCL_IB_DISABLE": "0"}}
    assert env_differences(per_rank) == {"NCCL_IB_DISABLE": [2]}
    assert env_differences({0: {"A_X": "1"}, 1: {"A_X": "1"}}) == {}


def test_a_rankless_finding_about_the_differing_setting_gets_the_odd_rank():
    report = Report("run")
    report.add(Finding("ENV_NCCL_CONFIG", "gloo found no interface named 'nosuchif0'",
                       ranks=[], evidence={"setting": "GLOO_SOCKET_IFNAME"}))
    per_rank = {0: {"GLOO_SOCKET_IFNAME": "lo"}, 1: {"GLOO_SOCKET_IFNAME": "nosuchif0"},
                2: {"GLOO_SOCKET_IFNAME": "lo"},
                3: {"GLOO_SOCKET_IFNAME": "lo", "NCCL_SECRET_TOKEN": "hunter2"}}
    name_odd_ranks(report, per_rank, "run")
    lead = report.findings[0]
    [extra] = [f for f in report.findings if f.id == "ENV_VAR_MISMATCH"]
    assert (lead.id, lead.ranks) == ("ENV_NCCL_CONFIG", [1])
    assert lead.evidence["odd_rank_out"]["ranks_by_value"] == {"lo": "0,2-3", "nosuchif0": "1"}
    # a difference no finding explains is a warning of its own, its value never shown
    assert (extra.id, extra.ranks) == ("ENV_VAR_MISMATCH", [3])
    assert all("hunter2" not in repr(f.to_dict()) for f in report.findings)


@pytest.mark.slow
@pytest.mark.timeout(200)
def test_run_names_the_rank_a_launch_script_set_up_differently(tmp_path):
    job = RunJob("odd", tmp_path / "odd",
                 [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", "--no-python",
                  WRAPPER], ["--hang-timeout", "60"], env={"PYTHON": sys.executable})
    run_all([job], deadline_s=150)
    assert job.returncode == 1, job.output
    report = job.report()
    assert findings(report)[0] == ("ENV_NCCL_CONFIG", [1]), job.output
    assert report["findings"][0]["evidence"]["odd_rank_out"]["variable"] == \
        "GLOO_SOCKET_IFNAME"


def test_the_recipes_mistakes_in_the_ranks_environment_are_judged():
    """What tutorials set: NCCL_TIMEOUT (nothing reads it), NCCL_BLOCKING_WAIT (renamed):
    judged by the table check uses (ddpdoctor/distenv/), with what to set instead."""
    report = Report("run")
    env = {"NCCL_TIMEOUT": "1800", "NCCL_BLOCKING_WAIT": "1", "MASTER_PORT": "29500"}
    name_odd_ranks(report, {0: dict(env), 1: dict(env)}, "run")
    got = {(f.id, f.evidence["variable"], f.evidence["problem"]): f.ranks
           for f in report.findings}
    assert got == {("ENV_NCCL_CONFIG", "NCCL_TIMEOUT", "not_a_variable"): [0, 1],
                   ("ENV_NCCL_CONFIG", "NCCL_BLOCKING_WAIT", "renamed"): [0, 1]}
    [check] = report.checks
    assert "checked against what NCCL, torch and gloo read" in check.summary


def test_a_difference_a_finding_already_blames_on_those_ranks_is_its_evidence():
    """A rank given another rendezvous port is ENV_RENDEZVOUS_UNREACHABLE on that rank
    already (run/rendezvous.py): the difference joins it, no second finding."""
    report = Report("run")
    report.add(Finding("ENV_RENDEZVOUS_UNREACHABLE", "rank 1 rendezvouses elsewhere",
                       ranks=[1]))
    name_odd_ranks(report, {0: {"MASTER_PORT": "29500"}, 1: {"MASTER_PORT": "29501"}}, "run")
    [f] = report.findings
    assert f.evidence["env_differs"]["MASTER_PORT"] == {"29500": "0", "29501": "1"}
