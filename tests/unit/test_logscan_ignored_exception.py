"""An exception Python reports and goes on from ("Exception ignored in: <obj>",
"Exception ignored in atexit callback: <fn>": sys.unraisablehook's printout of a
destructor's or an atexit hook's error) is never the job's failure, whatever its class
and message (blind run 34: a finished 8-rank DeepSpeed run whose Triton autotune cache
write failed in an atexit hook on every process was called a crash). What came before it
still counts. Real logs, URLs in their sidecars."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
HEALTHY = REAL / "X15_healthy_ulysses_8rank_2node_atexit_triton_filenotfound_pg_warnings.log"


def _errors(found):
    return [f for f in found if f.severity == "error"]


def test_an_atexit_hooks_ignored_error_in_a_finished_run_is_no_failure():
    assert _errors(findings_of(HEALTHY)) == []


def test_a_destructors_ignored_error_after_a_real_one_keeps_the_real_one():
    # DeepSpeedCPUAdam.__del__ fails after its extension failed to load: the ImportError
    # is the failure, the ignored AttributeError is its echo
    lead = findings_of(REAL / "L1_deepspeed_cpu_adam_importerror_autopoison.log")[0]
    assert lead.id == "RANK_CRASHED" and "ImportError" in lead.title


def _report() -> str:
    lines = HEALTHY.read_text().splitlines(True)
    start = next(i for i, x in enumerate(lines) if "Exception ignored" in x)
    return "".join(x.split(": ", 1)[1] for x in lines[start:start + 11])  # one report


def test_a_real_exception_after_an_ignored_one_is_a_failure(tmp_path):
    text = _report() + ("Traceback (most recent call last):\n"
                        '  File "/home/u/train.py", line 12, in <module>\n'
                        "RuntimeError: CUDA error: an illegal memory access was encountered\n")
    assert _errors(findings_in(tmp_path, text))


def test_an_ignored_header_with_no_exception_does_not_hide_a_later_one(tmp_path):
    header = _report().splitlines(True)[0]
    text = (header + "".join(f"step {i} loss 1.0\n" for i in range(300))
            + "RuntimeError: the real failure\n")
    found = _errors(findings_in(tmp_path, text))
    assert found and "the real failure" in found[0].title


def test_the_chained_exception_of_an_ignored_report_is_ignored_too(tmp_path):
    report = _report()
    chained = (report + "\nDuring handling of the above exception, another exception "
               "occurred:\n\n" + "".join(report.splitlines(True)[1:]))
    assert _errors(findings_in(tmp_path, chained)) == []


def test_the_same_traceback_not_ignored_is_a_failure(tmp_path):
    text = "".join(_report().splitlines(True)[1:])  # without Python's "ignored" header
    assert _errors(findings_in(tmp_path, text))


# The same family in older wordings and other printers (blind run 38: two healthy MLPerf
# runs called crashes): Python < 3.12's "Error in atexit._run_exitfuncs:" header, and
# multiprocessing's finalizer loop, which prints a finalizer's traceback and goes on.
ATEXIT = REAL / "X21_sharp_error_atexit_stale_handle_healthy.log"
FINALIZERS = REAL / "X21_teardown_sem_unlink_traceback_healthy.log"


def test_pythons_older_atexit_error_header_is_ignored_too():
    assert _errors(findings_of(ATEXIT)) == []


def test_multiprocessing_finalizer_tracebacks_are_printed_not_raised():
    assert _errors(findings_of(FINALIZERS)) == []


def test_the_same_exception_raised_by_the_job_is_a_failure(tmp_path):
    lines = FINALIZERS.read_text().splitlines(True)
    start = next(i for i, x in enumerate(lines) if x.startswith("Traceback"))
    report = lines[start:start + 8]
    # raised from the training script, not from multiprocessing's finalizer loop
    report[1] = '  File "/workspace/ssd/train.py", line 775, in main\n'
    assert _errors(findings_in(tmp_path, "".join(report)))


def test_an_atexit_header_far_before_a_real_error_does_not_hide_it(tmp_path):
    header = next(x for x in ATEXIT.read_text().splitlines(True) if "atexit" in x)
    text = (header + "OSError: [Errno 116] Stale file handle\n"
            + "".join(f"step {i}\n" for i in range(300)) + "RuntimeError: the real one\n")
    found = _errors(findings_in(tmp_path, text))
    assert found and "the real one" in found[0].title
