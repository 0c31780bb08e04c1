"""A measuring plugin (``-p tests.lib.cpu_report``, ``DDPD_CPU_REPORT=FILE``): each test's CPU
seconds, its own and its reaped child processes' (every rank of a job it launched, through
torchrun), appended to FILE as one JSON line per test.

The suite is CPU-bound on a 2-core machine (the workers wait little), so wall times under
three workers say little about what a test costs; CPU seconds do. Module-scoped fixtures
count against the first test that uses them. ``tools/test_cpu.py`` sums the file per module.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Generator

import pytest


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    kids = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, kids.ru_utime + kids.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item,
                            nextitem: pytest.Item | None) -> Generator[None, None, None]:
    path = os.environ.get("DDPD_CPU_REPORT")
    own0, kids0 = _cpu()
    wall0 = time.monotonic()
    yield
    if not path:
        return
    own1, kids1 = _cpu()
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps({"test": item.nodeid, "own": round(own1 - own0, 3),
                            "children": round(kids1 - kids0, 3),
                            "wall": round(time.monotonic() - wall0, 3)}) + "\n")
