"""The job view's numbers: the leader's decision at 1,024 ranks, hang -> report for a
1 s/step job, and false alarms on healthy jobs with a long evaluation.

    .venv/bin/python benchmarks/bench_jobview.py [--part leader|hang|evals|all]
        [--ranks 1024] [--nodes 128] [--runs 3]

leader: 1,024 synthetic ranks on 128 nodes: their snapshots and stack replies are written
  into a real TCPStore (torch's, served in this process); the leader reads them (one
  counter + one multi_get per kind: O(nodes) keys), merges the stacks and decides. Goal
  < 1 s. Baseline, same run: reading the same ranks one key per rank (O(ranks) round
  trips, what a per-rank design pays every interval).
hang: ``ddpdoctor run`` on a 2-rank, 1 s/step job (torchrun c10d rendezvous, so the job
  view runs) whose rank 1 stops at step 12; seconds from the planted hang to (a) every
  node printing the culprit, (b) the report being written. Goal <= 30 s under the adaptive
  default. Baseline, same run: the same job with a hand-set ``--hang-timeout 10``.
evals: healthy 2-rank jobs (0.5 s/step) with a 40 s evaluation on rank 1 under the
  adaptive default: how many get a hang finding (false alarms) out of --runs.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
JOB = str(ROOT / "tests" / "lib" / "jobview_job.py")


# ---- leader at scale

def _states(node: int, per: int, culprit: int) -> tuple:
    from ddpdoctor.attach.classify import RankState
    from ddpdoctor.attach.stacks import Frame
    from ddpdoctor.jobview.merge import state_to_dict

    wait = (Frame("all_reduce", "/venv/torch/distributed/distributed_c10d.py", 2800),
            Frame("step", "/home/u/train.py", 88), Frame("main", "/home/u/train.py", 120))
    stuck = (Frame("load_shard", "/home/u/data.py", 41), Frame("main", "/home/u/train.py", 110))
    out = []
    for r in range(node * per, node * per + per):
        if r == culprit:
            out.append(RankState(r, 10_000 + r, "sleeping", "", stuck[0], "sleeping", "Main",
                                 stuck))
        else:
            out.append(RankState(r, 10_000 + r, "collective", "all_reduce", wait[1], "",
                                 "Main", wait))
    return tuple(state_to_dict(s) for s in out)


def bench_leader(ranks: int, nodes: int) -> bool:
    from torch.distributed import TCPStore

    from ddpdoctor.jobview import keys
    from ddpdoctor.jobview.agent import read_nodes
    from ddpdoctor.jobview.leader import Policy, ProgressClock, should_look
    from ddpdoctor.jobview.merge import decide
    from ddpdoctor.jobview.snapshot import NodeSnap, RankSnap, StackReply
    from ddpdoctor.jobview.store import JobStore

    per = ranks // nodes
    culprit = ranks - 3
    server = TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    ep = keys.Endpoint("127.0.0.1", server.port, "bench")
    client = TCPStore("127.0.0.1", server.port, is_master=False, wait_for_workers=False)
    st = JobStore.wrap(client, ep)
    for n in range(nodes):  # the nodes' side (not timed)
        st.add(keys.NODE_COUNT, 1)
        snap = NodeSnap(n, f"node-{n}", 5, 40, "output", (1.0,) * 32,
                        tuple(RankSnap(r, 10_000 + r, 40) for r in range(n * per, n * per + per)))
        st.set(keys.node_key(n), snap.to_json())
        st.set(keys.reply_key("h1", n),
               StackReply(n, f"node-{n}", _states(n, per, culprit)).to_json())
        for r in range(n * per, n * per + per):  # for the per-rank baseline only
            st.set(f"bench/rank/{r}", RankSnap(r, 10_000 + r, 40).__repr__())

    t0 = time.perf_counter()
    for r in range(ranks):
        client.get(f"bench/rank/{r}")
    baseline = time.perf_counter() - t0

    t0 = time.perf_counter()
    known: set[int] = set()
    clock = ProgressClock(0.0)
    clock.observe(read_nodes(st, known), 0.0)
    look = should_look(clock, 12.0, Policy(), busy=False)  # quiet 12 s, threshold 10 s
    names = st.existing([keys.reply_key("h1", n) for n in range(nodes)])
    replies = [StackReply.from_json(raw) for raw in st.multi_get(names)]
    v = decide("h1", replies, [], moved=False)
    took = time.perf_counter() - t0

    ok = look.look and v.confirmed and [c.rank for c in v.culprits] == [culprit]
    print(f"leader, {ranks} ranks on {nodes} nodes: read + merge + decide {took:.3f} s "
          f"(goal < 1 s); baseline, one get per rank: {baseline:.3f} s; culprit "
          f"{[(c.rank, c.host, c.where) for c in v.culprits]}; "
          f"{'OK' if ok and took < 1.0 else 'FAIL'}")
    return ok and took < 1.0


# ---- hang -> report

def _run_job(tmp: Path, tag: str, job_args: list[str], run_args: list[str], port: int,
             timeout: float) -> tuple[dict, str, float]:
    out = tmp / f"{tag}.json"
    cmd = [sys.executable, "-m", "ddpdoctor", "run", "--no-watch", "--json", str(out),
           "--run-dir", str(tmp / f"run-{tag}"), *run_args, "--",
           sys.executable, "-m", "torch.distributed.run", "--nnodes", "1",
           "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint",
           f"127.0.0.1:{port}", "--max-restarts", "0", JOB, *job_args]
    env = {**os.environ, "TMPDIR": str(tmp), "PYTHONUNBUFFERED": "1"}
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    ended = time.time()
    report = json.loads(out.read_text()) if out.exists() else {}
    return report, p.stdout + p.stderr, ended


def _hang_once(tmp: Path, tag: str, run_args: list[str], port: int) -> tuple[float, float]:
    report, text, ended = _run_job(tmp, tag, ["--step-s", "1.0", "--hang", "1:12"],
                                   run_args, port, 240)
    m = re.search(r"planted hang: rank \d+ at ([\d.]+)", text)
    hang = report.get("probes", {}).get("hang", {}).get("data", {})
    lead = (report.get("findings") or [{}])[0]
    if not m or not hang or lead.get("ranks") != [1]:
        print(f"  {tag}: no hang named\n{text[-3000:]}")
        return float("nan"), float("nan")
    planted = float(m.group(1))
    return hang["detected_at"] - planted, ended - planted


def bench_hang(tmp: Path) -> bool:
    named, report = _hang_once(tmp, "adaptive", [], 29761)
    b_named, b_report = _hang_once(tmp, "fixed10", ["--hang-timeout", "10"], 29762)
    ok = report <= 30.0
    print(f"hang -> culprit named {named:.1f} s, -> report written {report:.1f} s, adaptive "
          f"default, 1 s/step (goal <= 30 s); baseline --hang-timeout 10: {b_named:.1f} s / "
          f"{b_report:.1f} s; {'OK' if ok else 'FAIL'}")
    return ok


def bench_evals(tmp: Path, runs: int) -> bool:
    alarms = 0
    took = []
    for i in range(runs):
        t0 = time.monotonic()
        report, text, _ = _run_job(tmp, f"eval{i}", ["--step-s", "0.5", "--steps", "60",
                                                     "--eval", "1:20:40"], [], 29770 + i, 300)
        took.append(time.monotonic() - t0)
        found = [f["id"] for f in report.get("findings", []) if f["id"].startswith("HANG")]
        if found or "hang" in report.get("probes", {}) or not report:
            alarms += 1
            print(f"  run {i}: false alarm {found}\n{text[-2000:]}")
    print(f"healthy jobs with a 40 s evaluation, adaptive default: {alarms}/{runs} false "
          f"alarms (runs took {min(took):.0f}-{max(took):.0f} s)")
    return alarms == 0


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--part", choices=("leader", "hang", "evals", "all"), default="all")
    p.add_argument("--ranks", type=int, default=1024)
    p.add_argument("--nodes", type=int, default=128)
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args()
    ok = True
    with tempfile.TemporaryDirectory(prefix="bench-jobview-") as d:
        tmp = Path(d)
        if a.part in ("leader", "all"):
            ok &= bench_leader(a.ranks, a.nodes)
        if a.part in ("hang", "all"):
            ok &= bench_hang(tmp)
        if a.part in ("evals", "all"):
            ok &= bench_evals(tmp, a.runs)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
