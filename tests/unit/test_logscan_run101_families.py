"""Blind run 101's lessons (batch XG6, committed run logs; URLs in the sidecars) and one
dev-set log it led to, each a mechanism with the real log as its case and a variant that
shows the mechanism decides:

- Ranks whose own lines are in the log (the census) and that report no timeout, while
  others time out in one collective, never entered it (or entered later): they are named,
  however many; ranks the log never shows are still an excerpt's gap when they are many.
- horovodrun's own launcher prefixes a rank's lines with the rank alone ("[2]<stderr>:"),
  Open MPI's --tag-output with the job too ("[1,2]<stderr>:").
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
