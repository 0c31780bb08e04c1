"""A scale model of ``ddpdoctor check``: a discrete-event simulation of a whole run.

Every rank is a process of the simulation that walks through what the check does (start,
env probe, the reachability mesh, the pre-init barrier, the process group's init, the
connectivity all-reduce and hypercube rounds, the bandwidth sweep and link rounds, the
dataloader probe, its result); the parent ends it (report). What ranks share is simulated
as such: the rendezvous store is one server whose per-op cost serialises across every
client; collectives and p2p rounds end when their slowest member arrives plus the transfer
(alpha-beta: latency per step, bytes over bandwidth, per-byte reduction); CPU work is slowed
by the node's ranks-per-core. Costs come from a calibration (``Costs``), fitted to real runs
by ``benchmarks/check_scale_model.py``. Pure: no torch, no sockets.
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Generator
from dataclasses import dataclass, field
from typing import Literal

# Mirrors of the check's constants (not imported: the check's modules import socket and
# torch machinery; this model stays pure). tests/test_check_scale_model.py holds them equal.
MAX_CONNECTING = 32  # ddpdoctor/check/mesh.py: outgoing connections in flight per rank
MESH_POLL_S = 0.05  # the mesh: a rank that finished connecting polls the store this often
REPORTER_POLL_S = 0.2  # ddpdoctor/check/worker.py: rank 0's reporter polls for results this often
CONNECTIVITY_ELEMENTS = 1024  # ddpdoctor/check/probes/connectivity.py: all-reduce float32s
P2P_BYTES = 4096 * 4  # ddpdoctor/check/probes/connectivity.py: P2P_ELEMENTS float32 per direction


@dataclass(frozen=True)
class Link:
    """One tier of the network, alpha-beta: a message step costs ``alpha_s`` plus its bytes
    times ``byte_s``; a reduction adds ``reduce_byte_s`` per byte reduced."""

    alpha_s: float
    byte_s: float
    reduce_byte_s: float = 0.0


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
    report_pair_s: float  # the parent: decode and analyse one directed mesh pair
    # the parent's reachability analysis scans every pair once per rank and once per node
    # (ddpdoctor/check/analysis/reachability.py _rank_findings, _node_findings): O(N^3)
    report_cubic_s: float
    mesh_bytes_per_pair: float  # JSON bytes per directed pair in a rank's mesh row
    intra: Link  # between ranks of one node
    inter: Link  # between nodes


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

    @classmethod
    def default(cls) -> Depth:
        return cls()

    @classmethod
    def quick(cls) -> Depth:
        return cls(collectives=("all_reduce",), max_bytes=1 << 20, link_bytes=1 << 20,
                   link_iters=1, dataloader_share=0.5)

    def sizes(self) -> list[int]:
        out, s = [], self.min_bytes
        while s <= self.max_bytes:
            out.append(s)
            s *= 4
        return out


@dataclass(frozen=True)
class BadLink:
    """A rank pair that cannot talk. ``blocks_init``: it cannot connect at all (a dropped
    SYN), so gloo's full-mesh init cannot finish either; otherwise it fails the mesh and
    its p2p transfer only (the process group connects, e.g. an intermittent path)."""

    a: int
    b: int
    blocks_init: bool = True


@dataclass(frozen=True)
class Job:
    nodes: int
    per_node: int
    cores_per_node: float
    launcher: Literal["local", "torchrun"] = "torchrun"
    depth: Depth = field(default_factory=Depth)
    deadline_s: float = 120.0
    bad_link: BadLink | None = None
    # The change this model suggests (not in the check): once the mesh has named a pair
    # that cannot connect, skip the process group and report from the pre-init evidence.
    skip_pg_after_mesh_failure: bool = False

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


# ----------------------------------------------------------------------------- timeouts


def mesh_connect_timeout_s(deadline_s: float) -> float:
    """ddpdoctor/check/probes/reachability.py: a mesh connection's own deadline."""
    return max(2.0, min(5.0, deadline_s / 20))


def mesh_budget_s(deadline_s: float) -> float:
    """ddpdoctor/check/probes/reachability.py ``budget``."""
    return min(deadline_s / 3, 20.0 + 2 * mesh_connect_timeout_s(deadline_s))


def hypercube_rounds(n: int) -> int:
    return math.ceil(math.log2(n)) if n > 1 else 0


def p2p_deadline_s(deadline_s: float, world: int) -> float:
    """ddpdoctor/check/probes/connectivity.py: each p2p transfer's deadline."""
    return max(2.0, deadline_s / (hypercube_rounds(world) + 3))


def partner(rank: int, rnd: int, world: int) -> int | None:
    """ddpdoctor/check/schedule.py ``hypercube``: rank XOR 2**round, if it exists."""
    peer = rank ^ (1 << rnd)
    return peer if peer < world else None


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


def sweep_size_s(name: str, size: int, n: int, link: Link, depth: Depth,
                 contention: float) -> float:
    """ddpdoctor/check/probes/bandwidth.py ``sweep`` at one size: warm-ups, the sizing call
    and its MAX all-reduce, then ``trials`` x (barrier + ``iters`` calls), back to back."""
    one = collective_s(name, size, n, link) * contention
    small = collective_s("all_reduce", 8, n, link) * contention
    barrier = collective_s("barrier", 0, n, link) * contention
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
    takes the server ``k * op_s`` (FIFO behind every other client's), and the client at
    least ``k`` round trips. Ranks polling it (``pollers``) take their share first."""

    def __init__(self, costs: Costs) -> None:
        self.costs = costs
        self.free_at = 0.0
        self.ops = 0
        self.busy_s = 0.0
        self.pollers = 0
        self.poll_s = MESH_POLL_S

    def batch(self, k: int, nbytes: float = 0.0) -> Waitable:
        return _StoreBatch(self, k, nbytes)

    def serve(self, now: float, k: int, nbytes: float) -> float:
        c = self.costs
        work = k * c.store_op_s + nbytes * c.store_byte_s
        load = min(0.9, self.pollers * c.store_op_s / self.poll_s)
        work /= 1.0 - load
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
        self.job, self.costs = job, costs
        self.sim = Sim()
        self.store = Store(costs)
        n = job.world
        self.f = job.contention
        self.marks: dict[str, float] = {}
        self.bars: dict[str, Barrier] = {}
        self.pairs: dict[tuple[str, int, int], Barrier] = {}
        self.done = 0
        self.n = n

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
        bl = self.job.bad_link
        if bl is None:
            return None
        return bl.b if rank == bl.a else bl.a if rank == bl.b else None

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
        if self.job.bad_link is not None and self.job.bad_link.blocks_init:
            if not self.job.skip_pg_after_mesh_failure:
                return  # gloo's full mesh cannot connect the pair: blocked to the deadline
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
        c, job, n = self.costs, self.job, self.n
        yield self.store.batch(4)  # progress x2, set address
        yield self.barrier("addresses")  # store.wait on every rank's address key
        yield self.store.batch(2 * n)  # check + get of every rank's address
        bad = self.bad(r)
        rtt = 2 * job.ring_link(c).alpha_s
        position = None if bad is None else (bad if bad < r else bad - 1)
        yield mesh_connect_s(n - 1, rtt, c.conn_cpu_s, self.f, position,
                             mesh_connect_timeout_s(job.deadline_s))
        yield self.store.batch(1)  # add(done)
        self.store.pollers += 1
        yield self.barrier("mesh_done", MESH_POLL_S / 2)
        self.store.pollers = 0

    def init_pg(self, r: int) -> Proc:
        c, n = self.costs, self.n
        yield self.store.batch(2)  # progress, gloo's set of its address
        yield self.barrier("pg_addresses")  # gloo waits for every rank's key ...
        yield self.store.batch(2 * n)  # ... and gets it: N waits + N gets per rank
        yield c.pg_fixed_s + (n - 1) * c.pg_pair_s * self.f
        yield self.barrier("pg_ready")

    def connectivity(self, r: int) -> Proc:
        job, c, n = self.job, self.costs, self.n
        yield self.store.batch(1)
        ar = collective_s("all_reduce", CONNECTIVITY_ELEMENTS * 4, n, job.ring_link(c))
        yield self.barrier("world_allreduce", ar * self.f)
        for i in range(hypercube_rounds(n)):
            peer = partner(r, i, n)
            if peer is None:
                continue
            yield self.store.batch(1)
            link = job.link(r, peer, c)
            cost = (2 * link.alpha_s + P2P_BYTES * link.byte_s) * self.f
            if self.bad(r) == peer:
                cost = p2p_deadline_s(job.deadline_s, n)
            yield self.pair(f"p2p{i}", r, peer, cost)

    def bandwidth(self, r: int) -> Proc:
        job, c, n = self.job, self.costs, self.n
        link = job.ring_link(c)
        for name in job.depth.collectives:
            yield self.store.batch(1)
            for size in job.depth.sizes():
                cost = sweep_size_s(name, size, n, link, job.depth, self.f)
                yield self.barrier(f"{name}/{size}", cost)
        for i in range(hypercube_rounds(n)):
            peer = partner(r, i, n)
            if peer is None:
                continue
            yield self.store.batch(1)
            yield self.pair(f"link{i}", r, peer,
                            link_round_s(job.link(r, peer, c), job.depth, self.f))

    def finish(self, r: int) -> Proc:
        c, job = self.costs, self.job
        row = (self.n - 1) * c.mesh_bytes_per_pair
        if job.launcher == "torchrun":
            yield self.store.batch(3, 2 * row)  # pre and result JSON into the store
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
            yield self.store.batch(6 * n, n * (n - 1) * c.mesh_bytes_per_pair)
        yield report_s(n, job.nodes, c) + c.exit_s
        self.mark("report")


def report_s(world: int, nodes: int, costs: Costs) -> float:
    """The parent's work on the mesh rows: O(N^2) decode, O(N^3) analysis scans."""
    pairs = world * (world - 1)
    scans = world + (nodes if nodes > 1 else 0)
    return pairs * costs.report_pair_s + scans * pairs * costs.report_cubic_s


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
                  round(run.store.busy_s, 4), round(needs, 4), mesh_done)


def _phases(marks: dict[str, float]) -> tuple[tuple[str, float], ...]:
    """Each phase's share of the critical path: from the previous phase's last rank to its."""
    out, prev = [], 0.0
    for name, t in sorted(marks.items(), key=lambda kv: kv[1]):
        out.append((name, round(max(0.0, t - prev), 4)))
        prev = max(prev, t)
    return tuple(out)


def store_ops_per_rank(world: int) -> int:
    """Store ops one rank issues in a healthy check outside its progress marks: the mesh's
    address reads (check + get per rank) and gloo's (wait + get per rank): O(N)."""
    return 4 * world
