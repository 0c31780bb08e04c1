"""The check at scale: calibrate ``ddpdoctor/check/scale_model.py`` on real runs, check it
against the runs it was not fitted on, and predict 64, 512 and 4,096 ranks.

    .venv/bin/python benchmarks/check_scale_model.py            # measure (root: 2 namespaces)
    .venv/bin/python benchmarks/check_scale_model.py --no-measure   # reprint from the file

Measuring runs, one at a time: ``ddpdoctor check`` (default depth) with 2, 4 and 8 local
ranks, and across two network namespaces joined by a veth pair (1 and 2 ranks per "node");
each through ``benchmarks/_check_scale_runner.py``, which keeps every rank's per-probe
seconds (the report keeps only summaries). Then microbenchmarks of what only matters at
scale: the TCPStore's per-op cost under a few hundred concurrent clients, the mesh's CPU per
connection, the parent's reachability analysis per rank pair. The fit and the runs are
written to ``benchmarks/check_scale_calibration.json``; ``--no-measure`` reads it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, replace
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from ddpdoctor.check import scale_model as sm  # noqa: E402

RUNNER = ROOT / "benchmarks" / "_check_scale_runner.py"
CALIBRATION = ROOT / "benchmarks" / "check_scale_calibration.json"
PY = sys.executable
FIT_ON = ("local-2", "local-8", "netns-2x1")  # the others are predicted, not fitted

# ----------------------------------------------------------------------------- runs


def _summary(name: str, nodes: int, per_node: int, wall: float, capture: dict[str, Any]
             ) -> dict[str, Any]:
    """What the fit needs from one run: wall, launch elapsed, per-rank probe seconds."""
    ranks = []
    for r, v in sorted(capture["ranks"].items(), key=lambda kv: int(kv[0])):
        pre = v.get("pre") or {}
        val = v.get("value") or {}
        bw = (val.get("bandwidth") or {}).get("data") or {}
        reach = (pre.get("reachability") or {}).get("data") or {}
        conn = (val.get("connectivity") or {}).get("data") or {}
        ranks.append({
            "rank": int(r),
            "seconds": {k: x.get("seconds", 0.0) for k, x in {**pre, **val}.items()},
            "mesh_connect_s": reach.get("connect_s"),
            "allreduce_ms": conn.get("allreduce_ms"),
            "p2p_ms": [p.get("ms") for p in (conn.get("p2p") or {}).values()],
            "sweep": [{k: row[k] for k in ("collective", "size", "iters", "median_s")}
                      for row in bw.get("sweep", [])],
        })
    return {"name": name, "nodes": nodes, "per_node": per_node, "wall_s": round(wall, 3),
            "elapsed_s": capture["elapsed_s"], "ranks": ranks}


def run_local(nproc: int, tmp: Path) -> dict[str, Any]:
    cap, rep = tmp / f"cap-l{nproc}.json", tmp / f"rep-l{nproc}.json"
    cmd = [PY, str(RUNNER), str(cap), "check", "--nproc", str(nproc), "--deadline", "300",
           "--json", str(rep)]
    start = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=400)
    wall = time.perf_counter() - start
    if not cap.exists():
        raise RuntimeError(f"local {nproc}: no capture\n{proc.stdout[-2000:]}{proc.stderr[-2000:]}")
    return _summary(f"local-{nproc}", 1, nproc, wall, json.loads(cap.read_text()))


def _sh(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, timeout=30)


# Two namespaces joined by a veth pair, each end addressed and up (then loopback).
_NETNS_SETUP = (
    "ip netns add {ns_a}", "ip netns add {ns_b}",
    "ip link add {dev_a} type veth peer name {dev_b}",
    "ip link set {dev_a} netns {ns_a}", "ip link set {dev_b} netns {ns_b}",
    "ip -n {ns_a} addr add {addr_a}/24 dev {dev_a}",
    "ip -n {ns_b} addr add {addr_b}/24 dev {dev_b}",
    "ip -n {ns_a} link set {dev_a} up", "ip -n {ns_b} link set {dev_b} up",
    "ip -n {ns_a} link set lo up", "ip -n {ns_b} link set lo up",
)


def run_two_nodes(per_node: int, tmp: Path, port: int) -> dict[str, Any]:
    """Two namespaces joined by a veth pair (addresses 10.77.x.x inside them), removed after."""
    tag = str(os.getpid() % 10000)
    ns = {"a": f"ddpsm-a-{tag}", "b": f"ddpsm-b-{tag}"}
    dev = {"a": f"ddpsa{tag}", "b": f"ddpsb{tag}"}
    addr = {"a": "10.77.3.1", "b": "10.77.3.2"}
    cap, rep = tmp / f"cap-n{per_node}.json", tmp / f"rep-n{per_node}.json"
    procs: dict[str, subprocess.Popen[str]] = {}
    try:
        names = {"ns_a": ns["a"], "ns_b": ns["b"], "dev_a": dev["a"], "dev_b": dev["b"],
                 "addr_a": addr["a"], "addr_b": addr["b"]}
        for line in _NETNS_SETUP:
            _sh(*line.format(**names).split())
        start = time.perf_counter()
        for node, k in ((0, "a"), (1, "b")):
            check = [PY, str(RUNNER), str(cap if node == 0 else tmp / "unused.json"), "check",
                     "--nnodes", "2", "--node-rank", str(node), "--nproc", str(per_node),
                     "--rdzv-endpoint", f"{addr['a']}:{port}", "--local-addr", addr[k],
                     "--deadline", "120"] + (["--json", str(rep)] if node == 0 else [])
            inner = f"hostname node-{k} && exec " + " ".join(check)
            procs[k] = subprocess.Popen(
                ["ip", "netns", "exec", ns[k], "unshare", "--uts", "sh", "-c", inner],
                env={**os.environ, "GLOO_SOCKET_IFNAME": dev[k]}, stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT, text=True, start_new_session=True)
        out_a = procs["a"].communicate(timeout=300)[0]
        wall = time.perf_counter() - start
        procs["b"].communicate(timeout=60)
    finally:
        for p in procs.values():
            if p.poll() is None:
                os.killpg(p.pid, 9)
                p.wait()
        for k in "ab":
            subprocess.run(["ip", "netns", "del", ns[k]], capture_output=True, timeout=30)
    if not cap.exists():
        raise RuntimeError(f"2 nodes x {per_node}: no capture\n{out_a[-3000:]}")
    return _summary(f"netns-2x{per_node}", 2, per_node, wall, json.loads(cap.read_text()))


# ----------------------------------------------------------------------------- microbenchmarks

_STORE_CLIENT = r"""
import sys, threading, time
from datetime import timedelta
import torch.distributed as dist
port, threads, dur = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
stores = [dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=60))
          for _ in range(threads)]
counts = [0] * threads
start = time.perf_counter() + 0.5
def loop(i):
    while time.perf_counter() < start:
        time.sleep(0.01)
    n = 0
    while time.perf_counter() < start + dur:
        stores[i].get("k")
        n += 1
    counts[i] = n
ts = [threading.Thread(target=loop, args=(i,)) for i in range(threads)]
[t.start() for t in ts]; [t.join() for t in ts]
print(sum(counts))
"""


def store_op_s(clients: int, procs: int = 2, dur: float = 4.0) -> float:
    """Seconds per store op with ``clients`` concurrent clients (threads in ``procs``
    processes), the server saturated: the cost one op takes of the one store server."""
    from datetime import timedelta

    import torch.distributed as dist

    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                           timeout=timedelta(seconds=60))
    master.set("k", "x" * 40)
    ps = [subprocess.Popen([PY, "-c", _STORE_CLIENT, str(master.port), str(clients // procs),
                            str(dur)], stdout=subprocess.PIPE, text=True) for _ in range(procs)]
    total = sum(int(p.communicate(timeout=120)[0].split()[-1]) for p in ps)
    return dur / max(1, total)


def mesh_connection_s(n: int = 1500) -> float:
    """CPU seconds per mesh connection, both ends in one process (as in a rank: its
    listener accepts while its MAX_CONNECTING threads connect, all under one GIL)."""
    from concurrent.futures import ThreadPoolExecutor

    from ddpdoctor.check.mesh import MAX_CONNECTING, _Listener, _reach

    listener = _Listener("127.0.0.1", 1, backlog=1024)
    where = f"127.0.0.1:{listener.port}"
    cpu = time.process_time()
    with ThreadPoolExecutor(MAX_CONNECTING) as pool:
        ok = sum(r["ok"] for r in pool.map(lambda _: _reach("127.0.0.1", 1, where, 5.0),
                                             range(n)))
    cpu = time.process_time() - cpu
    listener.close()
    assert ok == n
    return cpu / n


def _mesh_rows(world: int, per_node: int = 8) -> dict[int, dict[str, Any]]:
    """Healthy rows as ``run_mesh`` returns them: counts, no per-peer entries."""
    return {i: {"address": f"10.0.{i // 256}.{i % 256}:40000", "node": f"node-{i // per_node}",
                "tried": world - 1, "failed": {}, "slowest_ms": 0.412, "unpublished": [],
                "cut": False, "all_finished": True, "connect_s": 0.1, "seconds": 0.2}
            for i in range(world)}


def reachability_report_costs(sizes: tuple[int, ...] = (1024, 4096)) -> dict[str, Any]:
    """The parent's cost of the mesh rows (8 ranks a node): JSON decode plus the analysis,
    per rank (it is linear in ranks), the largest world's; a row's and an address's bytes."""
    from ddpdoctor.check.analysis.reachability import analyze

    points = []
    for world in sizes:
        texts = [json.dumps(r) for r in _mesh_rows(world).values()]
        best = math.inf
        for _ in range(3):
            start = time.perf_counter()
            analyze({i: json.loads(t) for i, t in enumerate(texts)}, world)
            best = min(best, time.perf_counter() - start)
        points.append((world, best))
    world = sizes[-1]
    rows = _mesh_rows(world)
    table = json.dumps({r: f"{d['address']} {d['node']}" for r, d in rows.items()})
    return {"report_rank_s": points[-1][1] / world,
            "mesh_row_bytes": statistics.mean(len(json.dumps(r)) for r in rows.values()),
            "addr_bytes": len(table) / world, "report_points": points}


def measure(reps: int) -> dict[str, Any]:
    runs: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="ddpdoctor-scale-") as tmp_name:
        tmp = Path(tmp_name)
        for rep in range(reps):
            for n in (2, 4, 8):
                runs.append(run_local(n, tmp))
                print(f"  {runs[-1]['name']}: {runs[-1]['wall_s']:.2f} s", flush=True)
            if os.geteuid() == 0:
                for per_node in (1, 2):
                    runs.append(run_two_nodes(per_node, tmp, 29671 + 2 * rep + per_node))
                    print(f"  {runs[-1]['name']}: {runs[-1]['wall_s']:.2f} s", flush=True)
    micro = {
        "store_op_s_1": store_op_s(2, procs=2, dur=2.0),
        "store_op_s_256": store_op_s(256),
        "mesh_connection_cpu_s": statistics.median(mesh_connection_s() for _ in range(3)),
    }
    micro.update(reachability_report_costs())
    micro.update(extra_micro())
    print("  micro:", {k: f"{v:.3g}" for k, v in micro.items()}, flush=True)
    return {"runs": runs, "micro": micro, "load": os.getloadavg(),
            "measured": time.strftime("%Y-%m-%d %H:%M")}


_GLOO_INIT = r"""
import sys, time
from datetime import timedelta
import torch.distributed as dist
rank, world, port = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
store = dist.TCPStore("127.0.0.1", port, world, is_master=False, timeout=timedelta(seconds=60))
store.set(f"ready{rank}", "1")
store.wait([f"ready{r}" for r in range(world)])
t = time.perf_counter()
dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
print(time.perf_counter() - t)
"""


def extra_micro(world: int = 4) -> dict[str, float]:
    """`import torch`; gloo's init on ``world`` ranks (per peer); a large store value."""
    from datetime import timedelta

    import torch.distributed as dist

    imports = []
    for _ in range(3):
        start = time.perf_counter()
        subprocess.run([PY, "-c", "import torch"], check=True, timeout=120)
        imports.append(time.perf_counter() - start)
    inits = []
    for _ in range(3):
        master = dist.TCPStore("127.0.0.1", 0, world + 1, is_master=True,
                               wait_for_workers=False, timeout=timedelta(seconds=60))
        ps = [subprocess.Popen([PY, "-c", _GLOO_INIT, str(r), str(world), str(master.port)],
                               stdout=subprocess.PIPE, text=True) for r in range(world)]
        inits.append(max(float(p.communicate(timeout=120)[0].split()[-1]) for p in ps))
    master = dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False)
    client = dist.TCPStore("127.0.0.1", master.port, is_master=False)
    value = b"x" * (4 << 20)  # the libuv store refuses values over 8 MiB
    client.set("big", value)
    start = time.perf_counter()
    for _ in range(5):
        client.get("big")
    big = (time.perf_counter() - start) / 5
    cores = os.cpu_count() or 1
    return {"import_torch_s": statistics.median(imports),
            "gloo_init_s": statistics.median(inits), "gloo_init_world": world,
            "gloo_pair_cpu_s": statistics.median(inits) / (world - 1) / max(1, world / cores),
            "store_byte_s": big / len(value)}


# ----------------------------------------------------------------------------- fit

# Only at scale, not measurable here (each printed with the prediction, and in the docs).
ASSUMED = {
    "cores_per_node": (8, "one core per rank at least (GPU nodes have 32-128 cores); here "
                          "2 cores for 1 node, 1 per namespace for 2"),
    "inter_alpha_s": (25e-6, "the wire: one-way latency of a small TCP message across one "
                             "100 GbE switch hop (sockets ping-pong half-RTT, 15-30 us), added "
                             "to gloo's per-step cost measured on the veth here (no wire)"),
    "inter_gbps": (12.5, "100 Gb/s line rate; the per-stream rate is the lower of this and the "
                         "veth rate measured here (gloo moves a pair's bytes on one TCP stream)"),
}


def job_of(run: dict[str, Any]) -> sm.Job:
    """The simulated job of a calibration run: one node of 2 cores, or 2 namespaces sharing
    them (1 core each)."""
    cores = float(os.cpu_count() or 2)
    if run["nodes"] == 1:
        return sm.Job(1, run["per_node"], cores, "local")
    return sm.Job(run["nodes"], run["per_node"], cores / run["nodes"], "torchrun")


def _slowest(run: dict[str, Any], probe: str) -> float:
    return max(r["seconds"].get(probe, 0.0) for r in run["ranks"])


def fit_link(runs: list[dict[str, Any]]) -> sm.Link:
    """alpha, beta, gamma by least squares on every sweep row (slowest rank's per-call
    median, divided by the run's CPU contention), relative error weighted."""
    import numpy as np

    a_rows, b = [], []
    for run in runs:
        job = job_of(run)
        n = job.world
        by_key: dict[tuple[str, int], float] = {}
        for rank in run["ranks"]:
            for row in rank["sweep"]:
                key = (row["collective"], row["size"])
                by_key[key] = max(by_key.get(key, 0.0), row["median_s"])
        for (name, size), t in by_key.items():
            unit = [sm.collective_s(name, size, n, link)
                    for link in (sm.Link(1, 0, 0), sm.Link(0, 1, 0), sm.Link(0, 0, 1))]
            y = t / job.contention
            a_rows.append([u / y for u in unit])
            b.append(1.0)
    x = np.linalg.lstsq(np.array(a_rows), np.array(b), rcond=None)[0]
    alpha, beta, gamma = (max(float(v), 0.0) for v in x)
    return sm.Link(alpha, beta, gamma)


def _zero_start(costs: sm.Costs) -> sm.Costs:
    return replace(costs, doctor_s=0.0, rank_start_s=0.0, torchrun_s=0.0)


def fit(data: dict[str, Any]) -> sm.Costs:
    runs = {r["name"]: r for r in data["runs"]}
    fit_runs = [runs[n] for n in FIT_ON if n in runs]
    micro = data["micro"]
    local = [r for r in fit_runs if r["nodes"] == 1]
    multi = [r for r in fit_runs if r["nodes"] > 1]
    intra = fit_link(local)
    inter = fit_link(multi) if multi else intra
    costs = sm.Costs(
        doctor_s=0.0, rank_start_s=0.0, torchrun_s=0.0,
        import_s=micro["import_torch_s"], exit_s=0.0,
        store_op_s=micro["store_op_s_256"],
        store_rtt_s=max(0.0, micro["store_op_s_1"] - micro["store_op_s_256"]),
        store_byte_s=micro["store_byte_s"],
        env_s=statistics.mean(_slowest(r, "env") / job_of(r).contention for r in fit_runs),
        dataloader_s=statistics.mean(_slowest(r, "dataloader") / job_of(r).contention
                                     for r in fit_runs),
        conn_cpu_s=micro["mesh_connection_cpu_s"], pg_fixed_s=0.0,
        pg_pair_s=micro["gloo_pair_cpu_s"],
        report_rank_s=micro["report_rank_s"], mesh_row_bytes=micro["mesh_row_bytes"],
        addr_bytes=micro["addr_bytes"], intra=intra, inter=inter)
    # What is left of each fitted run's wall is start-up and teardown: a + b x N x contention
    # (the doctor, then ranks forked one after the other) locally, a constant across nodes.
    base = _zero_start(costs)
    resid = [(len(r["ranks"]) * job_of(r).contention,
              r["wall_s"] - sm.simulate(job_of(r), base).wall_s) for r in local]
    if len(resid) >= 2:
        (x1, y1), (x2, y2) = resid[0], resid[-1]
        per_rank = max(0.0, (y2 - y1) / (x2 - x1))
        costs = replace(costs, rank_start_s=per_rank, doctor_s=y1 - per_rank * x1)
    if multi:
        r = multi[0]
        torchrun = r["wall_s"] - sm.simulate(job_of(r), replace(base, torchrun_s=0.0)).wall_s
        costs = replace(costs, torchrun_s=max(0.0, torchrun))
    return costs


# nccl at scale: nothing here runs it (no GPU). Sources: NCCL's own latency model,
# NVIDIA/nccl src/graph/tuning.cc (baseLat, hwLat, LL protocol, in us), its bootstrap,
# src/bootstrap.cc and src/init.cc, and published nccl-tests bus bandwidths.
ASSUMED_NCCL: dict[str, tuple[float, str]] = {
    "base_s": (6.6e-6, "NCCL tuning.cc baseLat, ring/LL: 6.6 us a collective"),
    "ring_nvlink_s": (0.47e-6, "NCCL tuning.cc hwLat NVLink ring/LL: 0.47 us a step"),
    "ring_net_s": (2.7e-6, "NCCL tuning.cc hwLat NET ring/LL: 2.7 us a step"),
    "tree_nvlink_s": (0.52e-6, "NCCL tuning.cc hwLat NVLink tree/LL: 0.52 us a hop"),
    "tree_net_s": (5.0e-6, "NCCL tuning.cc hwLat NET tree/LL: 5.0 us a hop"),
    "busbw_node": (450e9, "nccl-tests all_reduce busbw, 8x H100 SXM on NVLink: 460-480 GB/s "
                          "published (docs.alayanew.com NCCL-tests guide); 450 GB/s"),
    "busbw_nodes": (400e9, "nccl-tests all_reduce busbw, H100 nodes on 400 Gb/s NDR "
                           "InfiniBand: 400-450 GB/s published (saturncloud.io NCCL guide)"),
    "p2p_nvlink_gbs": (450e9, "H100 SXM NVLink 4: 900 GB/s a GPU, 450 GB/s a direction"),
    "p2p_net_gbs": (50e9, "one ConnectX-7 400 Gb/s NIC a GPU (DGX H100): 50 GB/s"),
    "bootstrap_step_s": (35e-6, "a small TCP message between nodes: the wire's 25 us (as "
                                "for gloo) plus 10 us of socket send/recv"),
    "bootstrap_allgathers": (3, "ring all-gathers of ncclCommInitRank: the bootstrap's "
                                "address ring (bootstrap.cc) and initTransportsRank's "
                                "AllGather1 and AllGather3 (init.cc)"),
    "init_fixed_s": (1.0, "the communicator's setup after the bootstrap (topology search, "
                          "channels, buffers, proxy): no public per-rank figure found, 1 s "
                          "assumed; its O(N^2) CPU loops matter only at 32K+ ranks (NVIDIA/"
                          "nccl PR #1789: 26 s at 96K, ~0.05 s scaled to 4K)"),
    "p2p_connect_s": (0.01, "a send/recv pair's first use (NCCL connects p2p lazily): 10 ms "
                            "assumed, no public figure; 12 rounds at 4,096 ranks"),
}


def nccl_costs(costs: sm.Costs) -> sm.Nccl:
    """nccl's costs: ASSUMED_NCCL, and the bootstrap root's work per rank taken as one TCP
    connection's CPU as measured here (the mesh's, both ends)."""
    a = {k: v for k, (v, _) in ASSUMED_NCCL.items()}
    return sm.Nccl(
        root_per_rank_s=costs.conn_cpu_s, bootstrap_step_s=a["bootstrap_step_s"],
        bootstrap_allgathers=int(a["bootstrap_allgathers"]), init_fixed_s=a["init_fixed_s"],
        base_s=a["base_s"], ring_nvlink_s=a["ring_nvlink_s"], ring_net_s=a["ring_net_s"],
        tree_nvlink_s=a["tree_nvlink_s"], tree_net_s=a["tree_net_s"],
        busbw_node=a["busbw_node"], busbw_nodes=a["busbw_nodes"],
        p2p_intra=sm.Link(a["base_s"] + a["ring_nvlink_s"], 1 / a["p2p_nvlink_gbs"]),
        p2p_inter=sm.Link(a["base_s"] + a["ring_net_s"], 1 / a["p2p_net_gbs"]),
        p2p_connect_s=a["p2p_connect_s"])


def scale_costs(costs: sm.Costs, alpha: float | None = None) -> sm.Costs:
    """The fitted costs with the inter-node tier of a real cluster (ASSUMED) and nccl's
    (ASSUMED_NCCL). ``alpha``: gloo's per-step software cost (default: as measured on the
    veth here)."""
    alpha = costs.inter.alpha_s if alpha is None else alpha
    veth_gbps = 1e-9 / costs.inter.byte_s if costs.inter.byte_s else float("inf")
    gbps = min(ASSUMED["inter_gbps"][0], veth_gbps)
    inter = sm.Link(ASSUMED["inter_alpha_s"][0] + alpha, 1e-9 / gbps,
                    costs.inter.reduce_byte_s)
    return replace(costs, inter=inter, nccl=nccl_costs(costs))


# ----------------------------------------------------------------------------- report


def validate(data: dict[str, Any], costs: sm.Costs) -> list[dict[str, Any]]:
    rows = []
    for run in data["runs"]:
        res = sm.simulate(job_of(run), costs)
        err = (res.wall_s - run["wall_s"]) / run["wall_s"]
        rows.append({"run": run["name"], "ranks": len(run["ranks"]),
                     "fitted": run["name"] in FIT_ON, "measured_s": run["wall_s"],
                     "predicted_s": res.wall_s, "error": err})
    return rows


SCENARIOS: dict[str, dict[str, Any]] = {
    "gloo, healthy": {"backend": "gloo"},
    "gloo, blocked pair": {"backend": "gloo", "bad": True},
    "nccl, healthy": {"backend": "nccl"},
    "nccl, blocked pair": {"backend": "nccl", "bad": True},
}


def predict(costs: sm.Costs, worlds: tuple[int, ...] = (64, 512, 4096),
            alpha: float | None = None) -> list[dict[str, Any]]:
    """Every scenario at every world size, 8 ranks a node; blocked pair: ranks 0 and N/2
    (different nodes)."""
    at_scale = scale_costs(costs, alpha)
    cores = float(ASSUMED["cores_per_node"][0])
    rows = []
    for world in worlds:
        for label, sc in SCENARIOS.items():
            job = sm.Job(world // 8, 8, cores, "torchrun", backend=sc["backend"],
                         bad_pair=(0, world // 2) if sc.get("bad") else None)
            res = sm.simulate(job, at_scale)
            rows.append({"ranks": world, "scenario": label, "wall_s": res.wall_s,
                         "ended_by": res.ended_by, "needs_s": res.needs_s,
                         "mesh_done": res.mesh_done, "store_ops": res.store_ops,
                         "store_ops_by": dict(res.store_ops_by),
                         "store_busy_s": res.store_busy_s, "phases": res.phases})
    return rows


def _print_costs(costs: sm.Costs) -> None:
    print("\nCalibrated costs (fitted on " + ", ".join(FIT_ON) + "; microbenchmarks):")
    for k, v in asdict(costs).items():
        if isinstance(v, dict):
            print(f"  {k}: " + ", ".join(f"{kk}={vv:.3g}" for kk, vv in v.items()))
        elif v is not None:
            print(f"  {k}: {v:.4g}")
    for title, table in (("Assumed at scale (not measurable here)", ASSUMED),
                         ("Assumed for nccl (no GPU here)", ASSUMED_NCCL)):
        print(f"{title}:")
        for k, (v, why) in table.items():
            print(f"  {k} = {v:g}: {why}")


def show(data: dict[str, Any], costs: sm.Costs) -> None:
    _print_costs(costs)
    print(f"\nCalibration runs ({data['measured']}, load {data['load'][0]:.1f}):")
    print(f"{'run':<12} {'ranks':>5} {'used for':>9} {'measured s':>11} {'predicted s':>12}"
          f" {'error':>7}")
    for row in validate(data, costs):
        print(f"{row['run']:<12} {row['ranks']:>5} {'fit' if row['fitted'] else 'check':>9} "
              f"{row['measured_s']:>11.2f} {row['predicted_s']:>12.2f} {row['error']:>+7.1%}")
    for title, alpha in (("gloo's per-step cost as measured here", None),
                         ("gloo's per-step cost 10 us (a quiet core)", 10e-6)):
        print(f"\nPredicted at 8 ranks a node, default depth, --deadline 120, {title}:")
        print(f"{'ranks':>5}  {'scenario':<19} {'wall s':>7} {'ended by':>9} {'needs s':>8} "
              f"{'store ops (mesh/init/results)':>31} {'busy s':>7}  top phases (s)")
        for row in predict(costs, alpha=alpha):
            top = sorted(row["phases"], key=lambda p: -p[1])[:4]
            where = ", ".join(f"{name} {s:.1f}" for name, s in top)
            by = row["store_ops_by"]
            ops = (f"{row['store_ops']:,} ({by.get('mesh', 0):,}/{by.get('init', 0):,}/"
                   f"{by.get('results', 0):,})")
            print(f"{row['ranks']:>5}  {row['scenario']:<19} {row['wall_s']:>7.1f} "
                  f"{row['ended_by']:>9} {row['needs_s']:>8.1f} {ops:>31} "
                  f"{row['store_busy_s']:>7.1f}  {where}")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--no-measure", action="store_true",
                   help=f"reprint from {CALIBRATION.name} without running checks")
    p.add_argument("--reps", type=int, default=1)
    args = p.parse_args()
    if args.no_measure:
        data = json.loads(CALIBRATION.read_text())
    else:
        print("Measuring (one check at a time):", flush=True)
        data = measure(args.reps)
    costs = fit(data)
    data["costs"] = asdict(costs)
    if not args.no_measure:
        CALIBRATION.write_text(json.dumps(data, indent=1) + "\n")
    show(data, costs)


if __name__ == "__main__":
    main()
