"""Blind run 49's lessons (batches X40, X42, X43):

- DeepSpeed's launcher says it was signalled itself ("Main process received SIGINT,
  exiting", printed only when no worker had failed: deepspeed/launcher/launch.py's
  sigkill_handler exits with the worker's code first otherwise): the same stop from
  outside as torchrun's, its "Killing subprocess" lines the stop's own noise. A SIGINT is a
  Ctrl-C: a warning, never a failed job.
- PyTorch's Windows wheels have no libuv while the rendezvous store asks for it by default
  ("use_libuv was requested but PyTorch was build without libuv support"): a known
  upstream bug with its workaround (USE_LIBUV=0).

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

DIR = Path("tests/fixtures/reallogs")
DS_SIGINT = DIR / "X40_deepspeed_6gpu_dpo_sigint_operator_stop_miniphi3.log"
LIBUV = DIR / "X43_windows_torch25_tcpstore_libuv_default_unsupported.log"


def test_deepspeeds_launcher_stopped_by_ctrl_c_is_a_warning_not_a_failure():
    found = findings_of(DS_SIGINT)
    assert not [f for f in found if f.severity == "error"], [(f.id, f.title) for f in found]
    assert "stopped by SIGINT" in found[0].title


def test_a_worker_that_failed_before_the_signal_is_the_finding(tmp_path):
    text = "[rank1]: ValueError: bad batch\n" + DS_SIGINT.read_text()
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [1])


def test_sigterm_to_deepspeeds_launcher_is_a_failed_run(tmp_path):
    text = DS_SIGINT.read_text().replace("received SIGINT", "received SIGTERM")
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "UNRECOGNIZED_FAILURE" and lead.severity == "error"
    assert "stopped by SIGTERM" in lead.title


def test_the_windows_libuv_store_error_is_a_known_bug_with_its_workaround():
    lead = findings_of(LIBUV)[0]
    assert lead.id == "KNOWN_UPSTREAM_BUG"
    assert "USE_LIBUV=0" in str(lead.evidence)


def test_a_schedulers_cancel_before_the_signal_says_who_stopped_it():
    # scancel of a benchmark (P1_*): slurm's bare cancel, then the launchers' "Main process
    # received SIGTERM": the cancel is the finding (the job did not finish), not the SIGTERMs
    found = findings_of(DIR / "P1_megatron_benchmark_slurm_cancelled.log")
    assert [(f.id, f.severity) for f in found if f.severity != "info"] == [
        ("UNRECOGNIZED_FAILURE", "error")]
    assert found[0].title.startswith("the job was cancelled with no reason given")
