"""Blind run 104's lessons (batches XH3 and XH4, committed run logs; URLs in the sidecars),
mechanisms with the real logs as their cases and variants that show the mechanism decides:

- A traceback a logger printed without its header and exception line (frames only) is
  the rank's own error when its frames are the rank's code: the rank's exit is a crash
  of its own, not the fallout of an error it felt.
- srun's one line for several tasks ("tasks 0-2: Exited with exit code 1") names every
  task; where srun started the ranks, the same unprefixed exception printed once per task
  is each of those ranks'.
- An exception raised in a thread other than the main one ends the thread, not the
  process: a job that then stops making progress until the scheduler stops it is a rank
  that stopped responding, with the thread's error as its reason.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

from ddpdoctor.diagnose.floor import _task_list, detect

R = Path("tests/fixtures/reallogs")
HEADLESS = R / "XH3_accelerate_ds_device_map_offload_crash.log"
SRUN_TASKS = R / "XH4_ddppo_srun_import_error_all_tasks.log"
THREADS = R / "XH4_ddppo_srun_envthreads_die_hang_preempted.log"


def test_a_headless_traceback_in_the_ranks_code_is_its_own_crash():
    found = findings_of(HEADLESS)
    assert errors_of(found) == [("RANK_CRASHED", [1])]
    assert "after a traceback through training_swanlab.py:226" in found[0].title
    assert found[0].evidence["traceback"].endswith(":77")


def test_a_headless_traceback_waiting_in_a_collective_is_still_felt(tmp_path):
    # the same frames, ending in a collective: a rank that waited there felt a peer's error
    text = HEADLESS.read_text().replace(
        "torch/nn/functional.py\", line 2264, in embedding",
        "torch/distributed/distributed_c10d.py\", line 2264, in all_reduce")
    found = findings_in(tmp_path, text)
    assert not any("after a traceback through" in f.title for f in found)


def test_srun_task_lists():
    assert _task_list("0-2") == (0, 1, 2)
    assert _task_list("0,3-5") == (0, 3, 4, 5)
    assert _task_list("7") == (7,)
    assert _task_list("5-2") == () and _task_list("0-99999") == () and _task_list("a") == ()
    hit = detect("srun: error: clank: tasks 0-2: Exited with exit code 1")
    assert hit is not None and hit.task == 0 and hit.tasks == (0, 1, 2) and hit.exit_code == 1
    one = detect("srun: error: gpu001: task 3: Out Of Memory")
    assert one is not None and one.task == 3 and one.tasks == ()


def test_one_identical_exception_per_failed_srun_task_is_each_tasks():
    found = findings_of(SRUN_TASKS)
    assert errors_of(found) == [("RANK_CRASHED", [0, 1, 2])]
    assert "ModuleNotFoundError: No module named 'utils'" in found[0].title


def test_srun_tasks_not_matching_the_copies_name_no_rank(tmp_path):
    # srun says two tasks failed, three copies were printed: which copy is whose is unknown
    text = SRUN_TASKS.read_text().replace("tasks 0-2:", "tasks 0-1:")
    assert errors_of(findings_in(tmp_path, text))[0][1] != [0, 1, 2]


def test_threads_that_died_then_a_job_stopped_from_outside_is_unresponsive():
    found = findings_of(THREADS)
    assert errors_of(found) == [("RANK_UNRESPONSIVE", [])]
    title = found[0].title
    assert "after a thread raised RuntimeError: PytorchStreamReader failed reading zip" in title
    assert "does not end its process" in title and "CANCELLED" in title
    assert found[0].evidence["stopped"].endswith(":1598")


def test_a_job_that_went_on_after_its_thread_died_is_not_unresponsive(tmp_path):
    lines = THREADS.read_text().splitlines(keepends=True)
    # a trainer's loss printed after the threads died (the HF Trainer's line of
    # F1_healthy_zero3_cache_flush_warning_llava.log): the job went on, then the same cancel
    loss = (R / "F1_healthy_zero3_cache_flush_warning_llava.log").read_text().splitlines()[2]
    went_on = lines[:1400] + [loss + "\n"] + lines[1400:]
    found = findings_in(tmp_path, "".join(went_on))
    assert not any(f.id == "RANK_UNRESPONSIVE" for f in found)


def test_a_thread_that_died_without_a_stop_after_it_is_not_called_a_hang(tmp_path):
    text = "".join(x for x in THREADS.read_text().splitlines(keepends=True)
                   if "CANCELLED" not in x)
    found = findings_in(tmp_path, text)
    assert not any(f.id == "RANK_UNRESPONSIVE" for f in found) and errors_of(found)


# the review's variants: each keeps a failure a failure


def test_a_death_srun_reports_after_the_threads_died_is_not_a_stop_from_outside(tmp_path):
    text = THREADS.read_text()
    cancel = "slurmstepd: error: *** STEP 838846.0"
    # srun's report of a task that died of a signal (floor.py's slurm.task, F5's shape)
    text = text.replace(cancel, "srun: error: cheetah: task 0: Segmentation fault\n" + cancel, 1)
    assert all(f.id != "RANK_UNRESPONSIVE" for f in findings_in(tmp_path, text))


def test_a_thread_header_long_before_does_not_mark_the_main_threads_exception(tmp_path):
    threads = THREADS.read_text().split("\n")
    noise = [x for x in threads if "pthread_setaffinity_np failed" in x][:300]
    main = SRUN_TASKS.read_text().split("\n")
    tb = main[main.index("Traceback (most recent call last):"):][:11]  # one rank's traceback
    cancel = [x for x in threads if "CANCELLED AT" in x]
    text = "\n".join(["Exception in thread Thread-9:", *noise, *tb, *cancel]) + "\n"
    found = findings_in(tmp_path, text)
    assert all(f.id != "RANK_UNRESPONSIVE" for f in found)
    assert errors_of(found)[0][0] == "RANK_CRASHED"


def test_an_exception_whose_message_names_a_node_rank_is_still_an_exception(tmp_path):
    # launch.node_rank is context (a launch command's node rank): on an exception line it
    # must not stand in for the exception
    text = SRUN_TASKS.read_text().replace("No module named 'utils'",
                                          "No module named 'utils' (--nnodes=2 --node_rank=1)")
    assert errors_of(findings_in(tmp_path, text))[0][0] == "RANK_CRASHED"
