"""A cross-rank consistency check that says the ranks disagree is a collective mismatch
caught before it hangs, whoever runs the check: torch's collective fingerprint
(TORCH_DISTRIBUTED_DEBUG=DETAIL; torch 1.10-1.12 names one rank "running inconsistent
collective", and a pasted line is often cut before the second rank), DeepSpeed ZeRO-3's
parameter-trace length check, accelerate's debug-mode shape check. Found among the
development set's misses (four logs called a plain crash). Real logs, URLs in their
sidecars."""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")


@pytest.mark.parametrize(("name", "ranks"), [
    ("G1_collective_mismatch_time_based_ckpt_speechbrain", [0]),  # "inconsistent collective"
    ("L2_lightning_log_dict_keys_differ_across_ranks_mismatch", [1]),  # cut after rank 1
    ("K1_zero3_moe_list_length_disagreement_rank0_rank7_qwen35_a3b", [0, 7]),
    ("F4_accelerate_debug_broadcast_shape_mismatch", []),
])
def test_a_check_that_the_ranks_disagree_is_a_collective_mismatch(name: str,
                                                                   ranks: list[int]) -> None:
    lead = findings_of(REAL / f"{name}.log")[0]
    assert (lead.id, lead.ranks) == ("HANG_COLLECTIVE_MISMATCH", ranks)


def test_the_title_says_which_check_found_it() -> None:
    lead = findings_of(REAL / "K1_zero3_moe_list_length_disagreement_rank0_rank7_qwen35_a3b"
                              ".log")[0]
    assert "ZeRO-3's parameter-trace length check" in lead.title
    assert "rank 0,7" in lead.title


def test_both_ranks_of_the_full_fingerprint_line_are_named(tmp_path) -> None:
    # the same line as torch >= 1.13 prints it whole: both ranks and what each ran
    line = (REAL / "L2_lightning_log_dict_keys_differ_across_ranks_mismatch.log").read_text()
    line = next(x for x in line.splitlines() if "Detected mismatch" in x)
    whole = (line.split(", TensorDeviceTypes")[0] + "), but Rank 0 is running collective: "
             "CollectiveFingerPrint(SequenceNumber=21, OpType=ALLREDUCE, TensorShape=[1], "
             "TensorDtypes=Long).\n")
    lead = findings_in(tmp_path, whole)[0]
    assert (lead.id, lead.ranks) == ("HANG_COLLECTIVE_MISMATCH", [0, 1])
    assert "rank 0: ALLREDUCE" in lead.title and "rank 1: BROADCAST" in lead.title


def test_the_words_alone_in_a_users_message_are_no_mismatch(tmp_path) -> None:
    text = "INFO: checking shapes; no disagreement on list length between runs was found\n"
    assert not [f for f in findings_in(tmp_path, text) if f.id == "HANG_COLLECTIVE_MISMATCH"]
