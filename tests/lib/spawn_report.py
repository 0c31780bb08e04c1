"""``make test-quick``'s plugin (``-p tests.lib.spawn_report``): names the tests that start a
process without the ``slow`` marker.

Unit tests spawn no processes (project rule); ``make test-quick`` is ``-m "not slow"`` and is
only quick while that holds. This plugin changes no test: it watches ``subprocess.Popen``,
``os.fork`` and ``os.posix_spawn`` during each test (its set-up too) and prints one summary line per
file at the end, so the list of tests to mark ``slow`` (or to make process-free) is in
front of whoever runs the quick set.
"""

from __future__ import annotations

import collections
import os
import subprocess
from collections.abc import Callable, Generator
from typing import Any

import pytest

_current: list[str | None] = [None]
_started: collections.Counter[str] = collections.Counter()


def _count() -> None:
    if _current[0] is not None:
        _started[_current[0]] += 1


def _counting(fn: Callable[..., Any]) -> Callable[..., Any]:
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        _count()
        return fn(*args, **kwargs)
    return wrapper


subprocess.Popen.__init__ = _counting(subprocess.Popen.__init__)  # type: ignore[method-assign]
os.fork = _counting(os.fork)
if hasattr(os, "posix_spawn"):
    os.posix_spawn = _counting(os.posix_spawn)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item,
                            nextitem: pytest.Item | None) -> Generator[None, None, None]:
    if item.get_closest_marker("slow") is None:
        _current[0] = item.nodeid
    try:
        yield
    finally:
        _current[0] = None


# pytest-xdist runs the tests in worker processes and prints the summary in the controller:
# each test's count travels in its teardown report, and the controller adds them up.
_reported: collections.Counter[str] = collections.Counter()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]
                              ) -> Generator[None, Any, None]:
    outcome = yield
    report = outcome.get_result()
    if report.when == "teardown" and _started.get(item.nodeid):
        report.user_properties.append(("processes_started", _started[item.nodeid]))


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "processes_started":
            _reported[report.nodeid] += int(value)


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _reported:
        return
    per_file = collections.Counter(nodeid.split("::")[0] for nodeid in _reported)
    tr = terminalreporter
    tr.section("tests not marked slow that start a process")
    for path, n in sorted(per_file.items(), key=lambda kv: (-kv[1], kv[0])):
        tr.write_line(f"{n:4d}  {path}")
    tr.write_line(f"{len(_reported)} tests: mark them slow or make them process-free "
                  "(docs/development.md, Tests)")
    listing = os.environ.get("DDPD_SPAWN_LIST")
    if listing:  # their node ids, one a line: what to mark
        with open(listing, "w", encoding="utf-8") as f:
            f.writelines(f"{nodeid}\n" for nodeid in sorted(_reported))
