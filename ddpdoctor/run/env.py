"""The job's environment: where ranks write heartbeats and Flight Recorder dumps, and the
zero-code-change watch bootstrap. Only variables ddpdoctor owns are added; the user's are
kept as they are."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

# RUN_ID is inherited by every process of the job: how run finds them all
from ddpdoctor.core.contract import (
    EVENTS,
    EVENTS_FILE,
    FR_DIR,
    FR_SUBDIR,
    HEARTBEAT_DIR,
    HEARTBEAT_SUBDIR,
    RUN_ID,
    WATCH,
)

__all__ = ["EVENTS", "FR_DIR", "HEARTBEAT_DIR", "RUN_ID", "WATCH", "JobEnv"]


@dataclass
class JobEnv:
    env: dict[str, str]
    fr_dir: str
    heartbeat_dir: str
    watch: bool
    notes: list[str] = field(default_factory=list)
    events_path: str | None = None  # where the ranks' watch writes its findings


def watch_bootstrap_dir() -> str | None:
    """The directory holding watch's ``sitecustomize.py``, or None where watch lacks it."""
    try:
        from ddpdoctor.watch.bootstrap import BOOTSTRAP_DIR
    except ImportError:
        return None
    if not os.path.isfile(os.path.join(BOOTSTRAP_DIR, "sitecustomize.py")):
        return None
    return BOOTSTRAP_DIR


def job_environment(base: Mapping[str, str], run_dir: str | Path, watch: bool,
                    bootstrap_dir: str | None = None) -> JobEnv:
    """Pure: ``base`` plus ddpdoctor's variables.

    A directory the user already chose (``DDPDOCTOR_FR_DIR`` / ``DDPDOCTOR_HEARTBEAT_DIR``
    set) is kept and read from. ``PYTHONUNBUFFERED=1`` is added unless set: the job's
    stdout is a pipe now, and block buffering would hold its lines back (the output is
    both what the user watches and a progress signal).
    """
    env = dict(base)
    notes: list[str] = []
    run_dir = str(run_dir)
    env.setdefault(FR_DIR, os.path.join(run_dir, FR_SUBDIR))
    env.setdefault(HEARTBEAT_DIR, os.path.join(run_dir, HEARTBEAT_SUBDIR))
    env.setdefault("PYTHONUNBUFFERED", "1")
    # always this run's own (a nested run's job is its own job)
    env[RUN_ID] = f"{os.getpid()}-{os.urandom(8).hex()}"
    on = False
    if watch:
        if bootstrap_dir is None:
            notes.append("--watch: ddpdoctor.watch has no bootstrap here; in-training "
                         "checks are off")
        else:
            parts = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
            if bootstrap_dir not in parts:
                parts.insert(0, bootstrap_dir)
            env["PYTHONPATH"] = os.pathsep.join(parts)
            env[WATCH] = "1"
            env.setdefault(EVENTS, os.path.join(run_dir, EVENTS_FILE))
            on = True
    events = env.get(EVENTS) or None
    if events and "{rank}" in events:
        events = None  # one file per rank, the user's choice: not read back here
        notes.append(f"{EVENTS} has a {{rank}} template: watch findings stay in those files")
    return JobEnv(env, env[FR_DIR], env[HEARTBEAT_DIR], on, notes, events if on else None)
