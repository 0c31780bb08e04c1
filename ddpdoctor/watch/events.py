"""Where watch findings go: Python warnings, log records and JSON lines. No torch.

Every event is one JSON object per line: a finding is the Finding dict plus
``kind="finding"``, the emitting ``rank`` and the ``step``; other kinds (``stall``,
``fr_dump``) carry their own fields. Several ranks may append to one file: each line is
written with a single ``write`` on an ``O_APPEND`` descriptor, so lines never interleave.
"""

from __future__ import annotations

import json
import logging
import os
import time
import warnings
from typing import Any

from ddpdoctor.findings import Finding, format_ranks

SCHEMA = "ddpdoctor.event/1"
# Per-rank step series the watch writes beside the events file (watch/series_file.py);
# the HTML report reads them back (html/series.py). One name for both sides.
SERIES_SCHEMA = "ddpdoctor.watch-series/1"
SERIES_NAME = "watch-series-rank{rank}.jsonl"
SERIES_GLOB = "watch-series-rank*.jsonl"
log = logging.getLogger("ddpdoctor.watch")
# Library convention: records reach the user's handlers, but without any configured the
# warning itself is the one line on stderr (no duplicate from logging's last resort).
log.addHandler(logging.NullHandler())


class DDPDoctorWarning(UserWarning):
    """The category of every warning ddpdoctor.watch() emits; the finding id is in the text.

    Silence with ``warnings.simplefilter("ignore", ddpdoctor.DDPDoctorWarning)``, or turn
    into errors with ``-W error::ddpdoctor.DDPDoctorWarning``.
    """


def event_path(template: str | None, rank: int) -> str | None:
    if not template:
        return None
    return template.replace("{rank}", str(rank))


def series_path(events_path: str | None, rank: int) -> str | None:
    """The rank's series file: beside its events file; None when no events file is set."""
    if not events_path:
        return None
    return os.path.join(os.path.dirname(os.path.abspath(events_path)),
                        SERIES_NAME.format(rank=rank))


class EventSink:
    def __init__(self, path: str | None, rank: int, warn: bool = True,
                 log_records: bool = True) -> None:
        self.path = event_path(path, rank)
        self.rank = rank
        self.warn = warn
        self.log_records = log_records
        self._seen: set[tuple[str, tuple[int, ...]]] = set()

    def finding(self, finding: Finding, step: int, once: bool = True) -> bool:
        """Emit ``finding``; with ``once`` a repeat of the same id and ranks is dropped."""
        key = (finding.id, tuple(finding.ranks))
        if once and key in self._seen:
            return False
        self._seen.add(key)
        finding.evidence.setdefault("step", step)
        where = f"rank {format_ranks(finding.ranks)}" if finding.ranks else "all ranks"
        text = (f"ddpdoctor {finding.id} ({finding.severity}, {where}, step {step}): "
                f"{finding.title} -- `ddpdoctor playbook {finding.playbook}`")
        self.write({"kind": "finding", **finding.to_dict()}, step)
        if self.log_records:
            level = logging.ERROR if finding.severity == "error" else logging.WARNING
            log.log(level, text)
        if self.warn:
            # A user who turned DDPDoctorWarning into errors gets the exception here.
            # Raised from a hook deep inside torch: no frame of the caller's means anything,
            # so the warning names the watch, the rank and (as its "line") the step.
            warnings.warn_explicit(text, DDPDoctorWarning, f"ddpdoctor.watch rank {self.rank}",
                                   step, module="ddpdoctor.watch")
        return True

    def event(self, kind: str, step: int, **data: Any) -> None:
        self.write({"kind": kind, **data}, step)
        if self.log_records:
            log.warning("ddpdoctor %s (rank %d, step %d): %s", kind, self.rank, step,
                        json.dumps(data, default=str)[:500])

    def write(self, record: dict[str, Any], step: int) -> None:
        if not self.path:
            return
        line = {"schema": SCHEMA, "rank": self.rank, "step": step, "time": time.time(),
                **record}
        data = (json.dumps(line, default=str) + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                os.write(fd, data)
            finally:
                os.close(fd)
        except OSError as e:  # a full disk must not stop training
            log.debug("ddpdoctor: cannot write events to %s: %s", self.path, e)


def read_events(path: str) -> list[dict[str, Any]]:
    """All events in a JSON-lines file (unparseable lines are skipped)."""
    out = []
    with open(path, "rb") as f:
        for raw in f:
            try:
                out.append(json.loads(raw))
            except ValueError:
                continue
    return out
