"""Watch some ranks for a while: what each did (run/busy.py sorts it) -- the edge.

One recheck for both of run's paths: a hang the stacks show on this node (run/looks.py)
and the job view's ask to each node (run/jobnode.py). CPU and storage I/O of each rank's
process tree are measured at both ends of the window, and its stack is read meanwhile
(run/stack_reads.py): CPU on the same lines in every read with no I/O and no native work
is a spin, not work.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from ddpdoctor.run.busy import Recheck, recheck_of
from ddpdoctor.run.progress import BACKGROUND
from ddpdoctor.run.stack_reads import StackReads

if TYPE_CHECKING:
    from ddpdoctor.run.hang import HangDiagnosis
    from ddpdoctor.run.process import Job


def rank_usage(rank_pids: dict[int, int]) -> dict[int, tuple[float, int]]:
    """CPU seconds and storage bytes (read + written) per rank, its workers included; its
    background threads left out (the watch's heartbeat and the Flight Recorder dump run
    asked for, gloo's event loops).

    Keyed by the pids the stack analysis matched to ranks, not by a RANK variable: ranks
    started by mp.spawn or a plain script carry none, and must still be measured.
    """
    import psutil

    out: dict[int, tuple[float, int]] = {}
    for rank, pid in rank_pids.items():
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except (psutil.Error, OSError):
            continue
        cpu, moved = 0.0, 0
        for p in procs:
            try:
                t = p.cpu_times()
                cpu += t.user + t.system - BACKGROUND.cpu_s(p.pid)
                io = p.io_counters()
                moved += io.read_bytes + io.write_bytes
            except (psutil.Error, AttributeError, OSError):
                continue
        out[rank] = (cpu, moved)
    return out


def watch_ranks(job: Job, ranks: list[int], pids: dict[int, int],
                diagnosis: HangDiagnosis | None, seconds: float) -> Recheck:
    """What ``ranks`` (``pids``: those with a process to look at) did in the next
    ``seconds``, or until the job ended (the caller asks ``job.poll()``)."""
    before = rank_usage(pids)
    start = time.monotonic()
    reads = StackReads(pids, diagnosis, start)
    while (left := seconds - (time.monotonic() - start)) > 0 and job.poll() is None:
        if reads.due(time.monotonic()):
            reads.read(time.monotonic())
        time.sleep(max(0.01, min(0.05 if pids else 0.2, left)))
    took = time.monotonic() - start
    return recheck_of(ranks, before, rank_usage(pids), took, reads.verdict)
