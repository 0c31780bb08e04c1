"""The data each probe's ``collect`` writes on every rank, as its ``analyze`` reads it back.

One TypedDict per probe (the reachability probe's row is ``ddpdoctor.check.mesh.MeshRow``,
written there). They describe the JSON that travels from a rank to the parent: dict keys
are strings, sequences are lists. A TypedDict is a plain dict at runtime, so the values on
the wire and in reports are exactly what the probes build.

They live here, not in each probe's module, because a probe module imports its analysis
(for ``PROBE``) and an analysis imports its probe's shape: one module for both would be an
import cycle (tests/unit/test_layers.py counts imports made only for type checkers too).
Keys a probe writes only sometimes are in a ``total=False`` part.
"""

from __future__ import annotations

from typing import TypedDict

# ---- env (check/probes/env.py) -----------------------------------------------------------


class EnvVersions(TypedDict):
    python: str
    torch: str
    cuda: str | None
    nccl: str | None


class IbDevice(TypedDict):
    name: str
    ports: dict[str, dict[str, str | None]]  # port -> {"link_layer", "state"}


class P2pPair(TypedDict):
    a: int
    b: int
    path: str | None  # "NVL", else NVML's PCIe level
    p2p_read: str | None


class P2pTopology(TypedDict, total=False):
    """Empty when NCCL_P2P_LEVEL is unset; ``skipped`` when NVML could not tell."""

    skipped: str
    gpus: int
    pairs: list[P2pPair]


class ShmInfo(TypedDict, total=False):
    """``total`` and ``free`` bytes of /dev/shm, or the ``error`` that stopped reading it."""

    total: int
    free: int
    error: str | None


class Ulimits(TypedDict):
    nofile: list[int | None]  # [soft, hard]; None is unlimited
    memlock: list[int | None]


class EnvData(TypedDict):
    hostname: str
    pid: int
    local_rank: int
    versions: EnvVersions
    env: dict[str, str]
    interfaces: dict[str, list[str]]
    infiniband: list[IbDevice]
    p2p: P2pTopology
    shm: ShmInfo
    ulimit: Ulimits
    cpu_count: int | None
    affinity: list[int]
    numa_nodes: dict[str, str]
    torch_threads: int
    torch_interop_threads: int
    local_world_size: int


# ---- rendezvous (check/probes/rendezvous.py; once, in the parent) ------------------------


class PortOwner(TypedDict, total=False):
    pid: int | None
    cmdline: str


class _RendezvousBase(TypedDict):
    master_addr: str
    master_port: int


class RendezvousData(_RendezvousBase, total=False):
    resolve_error: str
    resolved: str
    local: bool
    port_free: bool
    bind_error: str
    owner: PortOwner | None
    reachable: bool
    listening: bool
    connect_error: str


# ---- connectivity (check/probes/connectivity.py) -----------------------------------------


class _P2pBase(TypedDict):
    ok: bool


class P2pError(TypedDict, total=False):
    error: str  # when the transfer failed or brought wrong data


class P2pResult(_P2pBase, P2pError, total=False):
    ms: float  # when the transfer finished


class _ConnectivityBase(TypedDict):
    allreduce_ok: bool
    allreduce_expected: float
    allreduce_got: float
    allreduce_ms: float
    p2p: dict[str, P2pResult]  # by the peer's rank


class AllreduceError(TypedDict, total=False):
    allreduce_error: str  # when the world all-reduce did not finish


class ConnectivityData(_ConnectivityBase, AllreduceError):
    pass


# ---- bandwidth (check/probes/bandwidth.py) -----------------------------------------------


class SweepRow(TypedDict):
    collective: str
    size: int
    iters: int
    median_s: float
    times_s: list[float]


class NicInfo(TypedDict, total=False):
    """The interface towards MASTER_ADDR (empty when no route was found)."""

    name: str
    address: str
    speed_mbps: int | None


class BandwidthData(TypedDict):
    host: str
    world_size: int
    nic: NicInfo
    sweep: list[SweepRow]
    links_in: dict[str, float]  # GB/s into this rank, by the sending rank


# ---- dataloader (check/probes/dataloader.py) ---------------------------------------------


class _DataloaderBase(TypedDict):
    workers: int
    batch_bytes: int
    timeout_s: float


class DataloaderData(_DataloaderBase, total=False):
    # ``ok`` and ``seconds`` are always there once ``collect`` returns; the keys are
    # written as the probe goes, so the type cannot require them.
    seconds: float
    ok: bool
    batches: int  # when ok
    error: str  # when not ok
    error_text: str
    cause: str | None


# ---- gpu and topology (check/probes/gpu.py, check/probes/topology.py) --------------------


class _RankIdentityBase(TypedDict):
    hostname: str
    rank: int
    local_rank: int
    pid: int
    ppid: int
    backend: str
    device: str
    cuda_visible_devices: str | None
    cuda_index: int | None
    gpu_uuid: str | None


class RankIdentity(_RankIdentityBase, total=False):
    """Who a rank is and which GPU it uses (check/probes/gpu.py ``rank_identity``)."""

    gpu_uuid_error: str
    # nvml.snapshot_into: the snapshot (NvmlSnapshot.to_dict), or None and why it is not.
    nvml: dict[str, object] | None
    skipped: str


class GpuData(RankIdentity, total=False):
    process_names: dict[str, str | None]  # by pid


class NumaNode(TypedDict):
    node: int
    cpus: str | None
    mem_total_kib: int | None


class Nic(TypedDict):
    name: str
    operstate: str | None
    speed_mbps: int | None
    driver: str | None
    physical: bool
    mtu: int | None
    numa_node: int | None


class TopologyData(RankIdentity, total=False):
    numa: list[NumaNode]
    nics: list[Nic]
    gpu_numa: dict[str, int | None]  # by NVML device index
