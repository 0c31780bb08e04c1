"""Triage rule for a communication error the job outlived.

ProcessGroupNCCL's watchdog reports an error of a collective it polls asynchronously
("Collective WorkNCCL(SeqNum=..) raised the following async exception: NCCL error: ...").
Where the job then went on to say its training completed, and nothing in the log says a
process died or was torn down (no exit report, no launcher's failure summary, no signal),
the error did not end the job: its results are whole. That is a warning (the transport
failed once, on the last collectives of a run, often at teardown), not a failed job. A
death report anywhere, an exception, or no completion after the error keeps the usual
rules (COMM_CONNECTIVITY, RANK_CRASHED).
"""

from __future__ import annotations

from ddpdoctor.diagnose.events import CASCADE, Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, cut, fmt, verdict

# what an NCCL error's report is made of: the watchdog's line, NCCL's own detail lines
_NCCL_REPORT = frozenset({K.NCCL_SYSTEM, K.NCCL_REMOTE, K.NCCL_DETAIL, K.NCCL_WORK_STATE,
                          K.NCCL_CUDA, K.NCCL_WARN, K.NCCL_ABORTED})
_ASYNC = "async exception"
# ProcessGroupNCCL's words for the process it ends after such an error
_TAKEN_DOWN = ("taking the entire process down", "watchdog thread terminated with exception")


def _async_report(e: Event) -> bool:
    return e.kind in _NCCL_REPORT and _ASYNC in e.text


def _says_it_ended(e: Event) -> bool:
    return any(words in e.text for words in _TAKEN_DOWN)


def finished_after_async_error(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    failures = [e for e in ix.events if e.is_failure]
    reports = [e for e in failures if _async_report(e)]
    if earlier or not reports or any(e.kind not in _NCCL_REPORT or _says_it_ended(e)
                                     for e in failures):
        return []
    last = max(failures, key=lambda e: e.lineno)
    done = [d for d in ix.of(K.JOB_DONE) if d.source == last.source and d.lineno > last.lineno]
    if not done or len({e.source for e in failures}) > 1:
        return []
    first = reports[0]
    who = f"rank {fmt(reports)}" if fmt(reports) else "a rank"
    return [verdict(ix, "COMM_CONNECTIVITY",
                    f"{who}'s watchdog reported an NCCL error on a collective "
                    f"({cut(first.text, 120)}), and the job went on to say its training "
                    f"completed ({cut(done[-1].text, 60)}) with no process reported dead: "
                    "the run's results stand", failures,
                    {"completed": done[-1].where,
                     "hint": "an async NCCL error on the last collectives of a run is most "
                             "often teardown (a process group destroyed while a collective "
                             "was still polled): call dist.destroy_process_group() after "
                             "the last collective; if it recurs mid-run, NCCL_DEBUG=INFO "
                             "names the failing call"},
                    ranks=[], severity="warning")]


RULE = Rule("finished_after_async_error", finished_after_async_error, CASCADE | _NCCL_REPORT)
