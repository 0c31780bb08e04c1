"""A script whose argparse refuses its command line (found among the development set's
misses): every worker prints its usage and "PROG: error: unrecognized arguments:
--local-rank=N" and exits 2 before training; torch.distributed.launch passing
--local_rank / --local-rank is the usual cause. The finding says so (it used to say the
rank's traceback was not in the log), and its next step is the code. Real logs (URLs in
the sidecars)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_of

from ddpdoctor.core.next_step import Action, decide

REAL = Path("tests/fixtures/reallogs")


def test_workers_that_refuse_the_launchers_argument_are_named_with_the_fix():
    found = findings_of(REAL / "F3_local_rank_argparse_unrecognized_cpt_finetune.log")
    lead = found[0]
    assert lead.id == "RANK_CRASHED"
    assert lead.title == ("the job: train_adgen.py refused its command line: unrecognized "
                          "arguments: --local_rank=N")
    assert "launch with torchrun" in lead.evidence["hint"]
    assert decide(found).action is Action.FIX_CODE


def test_the_rank_is_the_one_the_launcher_saw_exit_2():
    lead = findings_of(REAL / "F3_local_rank_argparse_torch2_launch_babylm.log")[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])
    assert "general_train.py refused its command line" in lead.title
