"""`ddpdoctor check` inside a rank started by someone else's launcher (torchrun, srun, k8s).

    torchrun --nnodes 2 --nproc-per-node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29400 \\
        -m ddpdoctor.check_worker [--probe NAME ...] [--deadline S] [--json PATH]

Every rank runs the same probes as a local check. Results go through the launcher's own
store (MASTER_ADDR:MASTER_PORT), not through collectives, so a stuck or dead rank cannot
block the report: rank 0 runs a reporter thread that waits for every rank's result until the
deadline, then writes the report whatever has arrived, naming the ranks that did not answer.
Rank 0 prints the report and exits with its exit code (so a Slurm job fails on an error
finding); with DDPDOCTOR_CHECK_RESULT set it writes the JSON report there and exits 0 (that is
how `ddpdoctor check --nnodes` drives it and prints the report itself).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import threading
import time
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from ddpdoctor.check.launcher import (
    STATUS_ERROR,
    STATUS_OK,
    STATUS_TIMEOUT,
    LaunchResult,
    RankContext,
    RankOutcome,
    read_progress,
)
from ddpdoctor.check.options import CheckOptions, OptionsError
from ddpdoctor.check.run import PROBES, assemble_report, run_pre_probes, run_probes
from ddpdoctor.core.contract import CHECK_KEY, CHECK_RESULT
from ddpdoctor.core.errors import ExitCode

if TYPE_CHECKING:
    from torch.distributed import Store

    from ddpdoctor.core.report import Report


def _deadline(text: str) -> float:
    """A finite deadline in seconds: NaN would compare false with every elapsed time."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value) or not 1 <= value <= 3600:
        raise argparse.ArgumentTypeError(f"{text!r} must be a number of seconds in [1, 3600]")
    return value


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m ddpdoctor.check.worker",
                                description="ddpdoctor check inside torchrun/srun ranks")
    p.add_argument("--probe", action="append", default=[], choices=list(PROBES))
    p.add_argument("--deadline", type=_deadline, default=120.0)
    p.add_argument("--backend", choices=["gloo", "nccl"], default=None)
    p.add_argument("--json", dest="json_path", default=None)
    p.add_argument("--opts", default="{}",
                   help="CheckOptions as JSON (what ddpdoctor check --nnodes passes)")
    return p.parse_args(argv)


def _key(kind: str, rank: int) -> str:
    run = os.environ.get("TORCHELASTIC_RUN_ID", "none")
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    return CHECK_KEY.format(run=run, attempt=attempt, kind=kind, rank=rank)


# What a rank of this job wrote (``{"value": ...}`` or ``{"error": ...}``), as JSON parsed
# it: read as written, never checked, so its type is left open.
def _get_json(store: Store, key: str) -> Any:
    try:
        if store.check([key]):
            return json.loads(store.get(key).decode())
    except Exception:  # a missing or broken result is reported, not raised
        return None
    return None


def _collect(store: Store, world: int, backend: str, deadline_s: float, started: float,
             names: list[str], opts: CheckOptions) -> Report:
    """Rank 0's reporter: wait for every rank's result until the deadline, then report."""
    while time.monotonic() - started < deadline_s:
        if all(store.check([_key("res", r)]) for r in range(world)):
            break
        time.sleep(0.2)
    outcomes = []
    for r in range(world):
        count, label = read_progress(store, r)
        res = _get_json(store, _key("res", r))
        o = RankOutcome(rank=r, status=STATUS_TIMEOUT, pre=_get_json(store, _key("pre", r)),
                        progress=count, last_step=label)
        if res is None:
            o.error = (f"no result within the {deadline_s:g} s deadline "
                       f"(last reached: {label or 'nothing'})")
        elif "error" in res:
            o.status, o.error = STATUS_ERROR, res["error"]
        else:
            o.status, o.value = STATUS_OK, res["value"]
        outcomes.append(o)
    result = LaunchResult(world, backend, deadline_s, round(time.monotonic() - started, 3),
                          outcomes)
    return assemble_report(result, names, opts)


def _emit(report: Report, json_path: str | None) -> int:
    target = os.environ.get(CHECK_RESULT)
    if target:
        report.write_json(target)
        return 0
    from ddpdoctor.core.render import render

    render(report)
    if json_path:
        report.write_json(json_path)
    return int(report.exit_code)


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.distributed as dist

    args = _parse(argv)
    names = args.probe or [n for n, p in PROBES.items() if p.stage != "parent"]
    try:
        opts = CheckOptions.from_json(args.opts)
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        local_rank = int(os.environ.get("LOCAL_RANK", "0"))
        master_addr, master_port = os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"])
    except (OptionsError, ValueError, KeyError) as e:
        print(f"ddpdoctor check_worker: run me under torchrun/srun (RANK, WORLD_SIZE, "
              f"MASTER_ADDR, MASTER_PORT) with valid --opts JSON: {e}", file=sys.stderr)
        return ExitCode.USAGE
    gpus = torch.cuda.device_count() if torch.cuda.is_available() else 0
    if args.backend == "nccl" and gpus <= local_rank:
        print(f"ddpdoctor check_worker: nccl needs a GPU for local rank {local_rank}; "
              f"{gpus} visible (use --backend gloo)", file=sys.stderr)
        return ExitCode.USAGE
    backend = args.backend or ("nccl" if gpus > local_rank else "gloo")
    device = "cpu"
    if backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = f"cuda:{local_rank}"
    started = time.monotonic()
    timeout = timedelta(seconds=args.deadline)
    store = dist.TCPStore(master_addr, master_port, is_master=False, timeout=timeout)
    ctx = RankContext(rank, world, local_rank, backend, device, args.deadline, store)

    reporter: threading.Thread | None = None
    box: dict[str, Report] = {}
    if rank == 0:
        def report_at_deadline() -> None:
            box["report"] = _collect(store, world, backend, args.deadline, started, names, opts)

        reporter = threading.Thread(target=report_at_deadline, name="ddpdoctor-reporter",
                                    daemon=True)
        reporter.start()

    try:
        pre = run_pre_probes(ctx, names, opts)
        store.set(_key("pre", rank), json.dumps(pre, default=str))
        if not ctx.skip_init:
            ctx.progress("init_process_group")
            dist.init_process_group(backend, timeout=timeout)
        res: dict[str, object] = {"value": run_probes(ctx, names, opts)}
    except Exception as e:  # reported through the store
        res = {"error": f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"}
    store.set(_key("res", rank), json.dumps(res, default=str))

    if reporter is None:
        return 0
    reporter.join()
    code = _emit(box["report"], args.json_path)
    sys.stdout.flush()
    # Ranks stuck in a collective would keep this process alive: the report is out, so leave.
    os._exit(code)


if __name__ == "__main__":
    sys.exit(main())
