"""Helper of ``benchmarks/check_scale_model.py``: runs one real ``ddpdoctor check`` (the CLI,
in this process) and keeps what the report leaves out: every rank's per-probe seconds.

    python benchmarks/_check_scale_runner.py CAPTURE.json check --nproc 4 ...
        the CLI, with ``assemble_report`` wrapped to save each rank's raw probe data
    python benchmarks/_check_scale_runner.py --worker ...
        what torchrun runs instead of ``-m ddpdoctor.check.worker`` (multi-node): the same
        worker, its rank 0 saving the raw data to $DDPDOCTOR_SCALE_CAPTURE
Nothing in ddpdoctor is changed: only module attributes are wrapped, in this process.
"""

from __future__ import annotations

import json
import os
import sys
import time
from typing import Any

CAPTURE = "DDPDOCTOR_SCALE_CAPTURE"


def _save(result: Any, path: str) -> None:
    ranks = {o.rank: {"pre": o.pre, "value": o.value, "status": o.status}
             for o in result.outcomes}
    with open(path, "w") as f:
        json.dump({"elapsed_s": result.elapsed_s, "ranks": ranks}, f, default=str)


def _wrap_assemble(module: Any, path: str) -> None:
    original = module.assemble_report

    def capture(result: Any, *args: Any, **kwargs: Any) -> Any:
        _save(result, path)
        return original(result, *args, **kwargs)

    module.assemble_report = capture


def _cli(capture_path: str, argv: list[str]) -> int:
    import ddpdoctor.check.multinode as multinode
    import ddpdoctor.check.run as run
    from ddpdoctor.cli import main

    _wrap_assemble(run, capture_path)
    original = multinode.torchrun_command

    def torchrun_command(*args: Any, **kwargs: Any) -> list[str]:
        cmd = original(*args, **kwargs)
        i = cmd.index("ddpdoctor.check.worker")
        return cmd[:i - 1] + [os.path.abspath(__file__), "--worker"] + cmd[i + 1:]

    multinode.torchrun_command = torchrun_command
    os.environ[CAPTURE] = capture_path
    try:
        main.main(args=argv, prog_name="ddpdoctor")
    except SystemExit as e:
        return int(e.code or 0)
    return 0


def _worker(argv: list[str]) -> int:
    import ddpdoctor.check.worker as worker

    _wrap_assemble(worker, os.environ[CAPTURE])
    return worker.main(argv)


if __name__ == "__main__":
    started = time.time()
    if sys.argv[1] == "--worker":
        sys.exit(_worker(sys.argv[2:]))
    sys.exit(_cli(sys.argv[1], sys.argv[2:]))
