"""Blind run 57's lessons (batches X59, X60, X61 and X62), each a family:

- Processes that share one stream with no rank prefix (torch.distributed.launch, mp.spawn)
  and fail at once interleave their tracebacks: four headers, then exception lines glued
  together or lost. A traceback cut by another header of the same stream waits for its
  exception line; one whose line never came still counts as a copy, so the launcher's
  summary of four failed ranks with one exit code names all four.
- A log holding several launches (a relaunch appended to the same file): a failure
  followed by a launcher's start-up banner and a launch that went on (a trainer's losses,
  no failure) is an earlier attempt, said as a warning; the job is the launch that went on.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of, lines_of

from ddpdoctor.diagnose import launches
from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K

DIR = Path("tests/fixtures/reallogs")
TANGLED = DIR / "X62_dist_launch_all_ranks_import_error.log"
RELAUNCHED = DIR / "X62_dist_launch_mmseg_trains_on_warnings.log"


def test_interleaved_tracebacks_of_every_failed_rank_name_every_rank():
    lead = findings_of(TANGLED)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0, 1, 2, 3])
    assert lead.title.count("ModuleNotFoundError") == 1  # the glued copy says the same


def test_a_later_launch_that_shows_no_progress_leaves_the_failure_the_jobs():
    # the import-error log ends with the next launch's banner and environment info only
    found = findings_of(TANGLED)
    assert found[0].severity == "error" and not found[0].evidence.get("earlier_launch")


def test_a_failure_before_a_launch_that_trained_on_is_an_earlier_attempt():
    found = findings_of(RELAUNCHED)
    assert [f for f in found if f.severity == "error"] == []
    lead = found[0]
    assert (lead.id, lead.severity) == ("RANK_CRASHED", "warning")
    assert lead.evidence["earlier_launch"] is True
    assert "an earlier launch in this log failed" in lead.title
    assert "numpy" in lead.title


def test_the_same_failure_with_no_launch_after_it_is_the_jobs(tmp_path):
    failed = lines_of(RELAUNCHED, 1, 24)  # the failed command alone
    assert findings_in(tmp_path, failed)[0].severity == "error"
    cut = lines_of(RELAUNCHED, 1, 126)  # the launch began, but nothing shows it went on
    assert findings_in(tmp_path, cut)[0].severity == "error"


def test_a_failure_in_the_later_launch_is_the_jobs_again(tmp_path):
    text = RELAUNCHED.read_text() + lines_of(TANGLED, 97, 145)
    found = findings_in(tmp_path, text)
    assert (found[0].id, found[0].severity) == ("RANK_CRASHED", "error")
    assert not any(f.evidence.get("earlier_launch") for f in found)  # one log, read whole


def _ev(kind: K, line: int, source: str = "job.log", **data: object) -> Event:
    return Event(kind, source, line, None, kind.value, data)


def test_split_needs_a_launch_after_the_last_failure_and_progress_after_it():
    crash = _ev(K.EXCEPTION, 3, exception="ValueError: x")
    start = _ev(K.LAUNCH_START, 5)
    losses = [_ev(K.LOSS_VALUE, 10 + i, value=1.0) for i in range(launches.MIN_LOSSES)]
    parts = launches.split([crash, start, *losses])
    assert parts is not None and parts.earlier == (crash,) and parts.start is start
    assert launches.split([crash, start, *losses[:-1]]) is None  # too few losses
    done = _ev(K.JOB_DONE, 9)
    assert launches.split([crash, start, done]) is not None  # a trainer's own word
    assert launches.split([start, crash, *losses]) is None  # the failure is the launch's
    assert launches.split([start, *losses]) is None  # nothing failed
    other = _ev(K.LAUNCH_START, 5, source="rank1.log")
    assert launches.split([crash, other, *losses]) is None  # two files: no one order


def test_a_traceback_closed_at_the_logs_end_leaves_the_interleaved_ones_waiting(tmp_path):
    # two headers of one unprefixed stream, then the log ends: both are tracebacks
    import io

    from ddpdoctor.diagnose import scan_stream

    cut = lines_of(TANGLED, 97, 100).encode()
    evs = scan_stream(io.BytesIO(cut), "x.log")[0]
    assert [e.kind for e in evs if e.kind is K.TRACEBACK] == [K.TRACEBACK, K.TRACEBACK]
