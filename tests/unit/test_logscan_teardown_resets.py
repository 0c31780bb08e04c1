"""Connections reset while a job ends, after its launcher said its processes exited
successfully (DeepSpeed's `Process N exits successfully.`, torchelastic's `Local worker
group finished (SUCCEEDED)`), are the teardown: the store's host left first and its peers'
store heartbeat said so. Said as information, never a failure (blind run 36: a finished
two-node Megatron-DeepSpeed run was called a crashed peer). Real logs, URLs in their
sidecars."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
HEALTHY = REAL / "X16_healthy_megatron_deepspeed_2node_smoke_tcpstore_teardown_noise.log"


def _errors(found):
    return [f for f in found if f.severity == "error"]


def test_resets_after_every_process_exited_successfully_are_the_teardown():
    found = findings_of(HEALTHY)
    assert _errors(found) == []
    assert found[0].severity == "info" and "teardown" in found[0].title


def test_without_the_launchers_word_the_resets_are_a_lost_peer(tmp_path):
    text = "".join(x for x in HEALTHY.read_text().splitlines(True)
                   if "exits successfully" not in x)
    lead = _errors(findings_in(tmp_path, text))[0]
    assert lead.id == "RANK_CRASHED" and "went away" in lead.title


def test_a_process_that_failed_is_still_a_failure(tmp_path):
    lines = HEALTHY.read_text().splitlines(True)
    ok = next(x for x in lines if "exits successfully" in x)
    failed = ok.replace("Process 1314973 exits successfully.",
                        "['/usr/bin/python3', '-u', 'pretrain_gpt.py', '--local_rank=3'] exits "
                        "with return code = 1")
    text = "".join(failed if x is ok else x for x in lines)
    assert _errors(findings_in(tmp_path, text))


def test_nccl_out_of_memory_with_its_error_code_is_an_oom():
    # NCCL 2.19+: "Cuda failure 2 'out of memory'" (the code before the text)
    lead = findings_of(REAL / "X16_megatron_deepspeed_nccl_init_oom_gpus_busy_v100.log")[0]
    assert lead.id == "OOM"
