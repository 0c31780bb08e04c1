"""Shared by the attach tests: synthetic py-spy stacks and the recorded hang fixtures."""

from __future__ import annotations

import glob
import os
import re

from ddpdoctor.attach.stacks import Frame, RankStack, ThreadStack, parse_py_spy_json

RECORDED = os.path.join(os.path.dirname(os.path.dirname(__file__)), "fixtures", "attach")
TORCH = "/venv/lib/python3.11/site-packages/torch"
STDLIB = "/usr/lib/python3.11"
C10D = f"{TORCH}/distributed/distributed_c10d.py"
LOGGER = f"{TORCH}/distributed/c10d_logger.py"
TRAIN = "/home/u/proj/train.py"
DATA = "/home/u/proj/data.py"


def f(name: str, filename: str, line: int, code: str = "") -> Frame:
    return Frame(name, filename, line, code)


def in_collective(op: str, line: int = 88, func: str = "step") -> list[Frame]:
    return [f(op, C10D, 3252), f("_exception_logger.<locals>.wrapper", LOGGER, 83),
            f(func, TRAIN, line), f("main", TRAIN, 120), f("<module>", TRAIN, 130)]


def in_getitem(line: int = 41) -> list[Frame]:
    return [f("Items.__getitem__", DATA, line, "time.sleep(1000)"),
            f("_MapDatasetFetcher.fetch.<locals>.<listcomp>",
              f"{TORCH}/utils/data/_utils/fetch.py", 54),
            f("_MapDatasetFetcher.fetch", f"{TORCH}/utils/data/_utils/fetch.py", 54),
            f("_SingleProcessDataLoaderIter._next_data", f"{TORCH}/utils/data/dataloader.py", 790),
            f("_BaseDataLoaderIter.__next__", f"{TORCH}/utils/data/dataloader.py", 741),
            f("main", TRAIN, 110), f("<module>", TRAIN, 130)]


def waiting_on_workers() -> list[Frame]:
    return [f("_PollLikeSelector.select", f"{STDLIB}/selectors.py", 415),
            f("Queue.get", f"{STDLIB}/multiprocessing/queues.py", 113),
            f("_MultiProcessingDataLoaderIter._try_get_data",
              f"{TORCH}/utils/data/dataloader.py", 1291),
            f("_MultiProcessingDataLoaderIter._get_data",
              f"{TORCH}/utils/data/dataloader.py", 1443),
            f("_MultiProcessingDataLoaderIter._next_data",
              f"{TORCH}/utils/data/dataloader.py", 1480),
            f("main", TRAIN, 110), f("<module>", TRAIN, 130)]


def thread(frames: list[Frame], active: bool = False, name: str = "MainThread") -> ThreadStack:
    return ThreadStack(1, name, active, frames, is_main=name == "MainThread")


def rank(r: int, *threads: ThreadStack, state: str = "sleeping") -> RankStack:
    return RankStack(r, 1000 + r, state, list(threads))


def load_recorded(name: str) -> dict[int, RankStack]:
    """Real ``py-spy dump --json`` output of tests/fixtures/hangs/hang.py (record.sh)."""
    stacks: dict[int, RankStack] = {}
    workers: dict[int, list[RankStack]] = {}
    for path in sorted(glob.glob(os.path.join(RECORDED, name, "pyspy-*.json"))):
        m = re.match(r"pyspy-rank(\d+)(?:-worker(\d+))?\.json", os.path.basename(path))
        assert m, path
        r = int(m.group(1))
        with open(path) as fh:
            threads = parse_py_spy_json(fh.read())
        if m.group(2):
            workers.setdefault(r, []).append(RankStack(r, int(m.group(2)), "sleeping", threads))
        else:
            stacks[r] = RankStack(r, 100 + r, "sleeping", threads)
    for r, ws in workers.items():
        stacks[r].workers = ws
    assert stacks, f"no recorded stacks for {name}"
    return stacks


def recorded_fr_path(name: str, r: int) -> str:
    return os.path.join(RECORDED, name, f"ddpdoctor-fr-rank{r}.json")
