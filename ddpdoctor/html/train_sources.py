"""Where ``ddpdoctor train --html`` has its ranks write what the page draws."""

from __future__ import annotations

import os
import tempfile
from typing import Any


def prepare(values: dict[str, Any], env: dict[str, str]) -> str | None:
    """Give the trainer a --json-log if it has none, and the watch an events file; returns
    the events path (None when --watch is off: nothing would write it)."""
    directory = None
    if not values.get("json_log"):
        directory = tempfile.mkdtemp(prefix="ddpdoctor-train-")
        values["json_log"] = os.path.join(directory, "train.jsonl")
    if not values.get("watch"):
        return None
    if env.get("DDPDOCTOR_EVENTS"):
        return env["DDPDOCTOR_EVENTS"] if "{rank}" not in env["DDPDOCTOR_EVENTS"] else None
    directory = directory or tempfile.mkdtemp(prefix="ddpdoctor-train-")
    env["DDPDOCTOR_EVENTS"] = os.path.join(directory, "watch-events.jsonl")
    return env["DDPDOCTOR_EVENTS"]
