"""Triage rule for a thread that died while its process went on.

An exception raised in a thread other than the main one (``threading``'s
``_bootstrap_inner`` is its traceback's first frame; Python prints "Exception in thread
NAME:" above it) ends that thread only: the process goes on without it. When it was doing
work the rank waits for (an environment worker of a vectorised RL env, a loader of a
model), the rank stops making progress without a death to report, and the job ends when
something outside stops it: the scheduler's time limit, a preemption, a cancel. That is a
rank that stopped making progress (RANK_UNRESPONSIVE) with the thread's error as the reason,
not a crash. Where the job went on (a loss printed after it, training completed) or the
process's own code raised too, the other rules say what happened.
"""

from __future__ import annotations

from ddpdoctor.diagnose.events import CASCADE, Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import (
    EventIndex,
    Rule,
    Verdict,
    cut,
    fmt,
    short_where,
    verdict,
)
from ddpdoctor.diagnose.launches import WENT_ON
from ddpdoctor.diagnose.rules_floor import is_teardown, stopped_from_outside

# what else a thread's death leaves in the log: its traceback's own lines, the launchers
# stopping the ranks once the scheduler stopped the job
_ITS_OWN = frozenset({K.TRACEBACK, K.TEARDOWN})


def _thread_error(e: Event) -> bool:
    """A thread's exception that is not a DataLoader's (its pin-memory thread, a worker's
    queue feeder: the data rules read those)."""
    return bool(e.data.get("in_thread")) and not e.data.get("in_dataloader") \
        and not e.data.get("tensor_handoff")


def _explained(e: Event, stops: list[Event]) -> bool:
    """A failure line the thread's death and the stop account for."""
    return _thread_error(e) or e in stops or e.kind in _ITS_OWN or is_teardown(e)


def _stops(ix: EventIndex, threads: list[Event]) -> list[Event]:
    """The scheduler's stops of a job whose threads died and that neither died another way
    (an exit code, a signal, the process's own exception: that says how it ended) nor went
    on (a line of its progress after the threads died), all in the threads' log."""
    source, last = threads[0].source, max(e.lineno for e in threads)
    stops = [e for e in ix.of(K.FLOOR) if stopped_from_outside(e) and e.source == source
             and e.lineno > last]
    if any(e.is_failure and not _explained(e, stops) for e in ix.events) \
            or any(e.source == source and e.lineno > last for e in ix.of(*WENT_ON)):
        return []
    return stops


def thread_died(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    threads = [e for e in ix.of(K.EXCEPTION) if _thread_error(e)]
    if not threads or earlier or len({e.source for e in threads}) > 1:
        return []
    stops = _stops(ix, threads)
    if not stops:
        return []
    first = threads[0]
    who = f"rank {fmt(threads)}" if fmt(threads) else "the job"
    where = first.get_str("where", "") or first.get_str("raised_at", "")
    at = f" at {short_where(where)}" if where else ""
    return [verdict(ix, "RANK_UNRESPONSIVE",
                    f"{who} stopped making progress after a thread raised "
                    f"{cut(first.get_str('exception', ''), 120)}{at} ({len(threads)} thread(s) "
                    f"died; a thread's exception does not end its process) and was stopped "
                    f"from outside: {cut(stops[0].text, 100)}",
                    [*threads, *stops],
                    {"thread_error": first.where, "stopped": stops[0].where,
                     "hint": "the thread's error is the cause (fix it first); to end the job "
                             "instead of leaving it idle until the scheduler stops it, "
                             "re-raise a thread's exception in the main thread (set "
                             "threading.excepthook, or join the thread and check its result)"},
                    ranks=sorted({e.rank for e in threads if e.rank is not None}))]


RULE = Rule("thread_died", thread_died,
            frozenset({K.EXCEPTION, K.TRACEBACK, K.FLOOR, K.TEARDOWN}) | CASCADE)
