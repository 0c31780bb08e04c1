"""Where ``ddpdoctor train --html`` has its ranks write what the page draws."""

from __future__ import annotations

import os
import tempfile

from ddpdoctor.core.contract import EVENTS, EVENTS_FILE, TRAIN_LOG_FILES


def prepare(values: dict[str, object], env: dict[str, str]) -> str | None:
    """Give the trainer a --json-log if it has none, and the watch an events file; returns
    the events path (None when --watch is off: nothing would write it)."""
    directory = None
    if not values.get("json_log"):
        directory = tempfile.mkdtemp(prefix="ddpdoctor-train-")
        values["json_log"] = os.path.join(directory, TRAIN_LOG_FILES[0])
    if not values.get("watch"):
        return None
    if env.get(EVENTS):
        return env[EVENTS] if "{rank}" not in env[EVENTS] else None
    directory = directory or tempfile.mkdtemp(prefix="ddpdoctor-train-")
    env[EVENTS] = os.path.join(directory, EVENTS_FILE)
    return env[EVENTS]
