"""A rank's profile window, summarised: what ``run --profile START:STEPS`` reports.

The watch (watch/profile.py) writes one small JSON file per rank beside the events file,
next to the full torch.profiler trace; ``run`` reads them back into its report. No torch.
"""

from __future__ import annotations

import glob
import json
import os
from dataclasses import asdict, dataclass

from ddpdoctor.core.contract import PROFILE_TOP_FILE, PROFILE_TOP_GLOB

SCHEMA = "ddpdoctor.profile/1"


@dataclass(frozen=True)
class OpTime:
    """One operator over the window: its own time (not its children's) and calls."""

    name: str
    calls: int
    self_cpu_ms: float
    self_device_ms: float = 0.0


@dataclass(frozen=True)
class ProfileWindow:
    rank: int
    first_step: int
    steps: int
    step_ms: float | None      # mean wall time of a step in the window (the watch's clock)
    data_ms: float | None      # of which waiting for data
    forward_ms: float | None   # of which forward (where the watch timed it)
    top: tuple[OpTime, ...]
    trace: str | None          # the chrome trace's path

    def write(self, directory: str) -> None:
        path = os.path.join(directory, PROFILE_TOP_FILE.format(rank=self.rank))
        try:
            with open(path, "w") as f:
                json.dump({"schema": SCHEMA, **asdict(self)}, f)
        except OSError:
            pass  # a full disk must not stop training


def parse_window(text: str) -> tuple[int, int]:
    """``"START:STEPS"`` -> (START, STEPS), both >= 1."""
    start, sep, steps = text.partition(":")
    try:
        window = (int(start), int(steps) if sep else 0)
    except ValueError:
        raise ValueError(f"{text!r} is not START:STEPS (e.g. 20:5)") from None
    if window[0] < 1 or window[1] < 1:
        raise ValueError(f"{text!r}: START and STEPS must be >= 1 (e.g. 20:5)")
    return window


def parse(data: object) -> ProfileWindow:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise ValueError("not a profile window")
    top = tuple(OpTime(str(o["name"])[:200], int(o["calls"]), float(o["self_cpu_ms"]),
                       float(o.get("self_device_ms") or 0.0)) for o in data["top"][:50])

    def ms(key: str) -> float | None:
        value = data.get(key)
        return None if value is None else float(value)

    return ProfileWindow(int(data["rank"]), int(data["first_step"]), int(data["steps"]),
                         ms("step_ms"), ms("data_ms"), ms("forward_ms"), top,
                         str(data["trace"]) if data.get("trace") else None)


def read_all(directory: str) -> list[ProfileWindow]:
    out = []
    for path in sorted(glob.glob(os.path.join(directory, PROFILE_TOP_GLOB))):
        try:
            with open(path, "rb") as f:
                out.append(parse(json.loads(f.read(1 << 20))))
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return sorted(out, key=lambda p: p.rank)
