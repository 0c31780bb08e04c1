"""What a hung job printed before run stopped it: read up to the stop, never past it.

The fixture is the kept output of tests/fixtures/run_jobs/fd_limit_job.py under
`ddpdoctor run --hang-timeout 6` (torch 2.13, gloo): four "Too many open files" tracebacks
from rank 1's DataLoader workers, then, after run stopped the hang, torchrun's teardown."""

from __future__ import annotations

from paths import FIXTURES

from ddpdoctor.run.triage import before_stop

LOG = FIXTURES / "run_jobs" / "fd_limit_job.output.log"


def _offset_of(marker: bytes) -> int:
    return LOG.read_bytes().index(marker)


def test_the_limit_printed_before_the_hang_is_its_cause():
    upto = _offset_of(b"W1129 10:47:35.186000 11520 torch/distributed/elastic/agent")
    found = before_stop(LOG, upto)
    assert [f.id for f in found] == ["ENV_LIMITS"]
    assert str(found[0].evidence["first_seen"]).endswith(":11")


def test_the_stops_own_teardown_is_no_cause():
    # nothing of the job's before the stop but torchrun's banner: the SignalException
    # traceback after it must not become a cause
    upto = _offset_of(b"Traceback")
    assert before_stop(LOG, upto) == []


def test_a_file_that_went_away_gives_no_cause(tmp_path):
    assert before_stop(tmp_path / "gone.log", 1000) == []


def test_a_watchdog_timeout_is_the_hang_itself_not_its_cause():
    # a real NCCL watchdog timeout and nothing before it (its source URL in the .json
    # beside it): the stacks name a hang better than the timeout it ran into
    log = FIXTURES / "reallogs" / "F3_nccl_timeout_allreduce_ddw_a100.log"
    assert before_stop(log, log.stat().st_size, hang=True) == []


def test_a_watchdog_timeout_before_a_signal_to_run_is_a_cause():
    # no hang was confirmed: the timeout is what the job shows, nothing names it better
    log = FIXTURES / "reallogs" / "F3_nccl_timeout_allreduce_ddw_a100.log"
    assert [f.id for f in before_stop(log, log.stat().st_size)] == ["COLLECTIVE_TIMEOUT"]


def test_an_earlier_attempts_failure_is_not_the_stopped_attempts_cause():
    # a restarted job: what the attempt before printed (its own section says why it
    # ended) is skipped; only the last attempt's lines up to the stop are read
    upto = _offset_of(b"W1129 10:47:35.186000 11520 torch/distributed/elastic/agent")
    assert [f.id for f in before_stop(LOG, upto, from_line=12)] == ["ENV_LIMITS"]
    assert before_stop(LOG, upto, from_line=33) == []
