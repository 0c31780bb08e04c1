"""The next-step verdict: every catalog id has one, evidence refines it, every view shows it."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from ddpdoctor.cli import main
from ddpdoctor.core.catalog import CATALOG
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.next_step import DEFAULTS, Action, decide
from ddpdoctor.core.report import Report


def test_every_catalog_id_has_a_default_next_step():
    assert set(DEFAULTS) == set(CATALOG)


def test_healthy_and_warning_only_reports_need_nothing():
    assert decide([]).action is Action.NONE
    assert decide([Finding("STRAGGLER", "rank 1 slow", [1])]).action is Action.NONE


@pytest.mark.parametrize("finding,action", [
    (Finding("OOM", "CUDA out of memory", [0]), Action.FIX_CONFIG),
    (Finding("GPU_HEALTH", "Xid 79", [3]), Action.DRAIN_NODE),
    (Finding("RANK_CRASHED", "rank 1 died of SIGKILL", [1], {"signal": "SIGKILL"}),
     Action.FIX_CONFIG),
    (Finding("RANK_CRASHED", "rank 1 raised KeyError", [1]), Action.FIX_CODE),
    # a completion error is most often routing/GID config; the adapter's own event is the node
    (Finding("COMM_CONNECTIVITY", "NET/IB : Got completion from peer with error 12", [2]),
     Action.FIX_CONFIG),
    (Finding("COMM_CONNECTIVITY", "the InfiniBand adapter reported port error (an async event)",
             [2]), Action.DRAIN_NODE),
    (Finding("UNRECOGNIZED_FAILURE", "the launcher could not start what it was told to run: "
             "python3: can't open file 'train.py': [Errno 2] No such file or directory", []),
     Action.FIX_CONFIG),
    (Finding("UNRECOGNIZED_FAILURE", "the job failed", [], {"lines": [
        "slurmstepd: error: *** JOB 18886 ON node CANCELLED AT 2023-11-24T10:25:54 DUE TO "
        "TIME LIMIT ***"]}), Action.RAISE_TIMEOUT),
    (Finding("COLLECTIVE_TIMEOUT", "watchdog timeout", []), Action.RAISE_TIMEOUT),
    # the Dataset's own code is wrong; a worker that died of memory is the config
    (Finding("DATALOADER_WORKER_FAILURE", "a DataLoader worker raised KeyError: 'label'", [0],
             {"family": "worker_code"}), Action.FIX_CODE),
    (Finding("DATALOADER_WORKER_FAILURE", "a DataLoader worker raised RuntimeError: unable to "
             "allocate shared memory(shm) for file </torch_1>", [0],
             {"family": "worker_resource"}), Action.FIX_CONFIG),
    (Finding("DATALOADER_WORKER_FAILURE", "the DataLoader could not start its worker "
             "processes: _pickle.PicklingError: Can't pickle <function <lambda>>", [0]),
     Action.FIX_CODE),
    (Finding("DATALOADER_WORKER_FAILURE", "a DataLoader worker was killed by signal: Bus error",
             [1]), Action.FIX_CONFIG),
])
def test_the_first_error_decides(finding, action):
    assert decide([finding]).action is action


def test_json_text_and_html_carry_it(tmp_path):
    log = tmp_path / "oom.log"
    log.write_text("[rank0]: torch.OutOfMemoryError: CUDA out of memory. Tried to allocate "
                   "2.00 GiB. GPU 0 has a total capacity of 79.15 GiB of which 1.12 GiB is "
                   "free.\n")
    out, page = tmp_path / "r.json", tmp_path / "r.html"
    res = CliRunner().invoke(main, ["diagnose", "--json", str(out), "--html", str(page),
                                    str(log)])
    assert res.exit_code == 1, res.output
    assert "next step: fix the config (OOM" in res.output
    action = json.loads(out.read_text())["action"]
    assert action["do"] == "fix_config" and action["finding"] == "OOM"
    assert "Next step: <strong>fix the config" in page.read_text()


def test_a_healthy_report_says_none():
    assert Report("diagnose").to_dict()["action"]["do"] == "none"
