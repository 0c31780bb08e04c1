"""Blind run 61's lesson (batches X71, X72 and X74), a family:

- An exception raised out of the multiprocessing calls a DataLoader's iterator makes while it
  is built (its queues, ``w.start()``) is the workers failing to start, whatever the
  exception says: under spawn a Dataset holding a lambda cannot be pickled (a code fix);
  out of descriptors there, the limit is the cause.

The public log's URL is in its sidecar; the other two were recorded here from
tests/fixtures/scripts/faults.py (tests/fixtures/logs/README.md)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of, lines_of

from ddpdoctor.core.next_step import Action, decide

DIR = Path("tests/fixtures/reallogs")
PUBLIC = DIR / "X71_spawn_worker_cant_pickle_lambda_vocab.log"
RECORDED = Path("tests/fixtures/logs/dataloader_unpicklable.log")
NOFILE = Path("tests/fixtures/logs/dataloader_nofile.log")


def test_a_dataset_spawn_cannot_pickle_is_the_workers_failing_to_start():
    for log in (PUBLIC, RECORDED):
        lead = findings_of(log)[0]
        assert lead.id == "DATALOADER_WORKER_FAILURE"
        assert lead.title.startswith("the DataLoader could not start its worker processes: "
                                     "AttributeError: Can't pickle local object")
        assert "lambda" in str(lead.evidence["hint"])
        assert decide([lead]).action is Action.FIX_CODE
    assert findings_of(RECORDED)[0].ranks == [1]


def test_out_of_descriptors_while_building_the_workers_is_the_limit():
    found = findings_of(NOFILE)
    assert [f.id for f in found] == ["ENV_LIMITS"]
    assert found[0].ranks == [1]


def test_the_same_exception_after_the_workers_ran_is_not_a_start_failure(tmp_path):
    # the same multiprocessing frames, not under a DataLoader iterator being built
    text = lines_of(PUBLIC, 1, 6) + lines_of(PUBLIC, 27, 31)
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "RANK_CRASHED"


# Two verdicts the set's labels disagreed with, each a family: what the installed software
# lacks is fixed by installing it, not by changing the training code.
NINJA = DIR / "X74_deepspeed_launcher_rank_crash_ninja_missing_cpu_adam_jit.log"
NO_KERNEL = DIR / "X68_torch_build_drops_sm60_p100_no_kernel_image_yolo_ddp.log"


def test_a_missing_build_tool_is_the_extension_build_family():
    lead = findings_of(NINJA)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])
    assert lead.evidence["family"] == "extension_build"
    assert "Ninja is required" in lead.title
    assert decide([lead]).action is Action.FIX_CONFIG


def test_a_torch_built_without_this_gpus_kernels_is_the_install():
    lead = findings_of(NO_KERNEL)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0, 1, 2, 3])
    assert "get_arch_list" in str(lead.evidence["hint"])
    assert decide([lead]).action is Action.FIX_CONFIG
