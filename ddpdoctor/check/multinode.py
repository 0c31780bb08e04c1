"""`ddpdoctor check --nnodes N`: drive torchrun's own rendezvous with the check worker.

Each node runs torchrun with ``-m ddpdoctor.check.worker``; rank 0 (on node 0) writes the JSON
report to a file this process reads back and renders, so the report looks the same as a
one-node check. Every wait has a deadline: torchrun's join timeout and a hard kill of its
process group.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.core.contract import CHECK_RESULT, REPORT_FILE
from ddpdoctor.core.proctree import kill_tree
from ddpdoctor.core.report import Report


def torchrun_command(nproc: int, nnodes: int, node_rank: int, endpoint: str,
                     local_addr: str | None, names: list[str], backend: str | None,
                     deadline: float, opts: CheckOptions) -> list[str]:
    cmd = [sys.executable, "-m", "torch.distributed.run",
           "--nnodes", str(nnodes), "--node-rank", str(node_rank),
           "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
           "--rdzv-endpoint", endpoint, "--max-restarts", "0",
           # Without is_host on the node that owns the endpoint, every node acts as a
           # client and the rendezvous times out (measured on torch 2.13).
           "--rdzv-conf", f"join_timeout={int(deadline)}"
           + (",is_host=1" if node_rank == 0 else ",is_host=0")]
    if local_addr:
        cmd += ["--local-addr", local_addr]
    cmd += ["-m", "ddpdoctor.check.worker", "--deadline", str(deadline),
            "--opts", opts.to_json()]
    for n in names:
        cmd += ["--probe", n]
    if backend:
        cmd += ["--backend", backend]
    return cmd


def run_multinode(nproc: int, nnodes: int, node_rank: int, endpoint: str,
                  local_addr: str | None, names: list[str], backend: str | None,
                  deadline: float, opts: CheckOptions) -> Report | None:
    """Run this node's part; returns the report on node 0, None elsewhere."""
    with tempfile.TemporaryDirectory(prefix="ddpdoctor-check-") as tmp:
        result = Path(tmp) / REPORT_FILE
        env = {**os.environ, CHECK_RESULT: str(result)}
        cmd = torchrun_command(nproc, nnodes, node_rank, endpoint, local_addr, names, backend,
                               deadline, opts)
        proc = subprocess.Popen(cmd, env=env, start_new_session=True,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        # Rendezvous (join_timeout) + probes (deadline) + teardown.
        hard = 2 * deadline + 30
        try:
            output, _ = proc.communicate(timeout=hard)
        except subprocess.TimeoutExpired:
            kill_tree(proc.pid)
            output, _ = proc.communicate()
            output += f"\nddpdoctor: torchrun did not finish within {hard:g} s; killed"
        if node_rank != 0:
            print(f"ddpdoctor check: node {node_rank} ran its {nproc} rank(s) "
                  f"(torchrun exit {proc.returncode}); node 0 prints the report")
            if proc.returncode:
                print(_tail(output))
            return None
        if result.exists():
            return Report.from_dict(json.loads(result.read_text()))
        report = Report("check", world={"world_size": nproc * nnodes, "nodes": nnodes})
        report.doctor_error = (f"torchrun exited {proc.returncode} before rank 0 wrote a "
                               f"report: {_tail(output, 1) or 'no output'}")
        return report


def _tail(text: str, lines: int = 15) -> str:
    kept = [ln for ln in text.splitlines() if ln.strip()]
    return "\n".join(kept[-lines:])
