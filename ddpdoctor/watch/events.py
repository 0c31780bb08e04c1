"""The watch's file names and the JSON-lines event format. No torch.

Every event is one JSON object per line: a finding is the Finding dict plus
``kind="finding"``, the emitting ``rank`` and the ``step``; other kinds (``stall``,
``fr_dump``) carry their own fields. Several ranks may append to one file: each line is
written with a single ``write`` on an ``O_APPEND`` descriptor, so lines never interleave.
"""

from __future__ import annotations

import json
import os
from typing import Any

from ddpdoctor.core.contract import SERIES_FILE

# the stream and its sinks (watch/stream.py); the old names stay importable
from ddpdoctor.watch.stream import SCHEMA, DDPDoctorWarning, EventStream

EventSink = EventStream
__all__ = ["SCHEMA", "DDPDoctorWarning", "EventSink", "EventStream", "event_path",
           "series_path", "read_events"]
# Per-rank step series the watch writes beside the events file (watch/series_file.py);
# the HTML report reads them back (html/series.py). One name for both sides.
SERIES_NAME = SERIES_FILE


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
