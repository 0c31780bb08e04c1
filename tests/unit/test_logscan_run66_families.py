"""Blind run 66's lesson (batches X81, X82 and X84), a family:

- A DataLoader worker that ran and re-raised an ordinary error of the Dataset's own code
  (`Caught FileNotFoundError in DataLoader worker process 3.` and the worker's original
  traceback: an image the data lists is missing) is the rank dying of that error:
  `RANK_CRASHED`, next step fix the code (or the samples). It was read as
  `DATALOADER_WORKER_FAILURE`, which is for workers that cannot run: they cannot start,
  are killed, time out, or run out of shared memory, memory or descriptors.

The real log's URL is in its sidecar; the recorded one is tests/fixtures/logs/README.md's."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.core.next_step import Action, decide

DIR = Path("tests/fixtures/reallogs")
RECORDED = Path("tests/fixtures/logs/dataloader_raises.log")

# torch/_utils.py ExceptionWrapper's wording, as the recorded log has it, rank-prefixed
_WORKER = ("[rank1]: {t}: Caught {t} in DataLoader worker process 0.\n"
           "[rank1]: Original Traceback (most recent call last):\n"
           '[rank1]:   File "/usr/lib/python3/site-packages/torch/utils/data/_utils/worker.py",'
           " line 374, in _worker_loop\n"
           '[rank1]:   File "/home/u/data.py", line 41, in __getitem__\n'
           "[rank1]: {t}: {m}\n")


def test_the_datasets_own_error_in_a_worker_is_the_ranks_crash():
    for path, ranks in ((RECORDED, [1]),
                        (DIR / "X82_deepspeed_dataloader_missing_image_crash.log", [])):
        found = findings_of(path)
        lead = found[0]
        assert (lead.id, lead.ranks, lead.evidence["family"]) == (
            "RANK_CRASHED", ranks, "dataset_code"), path
        assert "FileNotFoundError: [Errno 2] No such file or directory" in lead.title
        assert "__getitem__" in str(lead.evidence["where"])
        assert decide(found).action is Action.FIX_CODE
        assert "DATALOADER_WORKER_FAILURE" not in [f.id for f in found]


def test_an_ordinary_error_of_any_type_is_the_datasets(tmp_path):
    for t, m in (("KeyError", "'label'"), ("IndexError", "list index out of range"),
                 ("FileNotFoundError", "[Errno 2] No such file or directory: "
                                       "'/data/shm_memory_killed/1.jpg'"),
                 ("ValueError", "image has 4 channels, expected 3")):
        lead = findings_in(tmp_path, _WORKER.format(t=t, m=m))[0]
        assert (lead.id, lead.ranks, lead.evidence["family"]) == ("RANK_CRASHED", [1],
                                                                  "dataset_code"), t


def test_a_worker_out_of_the_hosts_resources_stays_the_workers_failure(tmp_path):
    """What the worker raised is a limit of the host, not the Dataset's code."""
    for t, m in (("RuntimeError", "unable to allocate shared memory(shm) for file "
                                  "</torch_6751_649867173_0>: No space left on device (28)"),
                 ("OSError", "[Errno 24] Too many open files"),
                 ("MemoryError", "")):
        ids = [f.id for f in findings_in(tmp_path, _WORKER.format(t=t, m=m))]
        assert "RANK_CRASHED" not in ids and ids, (t, ids)
    shm = [f.id for f in findings_of(Path("tests/fixtures/logs/shm_small.log"))]
    assert shm == ["ENV_SHM_TOO_SMALL", "DATALOADER_WORKER_FAILURE"]


def test_a_worker_exception_known_only_by_an_ambiguous_type_is_not_called_the_datasets(
        tmp_path):
    """Only "Caught RuntimeError in DataLoader worker process 0." (no original traceback):
    a RuntimeError is also how shared memory running out is raised, so no guess."""
    only = "[rank0]: RuntimeError: Caught RuntimeError in DataLoader worker process 0.\n"
    assert [f.id for f in findings_in(tmp_path, only)] == ["DATALOADER_WORKER_FAILURE"]
    keyed = "[rank0]: KeyError: Caught KeyError in DataLoader worker process 0.\n"
    assert [(f.id, f.ranks) for f in findings_in(tmp_path, keyed)] == [("RANK_CRASHED", [0])]


def test_what_a_worker_raised_is_a_family_the_next_step_reads(tmp_path):
    """A worker's error that stays the workers' failure (here: the rank also saw a worker
    exit) says whether it is the host's limit or the Dataset's code; the next step reads
    that family, not the title's words."""
    exited = "[rank1]: RuntimeError: DataLoader worker (pid(s) 4242) exited unexpectedly\n"
    cases: tuple[tuple[str, str, str | None, Action], ...] = (
            ("ValueError", "image has 4 channels, expected 3", "worker_code", Action.FIX_CODE),
            # the limit's own line is its own event (ENV_LIMITS leads); the worker's error
            # is then known by an ambiguous type alone: no family, the default next step
            ("OSError", "[Errno 24] Too many open files", None, Action.FIX_CONFIG),
            ("RuntimeError", "unable to allocate shared memory(shm) for file </torch_6>: No "
             "space left on device (28)", "worker_resource", Action.FIX_CONFIG),
            # a quoted key is the sample's name, not the error's
            ("KeyError", "'memory_killed'", "worker_code", Action.FIX_CODE))
    for t, m, family, action in cases:
        found = findings_in(tmp_path, _WORKER.format(t=t, m=m) + exited)
        dl = [f for f in found if f.id == "DATALOADER_WORKER_FAILURE"]
        assert dl and dl[0].evidence.get("family") == family, (t, [f.id for f in found])
        assert decide(dl).action is action, t
