"""Evidence family learned from locked run 16 (batch T1_, scored blind first: 3/4): srun's
``--label`` prefix ("N: ", the task number) is the rank of every line it starts. From a
real log committed in a repository (its URL in the sidecar)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_of

from ddpdoctor.diagnose.reader import split_rank_prefix

LOG = Path("tests/fixtures/reallogs/T1_mpi_ucx_cuda_ipc_segfault_broadcast_srun.log")


def test_an_srun_labelled_segfault_names_its_task():
    lead = findings_of(LOG)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])


def test_the_srun_label_and_what_it_is_not():
    assert split_rank_prefix("1: MPI rank 1 size 2 device cuda:1") == \
        (1, "MPI rank 1 size 2 device cuda:1")
    assert split_rank_prefix("0: [rank0]: ValueError: x") == (0, "ValueError: x")
    assert split_rank_prefix("12:34:56 INFO step 3")[0] is None  # a time of day
    assert split_rank_prefix("Epoch 1: loss 2.3")[0] is None
