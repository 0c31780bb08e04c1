"""A scale model of ``ddpdoctor check``: a discrete-event simulation of a whole run.

Every rank is a process of the simulation that walks through what the check does (start,
env probe, the reachability mesh, the pre-init barrier, the process group's init, the
connectivity all-reduce and hypercube rounds, the bandwidth sweep and link rounds, the
dataloader probe, its result); the parent ends it (report). What ranks share is simulated
as such: the rendezvous store is one server whose per-op cost serialises across every
client; collectives and p2p rounds end when their slowest member arrives plus the transfer
(alpha-beta: latency per step, bytes over bandwidth, per-byte reduction); CPU work is slowed
by the node's ranks-per-core. Two backends: gloo (full-mesh init through the store, ring
collectives over TCP) and nccl (a unique id through the store, a bootstrap over TCP, ring or
tree collectives with NCCL's own latency model). Costs come from a calibration (``Costs``),
fitted to real gloo runs by ``benchmarks/check_scale_model.py``; nccl's are assumptions
(``Nccl``). Pure: no torch, no sockets.
"""

from __future__ import annotations

import functools
import heapq
import math
from collections import Counter
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Literal

from ddpdoctor.check.schedule import hypercube

# Mirrors of the check's constants (not imported: the check's modules import socket and
# torch machinery; this model stays pure). tests/unit/test_check_scale_model.py holds them equal.
MAX_CONNECTING = 32  # ddpdoctor/check/mesh.py: outgoing connections in flight per rank
REPORTER_POLL_S = 0.2  # ddpdoctor/check/worker.py: rank 0's reporter polls for results this often
CONNECTIVITY_ELEMENTS = 1024  # ddpdoctor/check/probes/connectivity.py: all-reduce float32s
P2P_BYTES = 4096 * 4  # ddpdoctor/check/probes/connectivity.py: P2P_ELEMENTS float32 per direction

Backend = Literal["gloo", "nccl"]


@dataclass(frozen=True)
class Link:
    """One tier of the network, alpha-beta: a message step costs ``alpha_s`` plus its bytes
    times ``byte_s``; a reduction adds ``reduce_byte_s`` per byte reduced."""

    alpha_s: float
    byte_s: float
    reduce_byte_s: float = 0.0


@dataclass(frozen=True)
class Nccl:
    """NCCL at scale. Nothing here can measure it: every value is an assumption, printed
    with its source by ``benchmarks/check_scale_model.py`` (``ASSUMED_NCCL``)."""

    # init: the unique id through the store (rank 0 sets it, every rank gets it once), then
    # the bootstrap (bootstrap.cc): every rank connects to the root on rank 0, which answers
    # each with its ring neighbour (serial at the root), then ring all-gathers of small
    # messages over TCP (N-1 steps each), then the communicator's own setup per rank
    root_per_rank_s: float  # the bootstrap root's work per rank (accept, receive, reply)
    bootstrap_step_s: float  # one ring all-gather step: a small TCP message, node to node
    bootstrap_allgathers: int  # ring all-gathers during ncclCommInitRank
    init_fixed_s: float  # ncclCommInitRank's setup after the bootstrap (topology, buffers)
    # collectives, NCCL's tuning model (src/graph/tuning.cc): latency = base + per-step
    # latency x steps (ring: NVLink steps inside a node, network steps between nodes; tree:
    # 2 x ((ranks per node - 1) NVLink hops + log2(nodes) network hops)); bytes over bus
    # bandwidth (nccl-tests' busbw definition)
    base_s: float
    ring_nvlink_s: float
    ring_net_s: float
    tree_nvlink_s: float
    tree_net_s: float
    busbw_node: float  # bytes/s, one node (NVLink)
    busbw_nodes: float  # bytes/s, across nodes (the NICs)
    p2p_intra: Link  # send/recv between two GPUs of a node
    p2p_inter: Link  # send/recv across nodes (one GPU's NIC)
    p2p_connect_s: float  # a send/recv pair's first use: NCCL connects p2p lazily


@dataclass(frozen=True)
class Costs:
    """Per-operation costs, in seconds (CPU work is at one rank per core)."""

    doctor_s: float  # local launcher: the doctor's own start, imports, zygote, report
    rank_start_s: float  # local launcher: one rank started (serial, from the zygote)
    torchrun_s: float  # multi-node: CLI, torchrun, c10d rendezvous, report, outside ranks
    import_s: float  # multi-node: a rank's interpreter start and `import torch` (CPU)
    exit_s: float  # ranks done to the doctor's exit
    store_op_s: float  # the store server's time per op (one server: serialised)
    store_rtt_s: float  # a client's round trip for one op, server time excluded
    store_byte_s: float  # the store's time per byte of a value moved through it
    env_s: float  # the env probe's work on a rank
    dataloader_s: float  # the dataloader probe's work on a rank
    conn_cpu_s: float  # one mesh connection, both ends' CPU (under each rank's GIL)
    pg_fixed_s: float  # init_process_group, fixed part
    pg_pair_s: float  # init_process_group: one gloo pair connected (per peer, per rank)
    # the parent: decode and analyse one rank's mesh row (rows carry only failures; the
    # analysis, ddpdoctor/check/analysis/reachability.py, is linear in ranks + failures)
    report_rank_s: float
    mesh_row_bytes: float  # JSON bytes of one rank's mesh row (no failures)
    addr_bytes: float  # bytes per rank in the mesh's address table (one store value)
    intra: Link  # between ranks of one node
    inter: Link  # between nodes
    nccl: Nccl | None = None  # the nccl backend's costs (a Job on nccl needs them)


@dataclass(frozen=True)
class Depth:
    """What the bandwidth and dataloader probes move (``CheckOptions`` at a depth)."""

    collectives: tuple[str, ...] = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
    min_bytes: int = 1024
    max_bytes: int = 16 << 20
    warmup: int = 1
    iters: int = 5
    trials: int = 3
    trial_budget_s: float | None = 0.025
    link_bytes: int = 8 << 20
    link_iters: int = 3
    dataloader_share: float = 1.0  # of the default depth's batches

    def sizes(self) -> list[int]:
        out, s = [], self.min_bytes
        while s <= self.max_bytes:
            out.append(s)
            s *= 4
        return out


QUICK = Depth(collectives=("all_reduce",), max_bytes=1 << 20, link_bytes=1 << 20,
              link_iters=1, dataloader_share=0.5)


@dataclass(frozen=True)
class Job:
    """A check to simulate. ``bad_pair``: two ranks that cannot open a TCP connection to
    each other (a dropped SYN). The mesh names them; on gloo every rank then skips the
    process group (its full-mesh init could not finish) and the check ends after the mesh;
    on nccl (which connects lazily, over its own transport) the backend rounds run and the
    pair's p2p transfer waits its deadline once."""

    nodes: int
    per_node: int
    cores_per_node: float
    launcher: Literal["local", "torchrun"] = "torchrun"
    depth: Depth = field(default_factory=Depth)
    deadline_s: float = 120.0
    bad_pair: tuple[int, int] | None = None
    backend: Backend = "gloo"

    @property
    def world(self) -> int:
        return self.nodes * self.per_node

    @property
    def contention(self) -> float:
        """How much slower CPU work runs: ranks sharing a node's cores."""
        return max(1.0, self.per_node / self.cores_per_node)

    def node_of(self, rank: int) -> int:
        return rank // self.per_node

    def link(self, a: int, b: int, costs: Costs) -> Link:
        return costs.intra if self.node_of(a) == self.node_of(b) else costs.inter

    def ring_link(self, costs: Costs) -> Link:
        """A ring's (or tree's) slowest tier: between nodes once there are several."""
        return costs.inter if self.nodes > 1 else costs.intra


@dataclass(frozen=True)
class Result:
    wall_s: float  # the check's wall time: its report, or its deadline's kill
    phases: tuple[tuple[str, float], ...]  # (phase, seconds on the critical path)
    ended_by: Literal["report", "deadline"]
    store_ops: int
    store_busy_s: float
    needs_s: float  # what it would take without the deadline (inf: never ends)
    mesh_done: bool  # the mesh (which names a bad pair) ended before the deadline
    store_ops_by: tuple[tuple[str, int], ...] = ()  # store ops per part of the check


# ----------------------------------------------------------------------------- timeouts


def mesh_connect_timeout_s(deadline_s: float) -> float:
    """ddpdoctor/check/probes/reachability.py: a mesh connection's own deadline."""
    return max(2.0, min(5.0, deadline_s / 20))


def mesh_budget_s(deadline_s: float) -> float:
    """ddpdoctor/check/probes/reachability.py ``budget``."""
    return min(deadline_s / 3, 20.0 + 2 * mesh_connect_timeout_s(deadline_s))


@functools.lru_cache(maxsize=8)
def _rounds(n: int) -> tuple[dict[int, int], ...]:
    return tuple(hypercube(n))  # the probes' own schedule, built once per world size


def hypercube_rounds(n: int) -> int:
    return len(_rounds(n))


def p2p_deadline_s(deadline_s: float, world: int) -> float:
    """ddpdoctor/check/probes/connectivity.py: each p2p transfer's deadline."""
    return max(2.0, deadline_s / (hypercube_rounds(world) + 3))


def partner(rank: int, rnd: int, world: int) -> int | None:
    """``rank``'s partner in round ``rnd`` of the probes' schedule, if it has one."""
    return _rounds(world)[rnd].get(rank)


# ----------------------------------------------------------------------------- formulas


def collective_s(name: str, size: int, n: int, link: Link) -> float:
    """One collective of nccl-tests size ``size`` on ``n`` ranks, as gloo runs it: ring
    all-reduce (reduce-scatter then all-gather), ring all-gather and reduce-scatter,
    binomial-tree broadcast, dissemination barrier."""
    if n < 2:
        return 0.0
    share = (n - 1) / n * size
    if name == "all_reduce":
        return 2 * (n - 1) * link.alpha_s + 2 * share * link.byte_s + share * link.reduce_byte_s
    if name == "all_gather":
        return (n - 1) * link.alpha_s + share * link.byte_s
    if name == "reduce_scatter":
        return (n - 1) * link.alpha_s + share * (link.byte_s + link.reduce_byte_s)
    if name == "broadcast":
        steps = hypercube_rounds(n)
        return steps * (link.alpha_s + size * link.byte_s)
    if name == "barrier":
        return hypercube_rounds(n) * link.alpha_s
    raise ValueError(name)


def nccl_collective_s(name: str, size: int, n: int, nodes: int, nc: Nccl) -> float:
    """One collective of ``size`` bytes on ``n`` ranks over ``nodes`` nodes, as NCCL's tuning
    model (src/graph/tuning.cc ``ncclTopoTuneModel``) costs it: ring for every collective,
    the cheaper of ring and tree for all-reduce (and torch's barrier, a 1-element
    all-reduce on nccl)."""
    if n < 2:
        return 0.0
    busbw = nc.busbw_nodes if nodes > 1 else nc.busbw_node
    if name == "barrier":
        name, size = "all_reduce", 4
    if name == "all_reduce":
        steps, inter, moved = 2 * (n - 1), 2 * (nodes - 1), 2 * (n - 1) / n * size
    elif name in ("all_gather", "reduce_scatter"):
        steps, inter, moved = n - 1, nodes - 1, (n - 1) / n * size
    elif name == "broadcast":
        steps, inter, moved = n, nodes if nodes > 1 else 0, float(size)
    else:
        raise ValueError(name)
    ring = (nc.base_s + (steps - inter) * nc.ring_nvlink_s + inter * nc.ring_net_s
            + moved / busbw)
    if name != "all_reduce":
        return ring
    tree = (nc.base_s + 2 * ((n // nodes - 1) * nc.tree_nvlink_s
                             + hypercube_rounds(nodes) * nc.tree_net_s) + 2 * size / busbw)
    return min(ring, tree)


def sweep_size_s(one: float, small: float, barrier: float, depth: Depth) -> float:
    """ddpdoctor/check/probes/bandwidth.py ``sweep`` at one size, given one call of the
    collective at that size (``one``), an 8-byte all-reduce and a barrier: warm-ups, the
    sizing call and its MAX all-reduce, then ``trials`` x (barrier + ``iters`` calls)."""
    iters = depth.iters
    if depth.trial_budget_s is not None:
        iters = max(1, min(depth.iters, int(depth.trial_budget_s / max(one, 1e-9))))
        warm = depth.warmup * one + one + small
    else:
        warm = depth.warmup * one
    return warm + depth.trials * (barrier + iters * one)


def link_round_s(link: Link, depth: Depth, contention: float) -> float:
    """ddpdoctor/check/probes/bandwidth.py ``links``: both directions, ``link_iters`` each,
    a token first."""
    one = 2 * link.alpha_s + depth.link_bytes * link.byte_s
    return 2 * depth.link_iters * one * contention


def mesh_waves(peers: int) -> int:
    return math.ceil(peers / MAX_CONNECTING) if peers > 0 else 0


def mesh_connect_s(peers: int, rtt_s: float, conn_cpu_s: float, contention: float,
                   bad_position: int | None = None, timeout_s: float = 5.0) -> float:
    """One rank connecting to ``peers`` peers, ``MAX_CONNECTING`` in flight: each wave of
    connections costs a handshake round trip, and every connection costs CPU on both ends
    under one GIL, so the rank ends after max(waves x RTT, peers x CPU). A dead peer at
    ``bad_position`` (0-based, in submission order) holds one slot for ``timeout_s``
    from when its connection starts, the rest going on in the other slots."""
    cpu = conn_cpu_s * contention
    if bad_position is None:
        return max(mesh_waves(peers) * rtt_s, peers * cpu)
    rest = peers - 1
    slots = MAX_CONNECTING - 1
    others = max(math.ceil(rest / slots) * rtt_s if rest else 0.0, rest * cpu)
    started = max(bad_position // MAX_CONNECTING * rtt_s, bad_position * cpu)
    return max(others, started + timeout_s)


# ----------------------------------------------------------------------------- the engine


class Waitable:
    def wait(self, sim: Sim, resume: Callable[[], None]) -> None:
        raise NotImplementedError


Step = float | Waitable
Proc = Generator[Step, None, None]


class Sim:
    """A heap of timed callbacks; processes are generators yielding delays or waitables."""

    def __init__(self) -> None:
        self.now = 0.0
        self._heap: list[tuple[float, int, Callable[[], None]]] = []
        self._seq = 0

    def at(self, t: float, fn: Callable[[], None]) -> None:
        self._seq += 1
        heapq.heappush(self._heap, (t, self._seq, fn))

    def start(self, proc: Proc) -> None:
        self.at(self.now, lambda: self._step(proc))

    def _step(self, proc: Proc) -> None:
        try:
            what = next(proc)
        except StopIteration:
            return
        if isinstance(what, Waitable):
            what.wait(self, lambda: self._step(proc))
        else:
            self.at(self.now + max(0.0, what), lambda: self._step(proc))

    def run(self) -> float:
        while self._heap:
            t, _, fn = heapq.heappop(self._heap)
            self.now = t
            fn()
        return self.now


class Barrier(Waitable):
    """Released ``then_s`` after the last of ``n`` members arrives (a collective, a store
    wait on every rank's key, a p2p pair). ``on_release`` learns the release time."""

    def __init__(self, n: int, then_s: float = 0.0,
                 on_release: Callable[[float], None] | None = None) -> None:
        self.n, self.then_s, self.on_release = n, then_s, on_release
        self._waiting: list[Callable[[], None]] = []

    def wait(self, sim: Sim, resume: Callable[[], None]) -> None:
        self._waiting.append(resume)
        if len(self._waiting) == self.n:
            t = sim.now + self.then_s
            if self.on_release is not None:
                self.on_release(t)
            for fn in self._waiting:
                sim.at(t, fn)


class Store:
    """The rendezvous store: one server. A batch of ``k`` sequential ops from one client
    takes the server ``k * op_s`` plus its bytes (FIFO behind every other client's), and
    the client at least ``k`` round trips. ``by`` counts the ops per part of the check."""

    def __init__(self, costs: Costs) -> None:
        self.costs = costs
        self.free_at = 0.0
        self.ops = 0
        self.busy_s = 0.0
        self.by: Counter[str] = Counter()

    def batch(self, k: int, nbytes: float = 0.0, tag: str = "other") -> Waitable:
        self.by[tag] += k
        return _StoreBatch(self, k, nbytes)

    def serve(self, now: float, k: int, nbytes: float) -> float:
        c = self.costs
        work = k * c.store_op_s + nbytes * c.store_byte_s
        self.ops += k
        self.busy_s += work
        self.free_at = max(now, self.free_at) + work
        return max(self.free_at, now + k * (c.store_rtt_s + c.store_op_s)
                   + nbytes * c.store_byte_s)


class _StoreBatch(Waitable):
    def __init__(self, store: Store, k: int, nbytes: float) -> None:
        self.store, self.k, self.nbytes = store, k, nbytes

    def wait(self, sim: Sim, resume: Callable[[], None]) -> None:
        sim.at(self.store.serve(sim.now, self.k, self.nbytes), resume)


# ----------------------------------------------------------------------------- the check


class _Run:
    """One simulated check: shared objects (store, barriers) and each rank's process."""

    def __init__(self, job: Job, costs: Costs) -> None:
        if job.backend == "nccl" and costs.nccl is None:
            raise ValueError("a job on nccl needs Costs.nccl")
        self.job, self.costs = job, costs
        self.sim = Sim()
        self.store = Store(costs)
        self.n = job.world
        # CPU contention slows what runs on a rank's CPU: all of gloo, none of nccl's kernels
        self.f = job.contention
        self.marks: dict[str, float] = {}
        self.bars: dict[str, Barrier] = {}
        self.pairs: dict[tuple[str, int, int], Barrier] = {}
        self.done = 0

    # -- helpers

    def mark(self, phase: str) -> None:
        self.marks[phase] = max(self.marks.get(phase, 0.0), self.sim.now)

    def barrier(self, name: str, then_s: float = 0.0) -> Barrier:
        if name not in self.bars:
            self.bars[name] = Barrier(self.n, then_s)
        return self.bars[name]

    def pair(self, name: str, a: int, b: int, then_s: float) -> Barrier:
        key = (name, min(a, b), max(a, b))
        if key not in self.pairs:
            self.pairs[key] = Barrier(2, then_s)
        return self.pairs[key]

    def bad(self, rank: int) -> int | None:
        """The peer this rank cannot reach, if any."""
        bp = self.job.bad_pair
        if bp is None:
            return None
        return bp[1] if rank == bp[0] else bp[0] if rank == bp[1] else None

    def coll(self, name: str, size: int) -> float:
        """One collective on the whole world, on the job's backend."""
        job, c = self.job, self.costs
        if job.backend == "nccl":
            assert c.nccl is not None
            return nccl_collective_s(name, size, self.n, job.nodes, c.nccl)
        return collective_s(name, size, self.n, job.ring_link(c)) * self.f

    def p2p_link(self, a: int, b: int) -> tuple[Link, float]:
        """The link a send/recv between ``a`` and ``b`` uses, and the CPU slow-down on it."""
        job, c = self.job, self.costs
        if job.backend == "nccl":
            assert c.nccl is not None
            same = job.node_of(a) == job.node_of(b)
            return (c.nccl.p2p_intra if same else c.nccl.p2p_inter), 1.0
        return job.link(a, b, c), self.f

    # -- phases of one rank

    def rank(self, r: int) -> Proc:
        yield from self.start(r)
        yield self.store.batch(2)  # store connect, progress("env")
        yield self.costs.env_s * self.f
        self.mark("env probe")
        yield from self.mesh(r)
        self.mark("reachability mesh")
        yield self.store.batch(3)  # pre-init progress marks, PRE_DONE set
        yield self.barrier("pre_done")  # every rank waits on every rank's PRE_DONE key
        yield self.store.batch(1)
        self.mark("pre-init barrier")
        if self.job.bad_pair is not None and self.job.backend == "gloo":
            # the mesh's cut flag: every rank skips gloo's init and the rank probes
            yield self.store.batch(1)  # progress("done")
            yield from self.finish(r)
            return
        yield from self.init_pg(r)
        self.mark("process group init")
        yield from self.connectivity(r)
        self.mark("connectivity")
        yield from self.bandwidth(r)
        self.mark("bandwidth")
        yield self.store.batch(1)
        yield self.costs.dataloader_s * self.job.depth.dataloader_share * self.f
        self.mark("dataloader")
        yield from self.finish(r)

    def start(self, r: int) -> Proc:
        c, job = self.costs, self.job
        if job.launcher == "local":
            yield c.doctor_s + (r + 1) * c.rank_start_s * self.f
        else:
            yield c.torchrun_s + c.import_s * self.f
        self.mark("start")

    def mesh(self, r: int) -> Proc:
        """ddpdoctor/check/mesh.py ``run_mesh``: O(1) store ops per rank."""
        c, job, n = self.costs, self.job, self.n
        table = n * c.addr_bytes
        yield self.store.batch(3, tag="mesh")  # progress x2, set its address
        if r == 0:  # wait for every address, one multi_get, publish the table
            yield self.barrier("addresses")
            yield self.store.batch(3, 2 * table, tag="mesh")
        else:
            yield self.barrier("addresses")
        yield self.barrier("table_set")  # every rank waits for the table's key ...
        yield self.store.batch(1, table, tag="mesh")  # ... and gets it once
        bad = self.bad(r)
        rtt = 2 * job.ring_link(c).alpha_s
        position = None if bad is None else (bad if bad < r else bad - 1)
        yield mesh_connect_s(n - 1, rtt, c.conn_cpu_s, self.f, position,
                             mesh_connect_timeout_s(job.deadline_s))
        if bad is not None:
            yield self.store.batch(1, tag="mesh")  # set the failed flag
        yield self.store.batch(1, tag="mesh")  # add(done); the last also sets all_done
        yield self.barrier("mesh_done")  # a wait on all_done: released by its set
        yield self.store.batch(2, tag="mesh")  # the wait's reply, check(failed)

    def init_pg(self, r: int) -> Proc:
        c, n = self.costs, self.n
        yield self.store.batch(1)  # progress
        if self.job.backend == "nccl":
            nc = c.nccl
            assert nc is not None
            # rank 0 sets the unique id, every rank gets it once (torch's ProcessGroupNCCL)
            yield self.store.batch(1, tag="init")
            yield self.barrier("nccl_bootstrap", n * nc.root_per_rank_s
                               + nc.bootstrap_allgathers * (n - 1) * nc.bootstrap_step_s)
            yield nc.init_fixed_s
        else:
            yield self.store.batch(1, tag="init")  # gloo's set of its address
            yield self.barrier("pg_addresses")  # gloo waits for every rank's key ...
            yield self.store.batch(2 * n, tag="init")  # ... and gets it: N waits + N gets
            yield c.pg_fixed_s + (n - 1) * c.pg_pair_s * self.f
        yield self.barrier("pg_ready")

    def connectivity(self, r: int) -> Proc:
        job, n = self.job, self.n
        yield self.store.batch(1)
        yield self.barrier("world_allreduce", self.coll("all_reduce", CONNECTIVITY_ELEMENTS * 4))
        nc = self.costs.nccl if job.backend == "nccl" else None
        for i in range(hypercube_rounds(n)):
            peer = partner(r, i, n)
            if peer is None:
                continue
            yield self.store.batch(1)
            link, f = self.p2p_link(r, peer)
            cost = (2 * link.alpha_s + P2P_BYTES * link.byte_s) * f
            if nc is not None:
                cost += nc.p2p_connect_s  # a new peer every round: connected on first use
            if self.bad(r) == peer:
                cost = p2p_deadline_s(job.deadline_s, n)
            yield self.pair(f"p2p{i}", r, peer, cost)

    def bandwidth(self, r: int) -> Proc:
        job, n = self.job, self.n
        small, barrier = self.coll("all_reduce", 8), self.coll("barrier", 0)
        for name in job.depth.collectives:
            yield self.store.batch(1)
            for size in job.depth.sizes():
                cost = sweep_size_s(self.coll(name, size), small, barrier, job.depth)
                yield self.barrier(f"{name}/{size}", cost)
        for i in range(hypercube_rounds(n)):
            peer = partner(r, i, n)
            if peer is None:
                continue
            yield self.store.batch(1)
            link, f = self.p2p_link(r, peer)
            yield self.pair(f"link{i}", r, peer, link_round_s(link, job.depth, f))

    def finish(self, r: int) -> Proc:
        c, job = self.costs, self.job
        if job.launcher == "torchrun":
            yield self.store.batch(3, 2 * c.mesh_row_bytes, tag="results")  # pre, result
        else:
            yield self.store.batch(1)  # progress("done"); the result goes to a file
        self.done += 1
        if self.done == self.n:
            self.sim.start(self.report())

    def report(self) -> Proc:
        c, job, n = self.costs, self.job, self.n
        if job.launcher == "torchrun":
            yield REPORTER_POLL_S / 2
            # rank 0's reporter: progress, pre and result of every rank, one client
            yield self.store.batch(6 * n, 2 * n * c.mesh_row_bytes, tag="results")
        yield report_s(n, c) + c.exit_s
        self.mark("report")


def report_s(world: int, costs: Costs) -> float:
    """The parent's work on the mesh rows: linear in ranks (failures are few)."""
    return world * costs.report_rank_s


def deadline_start_s(job: Job, costs: Costs) -> float:
    """When the check's deadline starts counting: the launch (local), or the worker's
    start after its imports (torchrun)."""
    if job.launcher == "local":
        return costs.doctor_s
    return costs.torchrun_s + costs.import_s * job.contention


def simulate(job: Job, costs: Costs) -> Result:
    """Run the simulation of ``job``; the wall time and where it went."""
    run = _Run(job, costs)
    for r in range(job.world):
        run.sim.start(run.rank(r))
    end = run.sim.run()
    needs = end if "report" in run.marks else math.inf
    cut = deadline_start_s(job, costs) + job.deadline_s + costs.exit_s
    ended_by: Literal["report", "deadline"] = "report"
    marks = dict(run.marks)
    if needs > cut:
        ended_by, end = "deadline", cut
        marks = {k: v for k, v in marks.items() if v <= cut}
        marks["deadline"] = cut
    mesh_done = run.marks.get("reachability mesh", math.inf) <= cut
    return Result(round(end, 4), _phases(marks), ended_by, run.store.ops,
                  round(run.store.busy_s, 4), round(needs, 4), mesh_done,
                  tuple(sorted(run.store.by.items())))


def _phases(marks: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """Each phase's share of the critical path: from the previous phase's last rank to its."""
    out, prev = [], 0.0
    for name, t in sorted(marks.items(), key=lambda kv: kv[1]):
        out.append((name, round(max(0.0, t - prev), 4)))
        prev = max(prev, t)
    return tuple(out)
