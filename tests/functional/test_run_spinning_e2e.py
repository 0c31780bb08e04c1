"""End to end: a rank that spins on the CPU while its peer waits in a collective is hung.

Real 2-rank gloo jobs under `ddpdoctor run` with its adaptive threshold (the default,
--hang-min 5: the threshold learns the job's pace from 90 short steps). Rank 1 then
busy-waits in one of three ways (tests/fixtures/run_jobs/spin_job.py) while rank 0 waits
in the next step's all_reduce: run must name HANG_RANK_MISSING_COLLECTIVE, rank 1 and
its loop's line, within the threshold plus 10 s, although rank 1 burns CPU all along. A
healthy job whose rank 1 evaluates for 25 s meanwhile (CPU busy, its stack moving
through the model) must run to its end, exit 0, with no finding; so must one whose rank 1
counts words for 25 s in a one-line ``for`` loop (its stack on one line every read, as a
spin's: its source says it steps through data).

The five jobs run side by side (a module fixture): ~80 s on 2 busy cores.
"""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from run_helpers import PY, RunJob, findings, run_all

pytestmark = [pytest.mark.slow, pytest.mark.matrix]

SCRIPT = Path(__file__).parents[1] / "fixtures" / "run_jobs" / "spin_job.py"
SLACK_S = 10.0  # the brief: named within the adaptive threshold plus 10 s
# mode -> (the function rank 1 spins in, the text of its loop's line)
SPINS = {
    "flag": ("spin_on_flag", "while not os.path.exists(flag):"),
    "counter": ("spin_on_counter", "while True: n += 1"),
    "deadline": ("spin_until_deadline", "while time.time() < deadline: pass"),
}
EVAL_S = 25.0


def _line_of(text: str) -> int:
    lines = SCRIPT.read_text().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if line.strip().startswith(text))


def _cmd(mode: str) -> list[str]:
    return [PY, "-m", "torch.distributed.run", "--nproc-per-node", "2", str(SCRIPT), mode,
            str(EVAL_S)]


@pytest.fixture(scope="module")
def spin_runs(tmp_path_factory):
    base = tmp_path_factory.mktemp("run-spin")
    jobs = {mode: RunJob(mode, base / mode, _cmd(mode),
                         ["--hang-min", "5", "--kill-grace", "2"])
            for mode in (*SPINS, "evaluate", "vocab")}
    run_all(list(jobs.values()), deadline_s=220)
    return jobs


def _said(job: RunJob) -> str:
    return "\n".join(line for line in job.output.splitlines()
                     if line.startswith("ddpdoctor run:"))


@pytest.mark.timeout(300)
@pytest.mark.parametrize("mode", list(SPINS))
def test_a_spinning_rank_is_named_with_its_line(spin_runs, mode):
    job = spin_runs[mode]
    print(_said(job))  # shown whole on a failure (an assert message is cut short)
    assert job.returncode == 1, f"{mode}: rc {job.returncode}\n{job.output[-3000:]}"
    report = job.report()
    assert report["exit_code"] == 1
    got = findings(report)
    assert got and got[0] == ("HANG_RANK_MISSING_COLLECTIVE", [1]), got
    lead = report["findings"][0]
    function, loop = SPINS[mode]
    where = f"spin_job.py:{_line_of(loop)} in {function}"
    assert lead["evidence"]["culprits"][0].startswith("rank 1 ")
    assert where in lead["evidence"]["culprits"][0], lead["evidence"]
    assert lead["evidence"]["waiting"]["ranks"] == [0], lead["evidence"]
    # how run knew: rank 1's stacks, compared
    [spun] = lead["evidence"]["spinning"]
    assert spun.startswith(f"rank 1 spins at {where}"), spun
    hang = report["probes"]["hang"]["data"]
    assert hang["stopped"] is True
    threshold = hang["hang_timeout_s"]
    assert threshold < 300, hang  # the adaptive threshold learned the job's pace
    began = float((job.ready_dir / "rank1.ready").read_text())
    print(f"{mode}: named {hang['detected_at'] - began:.1f} s after rank 1 began to spin; "
          f"threshold {threshold:.1f} s")
    assert hang["detected_at"] - began <= threshold + SLACK_S, (hang, began)
    for r in report["probes"]["ranks"]["data"]["ranks"]:
        alive = psutil.pid_exists(r["pid"]) and \
            psutil.Process(r["pid"]).status() != psutil.STATUS_ZOMBIE
        assert not alive, f"rank {r['rank']} (pid {r['pid']}) survived the stop"


@pytest.mark.timeout(300)
def test_a_long_evaluation_on_one_rank_is_not_called_hung(spin_runs):
    """Rank 1 evaluates for 25 s (CPU busy) while rank 0 waits in all_reduce, then both
    step on: looked at (more than once: the quiet spell is several thresholds long), its
    stack moved between reads each time, never stopped."""
    job = spin_runs["evaluate"]
    print(_said(job))
    assert job.returncode == 0, f"rc {job.returncode}\n{job.output[-3000:]}"
    report = job.report()
    assert report["exit_code"] == 0 and findings(report) == [], findings(report)
    assert "hang" not in report["probes"]
    assert "rank 1: done" in job.output and "rank 0: done" in job.output
    looks = report["probes"]["stall"]["data"]["looks"]
    assert looks and not any(lk["confirmed"] for lk in looks), looks
    # at least one look measured rank 1 busy and cleared it by its moving stack
    moved = [lk["reason"] for lk in looks if "rank 1 used" in lk["reason"]]
    assert moved and all("working, not hung" in r for r in moved), json.dumps(looks)


@pytest.mark.timeout(300)
def test_a_long_word_count_in_a_for_loop_is_not_called_hung(spin_runs):
    """Rank 1 counts words in ``for w in words: counts[w] = counts.get(w, 0) + 1`` for
    ~25 s while rank 0 waits in all_reduce: the same line in every read, like a spin, but
    a ``for`` loop through data in its source: looked at, left running."""
    job = spin_runs["vocab"]
    print(_said(job))
    assert job.returncode == 0, f"rc {job.returncode}\n{job.output[-3000:]}"
    report = job.report()
    assert report["exit_code"] == 0 and findings(report) == [], findings(report)
    assert "rank 1: done" in job.output and "rank 0: done" in job.output
    looks = report["probes"]["stall"]["data"]["looks"]
    assert looks and not any(lk["confirmed"] for lk in looks), looks
    counted = [lk["reason"] for lk in looks if "rank 1 used" in lk["reason"]]
    loop = f"stayed in a `for` loop (spin_job.py:{_line_of('for w in words:')})"
    assert counted and any(loop in r for r in counted), json.dumps(looks)
