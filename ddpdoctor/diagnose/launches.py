"""Several launches in one log: an earlier one failed, a later one went on.

A batch script that retries, a user who fixed a setting and started again, ``>>`` onto one
file: one log then holds several launches, and the failure of an earlier one is not the
fate of the job the log ends with. A launcher's start-up banner (torchrun's
OMP_NUM_THREADS line, the deprecated torch.distributed.launch's warning, DeepSpeed's
"WORLD INFO DICT") after the last failure starts a launch; when what follows it shows the
job going on (a trainer's losses, its word that training completed, a launcher's "exits
successfully") and nothing failing, the log is read as two: what came before, diagnosed
on its own and said as a warning, and the launch that went on, diagnosed as the job.

Pure: events in, events out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K

# what only a launch that got going prints
WENT_ON = frozenset({K.LOSS_VALUE, K.JOB_DONE, K.LAUNCH_SUCCEEDED})
# a trainer's losses: at least this many (one line can be a peer's last before it died)
MIN_LOSSES = 3


@dataclass(frozen=True)
class Split:
    """The events of the launches before ``start`` and of the launch it began."""

    earlier: tuple[Event, ...]
    current: tuple[Event, ...]
    start: Event
    progress: int  # the lines that show the current launch going on


def split(events: Sequence[Event]) -> Split | None:
    """The log as earlier launches and the current one, where a launch that began after the
    last failure went on; None where the log is one launch (or several files: their
    orders are not one)."""
    if len({e.source for e in events}) != 1:
        return None
    failed = [i for i, e in enumerate(events) if e.is_failure]
    if not failed:
        return None
    at = next((i for i in range(failed[-1] + 1, len(events))
               if events[i].kind is K.LAUNCH_START), None)
    if at is None:
        return None
    after = [e for e in events[at:] if e.kind in WENT_ON]
    losses = sum(e.kind is K.LOSS_VALUE for e in after)
    if losses < MIN_LOSSES and len(after) == losses:
        return None
    return Split(tuple(events[:at]), tuple(events[at:]), events[at], len(after))


def went_on_after(events: Sequence[Event], e: Event) -> bool:
    """The job went on after ``e`` and its repeats (in its log): its word that training
    completed, or a trainer's losses (MIN_LOSSES of them, of ``e``'s rank where ``e`` has
    one) came later. A warning's retry that then connected, a banner logged at an error
    level: what the job did next says they did not stop it. Losses past the scanner's cap
    count by the lines their kept event recorded (Event.tail_lines)."""
    end = e.last_lineno
    mine = [x for x in events if x.source == e.source and (e.rank is None or x.rank in
                                                           (None, e.rank))]
    if any(x.kind in WENT_ON and x.kind is not K.LOSS_VALUE and x.lineno > end for x in mine):
        return True
    losses = sum((x.lineno > end) + sum(n > end for n in x.tail_lines)
                 for x in mine if x.kind is K.LOSS_VALUE)
    return losses >= MIN_LOSSES
