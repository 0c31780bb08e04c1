"""Blind run 47's lessons (batches X32, X33, X34), each a family:

- torchrun's agent names the failed worker by its local rank ("failed (exitcode: 1)
  local_rank: 0"): the global rank on one node only. Where the ranks' own lines carry only
  higher global ranks (a Kubeflow pod whose one rank prints "[rank3]:"), the local rank is
  not a rank of this log and the failure is not pinned on rank 0.
- torchrun's agent stopped by a signal from outside ("SignalException: Process P got
  signal: 1", SIGHUP when the terminal that started it under nohup-less shells closed)
  before any rank failed: the job was stopped, not broken. A SIGINT is
  a Ctrl-C (a warning, as an interrupted job is). Next step: start it where a closed
  terminal cannot reach it (a config), any other signal: restart.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.core.next_step import Action, decide

DIR = Path("tests/fixtures/reallogs")
POD_LOG = DIR / "X32_deepspeed_init_cuda_oom_rank3_kubeflow_a100_40g.log"
SIGHUP_LOG = DIR / "X34_trl_grpo_torchrun_sighup_teardown.log"
MOSS_LOG = DIR / "F2_sighup_nohup_launcher_death_moss.log"


def test_a_pods_local_rank_0_is_not_rank_0_of_the_job():
    found = findings_of(POD_LOG)
    assert found[0].ranks == [3] and found[0].id in ("OOM", "GPU_MEMORY_OCCUPIED")
    assert not [f for f in found if f.ranks == [0]]


def test_on_one_node_a_silent_local_rank_0_is_still_rank_0(tmp_path):
    # rank 1 printed only fallout (a reset connection): the agent's local rank 0 is rank 0
    agent = next(x for x in POD_LOG.read_text().splitlines(True) if "failed (exitcode" in x)
    text = "[rank1]: RuntimeError: Connection reset by peer\n" + agent
    assert [f.ranks for f in findings_in(tmp_path, text)][0] == [0]
    # nor does a banner rank 1 printed
    banner = "[rank1]: NCCL version 2.8.3+cuda11.1\n"  # as X30_shifter_* prints it
    assert [f.ranks for f in findings_in(tmp_path, banner + agent)][0] == [0]


def test_the_launcher_stopped_by_sighup_is_a_stop_not_a_crash():
    for log in (SIGHUP_LOG, MOSS_LOG):
        found = findings_of(log)
        errors = [f for f in found if f.severity == "error"]
        assert [(f.id, f.ranks) for f in errors] == [("UNRECOGNIZED_FAILURE", [])], log
        assert "stopped by SIGHUP from outside" in errors[0].title
        # the fix is where it is started, not its code: a config
        assert decide(found).action is Action.FIX_CONFIG


def test_a_sigint_to_the_launcher_is_said_not_failed(tmp_path):
    """A Ctrl-C: information since run 95 (a warning before), never an error."""
    text = (SIGHUP_LOG.read_text().replace("got signal: 1", "got signal: 2")
            .replace("Received 1 death signal", "Received 2 death signal"))
    found = findings_in(tmp_path, text)
    stopped = [f for f in found if "stopped by SIGINT" in f.title]
    assert stopped and stopped[0].severity == "info"
    assert not [f for f in found if f.severity == "error"]


def test_a_rank_that_failed_before_the_signal_is_the_finding(tmp_path):
    text = "[rank1]: ValueError: bad batch\n" + SIGHUP_LOG.read_text()
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [1])


def test_the_agents_own_line_alone_says_the_stop(tmp_path):
    # an excerpt cut before the launcher's traceback (accelerate launch, G2_*)
    line = next(x for x in SIGHUP_LOG.read_text().splitlines(True) if "death signal" in x)
    lead = findings_in(tmp_path, line)[0]
    assert lead.id == "UNRECOGNIZED_FAILURE" and "stopped by SIGHUP" in lead.title
