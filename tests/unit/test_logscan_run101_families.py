"""Blind run 101's lessons (batch XG6, committed run logs; URLs in the sidecars) and one
dev-set log it led to, each a mechanism with the real log as its case and a variant that
shows the mechanism decides:

- Ranks whose own lines are in the log (the census) and that report no timeout, while
  others time out in one collective, never entered it (or entered later): they are named,
  however many; ranks the log never shows are still an excerpt's gap when they are many.
- horovodrun's own launcher prefixes a rank's lines with the rank alone ("[2]<stderr>:"),
  Open MPI's --tag-output with the job too ("[1,2]<stderr>:").
- An error with no rank in one node's DeepSpeed job (its layout gives the world) whose
  other ranks are named only waiting is the one rank left's.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

from ddpdoctor.diagnose.reader import split_rank_prefix

R = Path("tests/fixtures/reallogs")
QUIET = R / "XG6_megatron_lowcomm_ddp_ranks12_missing_allreduce.log"
HOROVOD = R / "G2_horovodrun_gloo_rank2_raises_others_linger.log"


def test_ranks_in_the_log_that_never_timed_out_never_entered():
    found = findings_of(QUIET)
    assert errors_of(found) == [("HANG_RANK_MISSING_COLLECTIVE", [1, 2])]
    assert found[0].title.startswith("rank 1-2 never entered ALLREDUCE #17; rank 0,3 timed "
                                     "out waiting for it")


def test_without_their_lines_the_quiet_ranks_are_an_excerpts_gap(tmp_path):
    # the same log with every line of ranks 1 and 2 left out: nothing says they ran
    lines = QUIET.read_text().splitlines(keepends=True)
    text = "".join(x for x in lines if not x.startswith(("[rank1]", "[rank2]")))
    found = findings_in(tmp_path, text)
    assert errors_of(found)[0] == ("COLLECTIVE_TIMEOUT", [])


def test_horovodruns_rank_prefix_names_the_rank():
    assert errors_of(findings_of(HOROVOD)) == [("RANK_CRASHED", [2])]
    assert split_rank_prefix("[2]<stderr>:RuntimeError: x") == (2, "RuntimeError: x")
    assert split_rank_prefix("[1,3]<stdout>:hi") == (3, "hi")
    assert split_rank_prefix("[2] hi") == (None, "[2] hi")


OOM_BY_ELIMINATION = R / "XG6_deepspeed_llava_rank0_oom_peer_watchdog.log"


def test_an_unranked_error_is_the_one_rank_left_of_a_known_world():
    found = findings_of(OOM_BY_ELIMINATION)
    assert errors_of(found)[0] == ("OOM", [0])


def test_without_the_layout_the_world_is_unknown_and_no_rank_is_given(tmp_path):
    text = "".join(x for x in OOM_BY_ELIMINATION.read_text().splitlines(keepends=True)
                   if "num_local_procs=" not in x)
    assert errors_of(findings_in(tmp_path, text))[0] == ("OOM", [])


def test_a_world_of_three_with_two_ranks_left_gives_no_rank(tmp_path):
    text = OOM_BY_ELIMINATION.read_text().replace("num_local_procs=2", "num_local_procs=3")
    assert errors_of(findings_in(tmp_path, text))[0] == ("OOM", [])


def test_one_node_of_several_gives_no_world(tmp_path):
    text = OOM_BY_ELIMINATION.read_text().replace("nnodes=1,", "nnodes=2,")
    assert errors_of(findings_in(tmp_path, text))[0] == ("OOM", [])
