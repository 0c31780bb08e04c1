"""DataLoader: start workers that move large tensors through shared memory, with a deadline.

This is what a training job's first batches do: fork workers, allocate each batch in
/dev/shm, hand it to the main process. A small /dev/shm, a seccomp/ulimit that kills
workers, or a broken fork shows up here instead of an hour into the job.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, cast

from ddpdoctor.check.analysis.dataloader import analyze
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe
from ddpdoctor.check.probes.records import DataloaderData

if TYPE_CHECKING:
    import torch
    from torch.utils.data import Dataset

    from ddpdoctor.check.launcher.outcome import RankContext

NAME = "dataloader"


class _BigTensors:
    """A dataset of ``n`` float32 tensors of ``nbytes`` each (module-level: picklable)."""

    def __init__(self, n: int, nbytes: int) -> None:
        self.n, self.numel = n, max(1, nbytes // 4)

    def __len__(self) -> int:
        return self.n

    def __getitem__(self, i: int) -> torch.Tensor:
        import torch

        return torch.full((self.numel,), float(i))


def collect(ctx: RankContext, opts: CheckOptions) -> DataloaderData:
    from torch.utils.data import DataLoader

    workers, batch, batches = opts.dl_workers, opts.dl_batch, opts.dl_batches
    item_bytes = opts.dl_item_bytes
    timeout = opts.dl_timeout_s
    if timeout is None:
        timeout = min(30.0, max(5.0, ctx.deadline_s / 3))
    timeout = float(timeout)
    out: DataloaderData = {"workers": workers, "batch_bytes": batch * item_bytes,
                              "timeout_s": timeout}
    start = time.perf_counter()
    # A map-style dataset is any object with __len__ and __getitem__ to the loader, but
    # its annotation asks for the Dataset class, which would import torch with this module.
    dataset = cast("Dataset[torch.Tensor]", _BigTensors(batch * batches, item_bytes))
    loader = DataLoader(dataset, batch_size=batch, num_workers=workers, timeout=timeout)
    try:
        seen = 0
        for b in loader:
            seen += 1
            if float(b[0, 0]) != float(seen - 1) * batch:
                raise RuntimeError("batch content is wrong")
        out["ok"], out["batches"] = True, seen
    except Exception as e:  # the failure is the evidence
        text = str(e)
        cause = e.__cause__
        out["ok"] = False
        out["error"] = f"{type(e).__name__}: {text.splitlines()[0] if text else ''}"
        out["error_text"] = text[-2000:]
        out["cause"] = f"{type(cause).__name__}: {cause}"[:1000] if cause else None
    finally:
        del loader
    out["seconds"] = round(time.perf_counter() - start, 3)
    return out


PROBE = Probe(NAME, "Data", "rank", collect, analyze, stall_finding="DATALOADER_WORKER_FAILURE")
