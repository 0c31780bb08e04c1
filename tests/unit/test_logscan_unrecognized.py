"""Never silent: a log that shows a failure no signature explains gives UNRECOGNIZED_FAILURE
(exit 1), quoting the first failing line with its rank and file:line."""

from __future__ import annotations

import io

import pytest

from ddpdoctor.diagnose import scan_stream, triage


def run(text: str):
    events, _ = scan_stream(io.BytesIO(text.encode()), "job.log")
    return triage(events)


def test_unknown_exception_class_quotes_rank_and_user_line():
    # a rank's own exception is its crash, whatever its class (the corpus' convention):
    # named by the frames when the exception line names no Error/Exception (run 9)
    (f,) = run("step 1 loss 2.0\n"
               "[rank3]: Traceback (most recent call last):\n"
               '[rank3]:   File "/work/train.py", line 12, in <module>\n'
               "[rank3]:     main()\n"
               "[rank3]: mylib.WeirdThing: the flux capacitor is empty\n")
    assert (f.id, f.ranks, f.severity) == ("RANK_CRASHED", [3], "error")
    assert f.evidence["root_line"].startswith("job.log:2: [rank3] Traceback")
    assert f.evidence["where"] == "/work/train.py:12 in <module>"
    assert "train.py:12" in f.title


@pytest.mark.parametrize("line,severity", [
    # healthy jobs print NCCL WARN lines too (a missing libibverbs, a proxy thread closing at
    # exit: tests/fixtures/reallogs/L3_healthy_*): said, as a warning, never a failure
    ("host:1:2 [0] misc/foo.cc:12 NCCL WARN Something nobody has seen before", "warning"),
    ("[rank1]:[E1206 18:44:16.994932383 ProcessGroupNCCL.cpp:2001] [PG 0 Rank 1] a brand new "
     "failure text", "error"),
])
def test_unknown_failure_lines(line, severity):
    (f,) = run("epoch 1 loss 0.5\n" + line + "\n")
    assert f.id == "UNRECOGNIZED_FAILURE" and f.evidence["root_line"].startswith("job.log:2:")
    assert f.severity == severity


def test_a_python_exception_is_a_crash_of_its_rank_not_unrecognized():
    (f,) = run("[rank1]: SomeLibraryError: it broke\n")
    assert (f.id, f.ranks) == ("RANK_CRASHED", [1])


def test_known_failure_wins_and_unknown_lines_are_listed_not_dropped():
    findings = run("host:1:2 [0] misc/foo.cc:12 NCCL WARN Something nobody has seen before\n"
                   "[rank1]: RuntimeError: DataLoader timed out after 3 seconds\n")
    assert findings[0].id == "DATALOADER_WORKER_FAILURE"
    assert any("NCCL WARN" in x for x in findings[0].evidence.get("fallout", [])
               + findings[0].evidence.get("also_in_logs", []))


@pytest.mark.parametrize("text", [
    "epoch 1 loss 0.5\nepoch 2 loss 0.4\n",
    "NCCL INFO NCCL_SOCKET_IFNAME set by environment to eth0\nNCCL version 2.21.5+cuda12.4\n",
    "Running tokenizer on dataset on rank 0: 100%|####| 10/10\n",
])
def test_healthy_logs_stay_healthy(text):
    assert run(text) == []
