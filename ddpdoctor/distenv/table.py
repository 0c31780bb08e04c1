"""Known NCCL_*, TORCH_NCCL_*, TORCH_FR_*, TORCH_DISTRIBUTED_* and GLOO_* environment variables.

Rules as data: each variable's status, with the source it was taken from beside it. The
analysis (``ddpdoctor/distenv/judge.py``) only interprets this table.

Where the entries come from:

- NCCL: the generated part below lists every variable NCCL 2.30.7 reads (``NCCL_PARAM``,
  ``DEFINE_NCCL_PARAM`` and every quoted ``"NCCL_..."`` literal under ``src/`` and
  ``plugins/`` of the ``v2.30.7-1`` tag, tests and examples left out) plus every variable
  of its documentation page (NCCL's ``env.rst``, published as
  https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html). ``_NCCL_GONE`` holds
  the variables some release from 2.3 to 2.29 read (same scan over the last tag of every
  minor release) that 2.30.7 no longer reads. The curated entries (``_CURATED``) come from
  the documentation's "(since X, removed in Y)" / "deprecated in" notes and from the code.
  To refresh: fetch github:NVIDIA/nccl and redo that scan at the newest tag.
- torch: ``torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp`` and ``FlightRecorder.hpp``
  as shipped in torch 2.13.0 (``torch/include/...``): each ``std::vector<std::string>``
  names a variable, its later entries are deprecated aliases torch still honours (with a
  "deprecated" warning; the first name wins when both are set). The ``NCCL_`` -> ``TORCH_NCCL_``
  renames are pytorch/pytorch#114077, released in torch 2.2.0.
- gloo: the ``GLOO_*`` strings in torch 2.13.0's ``libtorch_cpu.so``.

Status -> what the check says (``distenv/judge.py``):
``valid``: nothing; ``deprecated`` (still read, a successor exists): info;
``renamed`` (the old name still works as an alias): warning; ``obsolete`` (no longer read:
set but silently ignored): warning; ``not_a_variable`` (nothing ever read it): warning.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Status = Literal["valid", "deprecated", "renamed", "obsolete", "not_a_variable"]
Owner = Literal["nccl", "torch", "gloo"]

NCCL_TABLE_VERSION = "2.30.7"  # the NCCL release the "valid" list was read from
TORCH_TABLE_VERSION = "2.13.0"
DOCS = "https://docs.nvidia.com/deeplearning/nccl/user-guide/docs/env.html"
SRC = "https://github.com/NVIDIA/nccl/blob/v2.30.7-1/"
TORCH_PG_NCCL = ("https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/"
                 "ProcessGroupNCCL.hpp")
TORCH_FR = ("https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/"
            "FlightRecorder.hpp")
TORCH_NCCL_DOCS = ("https://github.com/pytorch/pytorch/blob/main/docs/source/"
                   "torch_nccl_environment_variables.rst")
TORCH_RENAME = "https://github.com/pytorch/pytorch/pull/114077"
TORCH_FIND_NCCL = "https://github.com/pytorch/pytorch/blob/main/cmake/Modules/FindNCCL.cmake"
TORCH_DIST = "https://github.com/pytorch/pytorch/blob/main/torch/distributed/"
TORCH_GLOO = ("https://github.com/pytorch/pytorch/blob/main/torch/csrc/distributed/c10d/"
              "ProcessGroupGloo.cpp")
GLOO = "https://github.com/pytorch/gloo"

# The families whose every name this table claims to know; others (CUDA_*, OMP_*) are not
# judged by name.
PREFIXES = ("NCCL_", "TORCH_NCCL_", "TORCH_FR_", "TORCH_DISTRIBUTED_", "TORCH_GLOO_", "GLOO_")

# NCCL path types as NCCL_P2P_LEVEL / NCCL_NET_GDR_LEVEL accept them (src/graph/topo.cc
# topoPathTypeStr, up to PATH_SYS; compared with strcmp, so case matters), nearest first.
NCCL_PATH_TYPES = ("LOC", "NVL", "NVB", "C2C", "PIX", "PXB", "P2C", "PXN", "PHB", "SYS")
_LEVEL_SRC = SRC + "src/graph/paths.cc#L244"


@dataclass(frozen=True)
class Var:
    name: str
    status: Status
    source: str  # where this entry was read: a URL
    owner: Owner = "nccl"
    since: str = ""  # the owner's version where this status began ("2.5")
    replacement: str = ""  # the name (or NAME=VALUE) to use instead
    note: str = ""  # one line: what happens to it, what to do
    # Accepted values (upper-cased when ``case_sensitive`` is False); empty: not checked.
    values: tuple[str, ...] = ()
    case_sensitive: bool = False
    legacy_integers: bool = False  # NCCL_*_LEVEL: a value starting with a digit is accepted
    integer: bool = False  # NCCL_PARAM: read with strtoll, so a word reads as 0
    # A value outside ``values`` makes the job fail (error), instead of being ignored.
    bad_value_breaks: bool = False


_CURATED: tuple[Var, ...] = (
    # -- NCCL: from the "(since X, removed in Y)" / "deprecated in" notes of env.rst --
    Var("NCCL_TREE_THRESHOLD", "obsolete", DOCS + "#nccl-tree-threshold", since="2.5",
        replacement="NCCL_ALGO / NCCL_PROTO",
        note="removed in NCCL 2.5 (NCCL picks tree or ring per size itself); ignored"),
    Var("NCCL_LL_THRESHOLD", "obsolete", DOCS + "#nccl-ll-threshold", since="2.5",
        replacement="NCCL_PROTO", note="removed in NCCL 2.5; ignored"),
    Var("NCCL_SINGLE_RING_THRESHOLD", "obsolete", DOCS + "#nccl-single-ring-threshold",
        since="2.3", note="removed in NCCL 2.3; ignored"),
    Var("NCCL_IB_CUDA_SUPPORT", "obsolete", DOCS + "#nccl-ib-cuda-support", since="2.4",
        replacement="NCCL_NET_GDR_LEVEL", note="removed in NCCL 2.4.0; ignored"),
    Var("NCCL_IB_GDR_LEVEL", "obsolete",
        DOCS + "#nccl-net-gdr-level-formerly-nccl-ib-gdr-level", since="2.4",
        replacement="NCCL_NET_GDR_LEVEL",
        note="renamed NCCL_NET_GDR_LEVEL; the old name is not read since NCCL 2.4"),
    Var("NCCL_CHECKS_DISABLE", "obsolete", DOCS + "#nccl-checks-disable", since="2.2.12",
        note="deprecated in NCCL 2.2.12 and no longer read; ignored"),
    Var("NCCL_RINGS", "obsolete",
        "https://github.com/NVIDIA/nccl/blob/v2.4.8-1/src/misc/rings.cc", since="2.5",
        replacement="NCCL_GRAPH_FILE", note="last read by NCCL 2.4; ignored"),
    Var("NCCL_THREAD_THRESHOLD", "obsolete",
        "https://github.com/NVIDIA/nccl/blob/v2.4.8-1/src/init.cc", since="2.5",
        note="last read by NCCL 2.4; ignored"),
    Var("NCCL_MIN_NRINGS", "renamed", DOCS + "#nccl-min-nchannels", since="2.5",
        replacement="NCCL_MIN_CTAS", integer=True,
        note="the pre-2.5 name of NCCL_MIN_NCHANNELS (itself deprecated in 2.17 for "
             "NCCL_MIN_CTAS); still read as an alias, ignored when NCCL_MIN_NCHANNELS is set"),
    Var("NCCL_MAX_NRINGS", "renamed", DOCS + "#nccl-max-nchannels", since="2.5",
        replacement="NCCL_MAX_CTAS", integer=True,
        note="the pre-2.5 name of NCCL_MAX_NCHANNELS (itself deprecated in 2.17 for "
             "NCCL_MAX_CTAS); still read as an alias, ignored when NCCL_MAX_NCHANNELS is set"),
    Var("NCCL_MIN_NCHANNELS", "deprecated", DOCS + "#nccl-min-nchannels", since="2.17",
        replacement="NCCL_MIN_CTAS", integer=True,
        note="deprecated in NCCL 2.17; if both are set the higher minimum wins"),
    Var("NCCL_MAX_NCHANNELS", "deprecated", DOCS + "#nccl-max-nchannels", since="2.17",
        replacement="NCCL_MAX_CTAS", integer=True,
        note="deprecated in NCCL 2.17; if both are set the lower maximum wins"),
    Var("NCCL_CHECK_POINTERS", "deprecated", DOCS + "#nccl-check-pointers", since="2.29.7",
        replacement="NCCL_CHECK_MODE=DEBUG_LOCAL", integer=True,
        note="deprecated in NCCL 2.29.7"),
    Var("NCCL_LAUNCH_MODE", "valid", DOCS + "#nccl-launch-mode",
        values=("PARALLEL", "GROUP")),
    # -- NCCL: values with a rule (the rest of each is in the generated list) --
    Var("NCCL_P2P_LEVEL", "valid", DOCS + "#nccl-p2p-level", values=NCCL_PATH_TYPES,
        case_sensitive=True, legacy_integers=True,
        note=f"NCCL compares the value with strcmp ({_LEVEL_SRC}): any other spelling, "
             "lower case included, is ignored and NCCL picks the level itself"),
    Var("NCCL_NET_GDR_LEVEL", "valid",
        DOCS + "#nccl-net-gdr-level-formerly-nccl-ib-gdr-level", values=NCCL_PATH_TYPES,
        case_sensitive=True, legacy_integers=True,
        note=f"NCCL compares the value with strcmp ({_LEVEL_SRC}): any other spelling, "
             "lower case included, is ignored"),
    Var("NCCL_DEBUG", "valid", DOCS + "#nccl-debug",
        values=("VERSION", "WARN", "INFO", "ABORT", "TRACE")),
    Var("NCCL_SOCKET_FAMILY", "valid", DOCS + "#nccl-socket-family",
        values=("AF_INET", "AF_INET6"), case_sensitive=True,
        note=f"compared with strcmp ({SRC}src/misc/socket.cc#L185): anything else is "
             "ignored"),
    # -- NCCL: not variables at all (recipes set them; no NCCL release reads them) --
    Var("NCCL_TIMEOUT", "not_a_variable", DOCS,
        replacement="init_process_group(timeout=...)",
        note="no NCCL release reads NCCL_TIMEOUT (not in its sources or documentation); "
             "the collective timeout is init_process_group(timeout=...), the watchdog's "
             "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC, and for IB NCCL_IB_TIMEOUT"),
    # -- build-time names (torch's FindNCCL.cmake; NVIDIA's containers export NCCL_VERSION):
    # NCCL never reads them, but they are no mistake in a job's environment either.
    *(Var(n, "valid", TORCH_FIND_NCCL, note="read when building torch, not at run time")
      for n in ("NCCL_VERSION", "NCCL_ROOT", "NCCL_ROOT_DIR", "NCCL_INCLUDE_DIR",
                "NCCL_LIB_DIR")),
    # -- torch: NCCL_* names torch renamed TORCH_NCCL_* in 2.2 (still honoured, warned) --
    *(Var(old, "renamed", TORCH_RENAME, owner="torch", since="2.2", replacement="TORCH_" + old,
          note=f"a torch variable, not NCCL's: torch >= 2.2 reads TORCH_{old} and honours "
               f"{old} only as a deprecated alias (the new name wins when both are set)")
      for old in ("NCCL_BLOCKING_WAIT", "NCCL_ASYNC_ERROR_HANDLING", "NCCL_DESYNC_DEBUG",
                  "NCCL_ENABLE_TIMING", "NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK")),
    Var("TORCH_NCCL_TRACE_CPP_STACK", "renamed", TORCH_FR, owner="torch",
        replacement="TORCH_FR_CPP_STACK",
        note="the Flight Recorder reads TORCH_FR_CPP_STACK first; this is its deprecated "
             "alias"),
    # -- torch: TORCH_NCCL_* it reads (ProcessGroupNCCL.hpp in torch 2.13, and its docs) --
    Var("TORCH_NCCL_ASYNC_ERROR_HANDLING", "valid", TORCH_PG_NCCL, owner="torch",
        values=("0", "1", "2", "3")),
    *(Var(n, "valid", TORCH_PG_NCCL, owner="torch") for n in (
        "TORCH_NCCL_BCAST_UNIQUEID", "TORCH_NCCL_SHOW_EAGER_INIT_P2P_SERIALIZATION_WARNING",
        "TORCH_NCCL_HIGH_PRIORITY", "TORCH_NCCL_BLOCKING_WAIT", "TORCH_NCCL_DUMP_ON_TIMEOUT",
        "TORCH_NCCL_PROPAGATE_ERROR", "TORCH_NCCL_DESYNC_DEBUG", "TORCH_NCCL_ENABLE_TIMING",
        "TORCH_NCCL_ENABLE_MONITORING", "TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC",
        "TORCH_NCCL_RETHROW_CUDA_ERRORS", "TORCH_NCCL_TRACE_BUFFER_SIZE",
        "TORCH_NCCL_WAIT_TIMEOUT_DUMP_MILSEC", "TORCH_NCCL_COORD_CHECK_MILSEC",
        "TORCH_NCCL_LOG_CPP_STACK_ON_UNCLEAN_SHUTDOWN", "TORCH_NCCL_EXTRA_DUMP_ON_EXEC",
        "TORCH_NCCL_CUDA_EVENT_CACHE", "TORCH_NCCL_RANKS_PER_ROOT", "TORCH_NCCL_NAN_CHECK",
        "TORCH_NCCL_AVOID_RECORD_STREAMS", "TORCH_NCCL_USE_TENSOR_REGISTER_ALLOCATOR_HOOK",
        "TORCH_NCCL_USE_COMM_NONBLOCKING", "TORCH_NCCL_NONBLOCKING_TIMEOUT")),
    *(Var(n, "valid", TORCH_NCCL_DOCS, owner="torch") for n in (
        "TORCH_NCCL_DEBUG_INFO_TEMP_FILE", "TORCH_NCCL_DEBUG_INFO_PIPE_FILE")),
    *(Var(n, "valid", TORCH_FR, owner="torch") for n in (
        "TORCH_FR_BUFFER_SIZE", "TORCH_FR_CPP_STACK", "TORCH_FR_DUMP_TEMP_FILE",
        "TORCH_FR_DUMP_DYNAMIC_FILE_NAME")),
    # -- torch.distributed --
    Var("TORCH_DISTRIBUTED_DEBUG", "valid", TORCH_DIST + "__init__.py", owner="torch",
        values=("OFF", "INFO", "DETAIL"), bad_value_breaks=True,
        note="any other value makes `import torch.distributed` raise ValueError: The value "
             "of TORCH_DISTRIBUTED_DEBUG must be OFF, INFO, or DETAIL."),
    *(Var(n, "valid", TORCH_DIST, owner="torch") for n in (
        "TORCH_DISTRIBUTED_USE_TORCHCOMMS", "TORCH_DISTRIBUTED_COMPILE_ON_ONE_RANK")),
    Var("TORCH_GLOO_LAZY_INIT", "valid", TORCH_GLOO, owner="torch"),
    # -- gloo --
    *(Var(n, "valid", TORCH_GLOO, owner="gloo") for n in (
        "GLOO_SOCKET_IFNAME", "GLOO_DEVICE_TRANSPORT")),
    *(Var(n, "valid", GLOO, owner="gloo") for n in (
        "GLOO_DISABLE_CONNECTION_RETRIES", "GLOO_ENABLE_RANK_AS_SEQUENCE_NUMBER",
        "GLOO_ENABLE_STORE_V2_API", "GLOO_LOG_LEVEL")),
)

# --- generated (see the module docstring): NCCL v2.30.7-1 reads these ---
_NCCL_READ: tuple[tuple[str, str], ...] = (
    ("NCCL_ALGO", DOCS + "#nccl-algo"),
    ("NCCL_ALLGATHERV_ENABLE", SRC + "src/enqueue.cc#L30"),
    ("NCCL_ALLOC_P2P_NET_LL_BUFFERS", DOCS + "#nccl-alloc-p2p-net-ll-buffers"),
    ("NCCL_BUFFSIZE", DOCS + "#nccl-buffsize"),
    ("NCCL_CGA_CLUSTER_SIZE", DOCS + "#nccl-cga-cluster-size"),
    ("NCCL_CHECK_MODE", DOCS + "#nccl-check-mode"),
    ("NCCL_CHUNK_SIZE", SRC + "src/enqueue.cc#L860"),
    ("NCCL_COLLNET_ENABLE", DOCS + "#nccl-collnet-enable"),
    ("NCCL_COLLNET_NODE_THRESHOLD", DOCS + "#nccl-collnet-node-threshold"),
    ("NCCL_COMM_BLOCKING", DOCS + "#nccl-comm-blocking"),
    ("NCCL_COMM_ID", SRC + "src/bootstrap.cc#L109"),
    ("NCCL_COMM_PROPERTIES_INITIALIZER", SRC + "src/dev_runtime.cc#L1468"),
    ("NCCL_COMM_SHRINK_SHARE_RESOURCES", SRC + "src/init.cc#L1766"),
    ("NCCL_COMM_SPLIT_SHARE_RESOURCES", SRC + "src/init.cc#L1765"),
    ("NCCL_CONF_FILE", DOCS + "#nccl-conf-file"),
    ("NCCL_CONNECT_ROUND_MAX_PEERS", SRC + "src/transport.cc#L75"),
    ("NCCL_CROSS_NIC", DOCS + "#nccl-cross-nic"),
    ("NCCL_CTA_POLICY", DOCS + "#nccl-cta-policy"),
    ("NCCL_CUMEM_ENABLE", DOCS + "#nccl-cumem-enable"),
    ("NCCL_CUMEM_HOST_ENABLE", DOCS + "#nccl-cumem-host-enable"),
    ("NCCL_DEBUG", DOCS + "#nccl-debug"),
    ("NCCL_DEBUG_FILE", DOCS + "#nccl-debug-file"),
    ("NCCL_DEBUG_SUBSYS", DOCS + "#nccl-debug-subsys"),
    ("NCCL_DEBUG_TIMESTAMP_FORMAT", DOCS + "#nccl-debug-timestamp-format"),
    ("NCCL_DEBUG_TIMESTAMP_LEVELS", DOCS + "#nccl-debug-timestamp-levels"),
    ("NCCL_DEV_API_JIT", SRC + "src/gin/gin_host.cc#L20"),
    ("NCCL_DEV_COMM_REQUIREMENTS_INITIALIZER", SRC + "src/dev_runtime.cc#L1508"),
    ("NCCL_DISABLE_MEM_MANAGER", SRC + "src/mem_manager.cc#L28"),
    ("NCCL_DMABUF_ENABLE", DOCS + "#nccl-dmabuf-enable"),
    ("NCCL_ELASTIC_BUFFER_REGISTER", SRC + "src/dev_runtime.cc#L30"),
    ("NCCL_ENABLE_VERSION_CHECK", SRC + "src/dev_runtime.cc#L29"),
    ("NCCL_ENV_PLUGIN", DOCS + "#nccl-env-plugin"),
    ("NCCL_GDAKI_USE_RELIABLE_DB", SRC + "src/transport/net_ib/gdaki/gin_host_gdaki.cc#L458"),
    ("NCCL_GDRCOPY_ENABLE", SRC + "src/init.cc#L130"),
    ("NCCL_GDRCOPY_FIFO_ENABLE", SRC + "src/init.cc#L393"),
    ("NCCL_GDRCOPY_FLUSH_ENABLE", SRC + "src/transport/net.cc#L341"),
    ("NCCL_GDRCOPY_SYNC_ENABLE", SRC + "src/transport/net.cc#L339"),
    ("NCCL_GDR_FLUSH_DISABLE", SRC + "src/transport/net_ib/connect.cc#L1354"),
    ("NCCL_GIN_CONNECTION_RAIL", SRC + "src/dev_runtime.cc#L1132"),
    ("NCCL_GIN_ENABLE", SRC + "src/gin/gin_host.cc#L19"),
    ("NCCL_GIN_ERROR_QUERY_SEC", SRC + "src/transport/net_ib/gdaki/gin_host_gdaki.cc#L58"),
    ("NCCL_GIN_GDAKI_MAX_DEST_RD_ATOMIC", SRC + "src/transport/net_ib/gdaki/gin_host_gdaki.cc#L56"),
    ("NCCL_GIN_GDAKI_MAX_QP_RD_ATOMIC", SRC + "src/transport/net_ib/gdaki/gin_host_gdaki.cc#L57"),
    ("NCCL_GIN_GDAKI_NIC_HANDLER", SRC + "src/transport/net_ib/gdaki/gin_host_gdaki.cc#L54"),
    ("NCCL_GIN_GDAKI_QP_DEPTH", SRC + "src/transport/net_ib/gdaki/gin_host_gdaki.cc#L55"),
    ("NCCL_GIN_IB_TC", SRC + "src/transport/net_ib/gin.cc#L47"),
    ("NCCL_GIN_NCONNECTIONS", SRC + "src/gin/gin_host.cc#L78"),
    ("NCCL_GIN_PLUGIN", SRC + "src/plugin/gin.cc#L203"),
    ("NCCL_GIN_PLUGIN_REF_COUNT", SRC + "src/plugin/gin.cc#L23"),
    ("NCCL_GIN_PROXY_QUEUE_SIZE", SRC + "src/gin/gin_host_proxy.cc#L20"),
    ("NCCL_GIN_TYPE", SRC + "src/transport/net_ib/gin.cc#L46"),
    ("NCCL_GRAPH_DUMP_FILE", SRC + "src/graph/search.cc#L1355"),
    ("NCCL_GRAPH_DUMP_FILE_RANK", SRC + "src/init.cc#L856"),
    ("NCCL_GRAPH_FILE", SRC + "src/graph/search.cc#L1111"),
    ("NCCL_GRAPH_HELPER_DISABLE", SRC + "src/init.cc#L391"),
    ("NCCL_GRAPH_MIXING_SUPPORT", DOCS + "#nccl-graph-mixing-support"),
    ("NCCL_GRAPH_REGISTER", DOCS + "#nccl-graph-register"),
    ("NCCL_GRAPH_STREAM_ORDERING", DOCS + "#nccl-graph-stream-ordering"),
    ("NCCL_GROUP_CUDA_STREAM", SRC + "src/init.cc#L57"),
    ("NCCL_HOSTID", SRC + "src/misc/utils.cc#L125"),
    ("NCCL_IBVERBS_LIB", SRC + "src/misc/ibvsymbols.cc#L78"),
    ("NCCL_IB_ADAPTIVE_ROUTING", DOCS + "#nccl-ib-adaptive-routing"),
    ("NCCL_IB_ADDR_FAMILY", DOCS + "#nccl-ib-addr-family"),
    ("NCCL_IB_ADDR_RANGE", DOCS + "#nccl-ib-addr-range"),
    ("NCCL_IB_AR_THRESHOLD", DOCS + "#nccl-ib-ar-threshold"),
    ("NCCL_IB_DATA_DIRECT", SRC + "src/transport/net_ib/init.cc#L13"),
    ("NCCL_IB_DEVICE_PCI_ORDER", SRC + "src/transport/net_ib/init.cc#L30"),
    ("NCCL_IB_DISABLE", DOCS + "#nccl-ib-disable"),
    ("NCCL_IB_ECE_ENABLE", DOCS + "#nccl-ib-ece-enable"),
    ("NCCL_IB_FIFO_TC", DOCS + "#nccl-ib-fifo-tc"),
    ("NCCL_IB_GID_INDEX", DOCS + "#nccl-ib-gid-index"),
    ("NCCL_IB_HCA", DOCS + "#nccl-ib-hca"),
    ("NCCL_IB_MERGE_NICS", DOCS + "#nccl-ib-merge-nics"),
    ("NCCL_IB_MERGE_VFS", SRC + "src/transport/net_ib/init.cc#L28"),
    ("NCCL_IB_MQP_RETRY_ALL", SRC + "src/misc/ibvwrap.cc#L98"),
    ("NCCL_IB_MQP_RETRY_CNT", SRC + "src/misc/ibvwrap.cc#L99"),
    ("NCCL_IB_MQP_RETRY_SLEEP_MSEC", SRC + "src/misc/ibvwrap.cc#L100"),
    ("NCCL_IB_OOO_RQ", DOCS + "#nccl-ib-ooo-rq"),
    ("NCCL_IB_PCI_RELAXED_ORDERING", DOCS + "#nccl-ib-pci-relaxed-ordering"),
    ("NCCL_IB_PKEY", SRC + "src/transport/net_ib/connect.cc#L17"),
    ("NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS", SRC + "src/transport/net_ib/common.cc#L23"),
    ("NCCL_IB_QPS_PER_CONNECTION", DOCS + "#nccl-ib-qps-per-connection"),
    ("NCCL_IB_QUERY_PORT_SPEED", SRC + "src/misc/ibvwrap.cc#L101"),
    ("NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME", SRC + "src/transport/net_ib/p2p.cc#L17"),
    ("NCCL_IB_RESILIENCY_PORT_FAILOVER", SRC + "src/transport/net_ib/p2p_resiliency.cc#L13"),
    ("NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS",
     SRC + "src/transport/net_ib/p2p_resiliency.cc#L14"),
    ("NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY",
     SRC + "src/transport/net_ib/p2p_resiliency.cc#L15"),
    ("NCCL_IB_RESILIENCY_PORT_RECOVERY",
     SRC + "src/transport/net_ib/p2p_resiliency_recovery.cc#L10"),
    ("NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT",
     SRC + "src/transport/net_ib/p2p_resiliency_recovery.cc#L18"),
    ("NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL",
     SRC + "src/transport/net_ib/p2p_resiliency_recovery.cc#L13"),
    ("NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE",
     SRC + "src/transport/net_ib/p2p_resiliency_recovery.cc#L14"),
    ("NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE",
     SRC + "src/transport/net_ib/p2p_resiliency_recovery.cc#L15"),
    ("NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT",
     SRC + "src/transport/net_ib/p2p_resiliency_recovery.cc#L17"),
    ("NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX",
     SRC + "src/transport/net_ib/p2p_resiliency_recovery.cc#L19"),
    ("NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY",
     SRC + "src/transport/net_ib/p2p_resiliency_recovery.cc#L11"),
    ("NCCL_IB_RETRY_CNT", DOCS + "#nccl-ib-retry-cnt"),
    ("NCCL_IB_RETURN_ASYNC_EVENTS", DOCS + "#nccl-ib-return-async-events"),
    ("NCCL_IB_ROCE_VERSION_NUM", DOCS + "#nccl-ib-roce-version-num"),
    ("NCCL_IB_ROUTABLE_FLID_GID_INDEX", SRC + "src/transport/net_ib/connect.cc#L13"),
    ("NCCL_IB_SL", DOCS + "#nccl-ib-sl"),
    ("NCCL_IB_SPLIT_DATA_ON_QPS", DOCS + "#nccl-ib-split-data-on-qps"),
    ("NCCL_IB_SUBNET_AWARE_ROUTING", SRC + "src/transport/net_ib/connect.cc#L61"),
    ("NCCL_IB_SUBNET_PREFIX_LEN", SRC + "src/transport/net_ib/connect.cc#L62"),
    ("NCCL_IB_TC", DOCS + "#nccl-ib-tc"),
    ("NCCL_IB_TIMEOUT", DOCS + "#nccl-ib-timeout"),
    ("NCCL_IB_USE_INLINE", SRC + "src/transport/net_ib/connect.cc#L18"),
    ("NCCL_IB_WARN_RAIL_LOCAL", SRC + "src/transport/net_ib/connect.cc#L1099"),
    ("NCCL_IGNORE_COLLNET_MISMATCH", DOCS + "#nccl-ignore-collnet-mismatch"),
    ("NCCL_IGNORE_CPU_AFFINITY", DOCS + "#nccl-ignore-cpu-affinity"),
    ("NCCL_IGNORE_DISABLED_P2P", SRC + "src/graph/paths.cc#L282"),
    ("NCCL_IGNORE_NET_MISMATCH", DOCS + "#nccl-ignore-net-mismatch"),
    ("NCCL_INSPECTOR_COLL_POOL_SIZE", SRC + "plugins/profiler/inspector/inspector.cc#L837"),
    ("NCCL_INSPECTOR_COMM_POOL_SIZE", SRC + "plugins/profiler/inspector/inspector.cc#L839"),
    ("NCCL_INSPECTOR_DUMP_COLL_RING_SIZE", SRC + "plugins/profiler/inspector/inspector.cc#L835"),
    ("NCCL_INSPECTOR_DUMP_DIR", SRC + "plugins/profiler/inspector/inspector.cc#L464"),
    ("NCCL_INSPECTOR_DUMP_MIN_SIZE_BYTES", SRC + "plugins/profiler/inspector/inspector.cc#L834"),
    ("NCCL_INSPECTOR_DUMP_P2P_RING_SIZE", SRC + "plugins/profiler/inspector/inspector.cc#L836"),
    ("NCCL_INSPECTOR_DUMP_THREAD_ENABLE", SRC + "plugins/profiler/inspector/inspector.cc#L829"),
    ("NCCL_INSPECTOR_DUMP_THREAD_INTERVAL_MICROSECONDS",
     SRC + "plugins/profiler/inspector/inspector.cc#L830"),
    ("NCCL_INSPECTOR_DUMP_VERBOSE", SRC + "plugins/profiler/inspector/inspector.cc#L832"),
    ("NCCL_INSPECTOR_ENABLE", SRC + "plugins/profiler/inspector/inspector.cc#L827"),
    ("NCCL_INSPECTOR_ENABLE_P2P", SRC + "plugins/profiler/inspector/inspector.cc#L828"),
    ("NCCL_INSPECTOR_P2P_POOL_SIZE", SRC + "plugins/profiler/inspector/inspector.cc#L838"),
    ("NCCL_INSPECTOR_POOL_GROW", SRC + "plugins/profiler/inspector/inspector.cc#L840"),
    ("NCCL_INSPECTOR_PROM_DUMP", SRC + "plugins/profiler/inspector/inspector.cc#L833"),
    ("NCCL_INSPECTOR_REQUIRE_KERNEL_TIMING", SRC + "plugins/profiler/inspector/inspector.cc#L841"),
    ("NCCL_IPC_USE_ABSTRACT_SOCKET", DOCS + "#nccl-ipc-use-abstract-socket"),
    ("NCCL_L1_SHARED_MEMORY_CARVEOUT", SRC + "src/enqueue.cc#L29"),
    ("NCCL_LAUNCH_ORDER_IMPLICIT", DOCS + "#nccl-launch-order-implicit"),
    ("NCCL_LAUNCH_RACE_FATAL", DOCS + "#nccl-launch-race-fatal"),
    ("NCCL_LEGACY_CUDA_REGISTER", DOCS + "#nccl-legacy-cuda-register"),
    ("NCCL_LL128_BUFFSIZE", SRC + "src/init.cc#L816"),
    ("NCCL_LL128_C2C", SRC + "src/graph/tuning.cc#L235"),
    ("NCCL_LL128_NTHREADS", SRC + "src/graph/tuning.cc#L15"),
    ("NCCL_LL_BUFFSIZE", SRC + "src/init.cc#L815"),
    ("NCCL_LOCAL_REGISTER", DOCS + "#nccl-local-register"),
    ("NCCL_LSA_TEAM_SIZE", SRC + "src/dev_runtime.cc#L76"),
    ("NCCL_MAX_CTAS", DOCS + "#nccl-max-ctas"),
    ("NCCL_MAX_P2P_NCHANNELS", SRC + "src/graph/paths.cc#L958"),
    ("NCCL_MEM_SYNC_DOMAIN", DOCS + "#nccl-mem-sync-domain"),
    ("NCCL_MIN_CTAS", DOCS + "#nccl-min-ctas"),
    ("NCCL_MIN_P2P_NCHANNELS", SRC + "src/graph/paths.cc#L957"),
    ("NCCL_MLOPART_RDMA_ENABLE", SRC + "src/register/coll_reg.cc#L14"),
    ("NCCL_MNNVL_CLIQUE_ID", DOCS + "#nccl-mnnvl-clique-id"),
    ("NCCL_MNNVL_CROSS_CLIQUE", SRC + "src/init.cc#L709"),
    ("NCCL_MNNVL_ENABLE", DOCS + "#nccl-mnnvl-enable"),
    ("NCCL_MNNVL_RAIL_PER_HOST", SRC + "src/graph/search.cc#L591"),
    ("NCCL_MNNVL_SCATTER_NETS_ENABLE", SRC + "src/graph/search.cc#L540"),
    ("NCCL_MNNVL_UUID", DOCS + "#nccl-mnnvl-uuid"),
    ("NCCL_MULTI_RANK_GPU_ENABLE", DOCS + "#nccl-multi-rank-gpu-enable"),
    ("NCCL_MULTI_SEGMENT_REGISTER", SRC + "src/transport/generic.cc#L12"),
    ("NCCL_NCHANNELS_PER_NET_PEER", SRC + "src/init.cc#L1729"),
    ("NCCL_NET", DOCS + "#nccl-net"),
    ("NCCL_NETDEVS_POLICY", DOCS + "#nccl-netdevs-policy"),
    ("NCCL_NET_DISABLE_INTRA", SRC + "src/graph/paths.cc#L599"),
    ("NCCL_NET_FORCE_FLUSH", SRC + "src/graph/paths.cc#L572"),
    ("NCCL_NET_FORCE_MERGE", SRC + "src/graph/topo.cc#L1739"),
    ("NCCL_NET_GDR_C2C", DOCS + "#nccl-net-gdr-c2c"),
    ("NCCL_NET_GDR_LEVEL", DOCS + "#nccl-net-gdr-level-formerly-nccl-ib-gdr-level"),
    ("NCCL_NET_GDR_MLOPART", SRC + "src/graph/paths.cc#L466"),
    ("NCCL_NET_GDR_READ", DOCS + "#nccl-net-gdr-read"),
    ("NCCL_NET_MERGE_LEVEL", SRC + "src/graph/topo.cc#L1740"),
    ("NCCL_NET_MERGE_POLICY", DOCS + "#nccl-net-merge-policy"),
    ("NCCL_NET_OPTIONAL_RECV_COMPLETION", SRC + "src/transport/net.cc#L187"),
    ("NCCL_NET_OVERHEAD", SRC + "src/graph/tuning.cc#L226"),
    ("NCCL_NET_PLUGIN", DOCS + "#nccl-net-plugin"),
    ("NCCL_NET_PLUGIN_REF_COUNT", SRC + "src/plugin/net.cc#L38"),
    ("NCCL_NET_SHARED_BUFFERS", DOCS + "#nccl-net-shared-buffers"),
    ("NCCL_NET_SHARED_COMMS", DOCS + "#nccl-net-shared-comms"),
    ("NCCL_NO_CACHE", SRC + "src/param/param.cc#L20"),
    ("NCCL_NSOCKS_PERTHREAD", DOCS + "#nccl-nsocks-perthread"),
    ("NCCL_NTHREADS", DOCS + "#nccl-nthreads"),
    ("NCCL_NUM_RMA_CTX", SRC + "src/init.cc#L65"),
    ("NCCL_NVB_DISABLE", DOCS + "#nccl-nvb-disable"),
    ("NCCL_NVB_PRECONNECT", SRC + "src/init.cc#L858"),
    ("NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", SRC + "src/init.cc#L1730"),
    ("NCCL_NVLSTREE_MAX_CHUNKSIZE", SRC + "src/transport/nvls.cc#L161"),
    ("NCCL_NVLS_CHUNKSIZE", SRC + "src/transport/nvls.cc#L160"),
    ("NCCL_NVLS_ENABLE", DOCS + "#nccl-nvls-enable"),
    ("NCCL_NVLS_NCHANNELS", SRC + "src/init.cc#L64"),
    ("NCCL_NVTX_DISABLE", SRC + "src/init_nvtx.cc#L16"),
    ("NCCL_OOB_NET_ENABLE", DOCS + "#nccl-oob-net-enable"),
    ("NCCL_OOB_NET_IFNAME", DOCS + "#nccl-oob-net-ifname"),
    ("NCCL_P2P_DIRECT_DISABLE", DOCS + "#nccl-p2p-direct-disable"),
    ("NCCL_P2P_DISABLE", DOCS + "#nccl-p2p-disable"),
    ("NCCL_P2P_EPOCH_ENABLE", SRC + "src/enqueue.cc#L119"),
    ("NCCL_P2P_LEVEL", DOCS + "#nccl-p2p-level"),
    ("NCCL_P2P_LL_THRESHOLD", DOCS + "#nccl-p2p-ll-threshold"),
    ("NCCL_P2P_MAX_PEERS", SRC + "src/init.cc#L66"),
    ("NCCL_P2P_NET_CHUNKSIZE", DOCS + "#nccl-p2p-net-chunksize"),
    ("NCCL_P2P_NVL_CHUNKSIZE", SRC + "src/init.cc#L820"),
    ("NCCL_P2P_PCI_CHUNKSIZE", SRC + "src/init.cc#L819"),
    ("NCCL_P2P_PER_CHANNEL_NET_BW", SRC + "src/graph/paths.cc#L918"),
    ("NCCL_P2P_PXN_LEVEL", DOCS + "#nccl-p2p-pxn-level"),
    ("NCCL_P2P_READ_ENABLE", SRC + "src/transport/p2p.cc#L327"),
    ("NCCL_P2P_SCHEDULE_GROUP_SIZE", SRC + "src/init.cc#L888"),
    ("NCCL_P2P_USE_CUDA_MEMCPY", SRC + "src/transport/p2p.cc#L123"),
    ("NCCL_PARAM_DUMP_ALL", SRC + "src/param/param.cc#L16"),
    ("NCCL_PAT_ENABLE", SRC + "src/graph/tuning.cc#L215"),
    ("NCCL_PROFILER_PLUGIN", DOCS + "#nccl-profiler-plugin"),
    ("NCCL_PROGRESS_APPENDOP_FREQ", SRC + "src/proxy.cc#L926"),
    ("NCCL_PROTO", DOCS + "#nccl-proto"),
    ("NCCL_PROXY_APPEND_BATCH_SIZE", SRC + "src/proxy.cc#L833"),
    ("NCCL_PROXY_CPUSET", SRC + "src/proxy.cc#L931"),
    ("NCCL_PROXY_DUMP_SIGNAL", SRC + "src/proxy.cc#L925"),
    ("NCCL_PXN_C2C", DOCS + "#nccl-pxn-c2c"),
    ("NCCL_PXN_DISABLE", DOCS + "#nccl-pxn-disable"),
    ("NCCL_RAS_ADDR", DOCS + "#nccl-ras-addr"),
    ("NCCL_RAS_ENABLE", DOCS + "#nccl-ras-enable"),
    ("NCCL_RAS_TIMEOUT_FACTOR", DOCS + "#nccl-ras-timeout-factor"),
    ("NCCL_REPORT_CONNECT_PROGRESS", SRC + "src/transport.cc#L76"),
    ("NCCL_RMA_DISABLE", SRC + "src/dev_runtime.cc#L32"),
    ("NCCL_RMA_PLUGIN", SRC + "src/plugin/rma.cc#L166"),
    ("NCCL_RMA_PLUGIN_REF_COUNT", SRC + "src/plugin/rma.cc#L23"),
    ("NCCL_RMA_PROXY_DUMP_SIGNAL", SRC + "src/rma/rma_proxy.cc#L26"),
    ("NCCL_RMA_PROXY_QUEUE_SIZE", SRC + "src/rma/rma_proxy.cc#L27"),
    ("NCCL_RUNTIME_CONNECT", DOCS + "#nccl-runtime-connect"),
    ("NCCL_SET_CPU_STACK_SIZE", SRC + "src/init.cc#L67"),
    ("NCCL_SET_STACK_SIZE", DOCS + "#nccl-set-stack-size"),
    ("NCCL_SET_THREAD_NAME", DOCS + "#nccl-set-thread-name"),
    ("NCCL_SHADOW_MEMPOOL_MAX_SIZE", SRC + "src/allocator.cc#L14"),
    ("NCCL_SHM_DISABLE", DOCS + "#nccl-shm-disable"),
    ("NCCL_SHM_LOCALITY", SRC + "src/transport/shm.cc#L56"),
    ("NCCL_SINGLE_PROC_MEM_REG_ENABLE", SRC + "src/group.cc#L536"),
    ("NCCL_SOCKET_FAMILY", DOCS + "#nccl-socket-family"),
    ("NCCL_SOCKET_IFNAME", DOCS + "#nccl-socket-ifname"),
    ("NCCL_SOCKET_INLINE", SRC + "src/transport/net_socket.cc#L196"),
    ("NCCL_SOCKET_MAGIC", DOCS + "#nccl-socket-magic"),
    ("NCCL_SOCKET_MIN_TASKSIZE", SRC + "src/transport/net_socket.cc#L197"),
    ("NCCL_SOCKET_NTHREADS", DOCS + "#nccl-socket-nthreads"),
    ("NCCL_SOCKET_POLL_TIMEOUT_MSEC", DOCS + "#nccl-socket-poll-timeout-msec"),
    ("NCCL_SOCKET_RCVBUF", SRC + "src/misc/socket.cc#L22"),
    ("NCCL_SOCKET_RETRY_CNT", DOCS + "#nccl-socket-retry-cnt"),
    ("NCCL_SOCKET_RETRY_SLEEP_MSEC", DOCS + "#nccl-socket-retry-sleep-msec"),
    ("NCCL_SOCKET_SNDBUF", SRC + "src/misc/socket.cc#L23"),
    ("NCCL_SYM_CE_THRESHOLD", SRC + "src/enqueue.cc#L31"),
    ("NCCL_SYM_CTAS", SRC + "src/sym_kernels.cc#L131"),
    ("NCCL_SYM_GIN_KERNELS_ENABLE", DOCS + "#nccl-sym-gin-kernels-enable"),
    ("NCCL_SYM_KERNEL", SRC + "src/sym_kernels.cc#L112"),
    ("NCCL_SYM_NOWIN_ENABLE", SRC + "src/scheduler/symmetric_sched.cc#L21"),
    ("NCCL_SYM_REUSE_SYSMEM_HANDLES", SRC + "src/dev_runtime.cc#L31"),
    ("NCCL_SYM_RS_GIN_CHUNK_SIZE", SRC + "src/sym_kernels.cc#L133"),
    ("NCCL_SYM_TMA_ENABLE", SRC + "src/sym_kernels.cc#L134"),
    ("NCCL_THREAD_THRESHOLDS", SRC + "src/graph/tuning.cc#L598"),
    ("NCCL_TOPO_DUMP_FILE", DOCS + "#nccl-topo-dump-file"),
    ("NCCL_TOPO_DUMP_FILE_RANK", SRC + "src/graph/topo.cc#L992"),
    ("NCCL_TOPO_FILE", DOCS + "#nccl-topo-file"),
    ("NCCL_TOPO_SPLIT_MLOPART", SRC + "src/graph/topo.cc#L588"),
    ("NCCL_TUNER_PLUGIN", DOCS + "#nccl-tuner-plugin"),
    ("NCCL_UID_STAGGER_RATE", DOCS + "#nccl-uid-stagger-rate"),
    ("NCCL_UID_STAGGER_THRESHOLD", DOCS + "#nccl-uid-stagger-threshold"),
    ("NCCL_UNPACK_DOUBLE_NCHANNELS", SRC + "src/graph/connect.cc#L378"),
    ("NCCL_WARN_ENABLE_DEBUG_INFO", SRC + "src/debug.cc#L80"),
    ("NCCL_WIN_ENABLE", DOCS + "#nccl-win-enable"),
    ("NCCL_WIN_STRIDE", SRC + "src/dev_runtime.cc#L28"),
    ("NCCL_WORK_ARGS_BYTES", SRC + "src/init.cc#L396"),
    ("NCCL_WORK_FIFO_BYTES", SRC + "src/init.cc#L395"),
)
# NCCL_PARAM variables: NCCL reads them with strtoll (a word reads as 0).
_NCCL_INTEGER = frozenset({
    "NCCL_ALLGATHERV_ENABLE", "NCCL_ALLOC_P2P_NET_LL_BUFFERS", "NCCL_BUFFSIZE",
    "NCCL_CGA_CLUSTER_SIZE", "NCCL_CHUNK_SIZE", "NCCL_COLLNET_ENABLE",
    "NCCL_COLLNET_NODE_THRESHOLD", "NCCL_COMM_BLOCKING", "NCCL_COMM_SHRINK_SHARE_RESOURCES",
    "NCCL_COMM_SPLIT_SHARE_RESOURCES", "NCCL_CONNECT_ROUND_MAX_PEERS", "NCCL_CROSS_NIC",
    "NCCL_CUMEM_ENABLE", "NCCL_CUMEM_HOST_ENABLE", "NCCL_DEV_API_JIT",
    "NCCL_DISABLE_MEM_MANAGER", "NCCL_DMABUF_ENABLE", "NCCL_ELASTIC_BUFFER_REGISTER",
    "NCCL_ENABLE_VERSION_CHECK", "NCCL_GDAKI_USE_RELIABLE_DB", "NCCL_GDRCOPY_ENABLE",
    "NCCL_GDRCOPY_FIFO_ENABLE", "NCCL_GDRCOPY_FLUSH_ENABLE", "NCCL_GDRCOPY_SYNC_ENABLE",
    "NCCL_GDR_FLUSH_DISABLE", "NCCL_GIN_ENABLE", "NCCL_GIN_ERROR_QUERY_SEC",
    "NCCL_GIN_GDAKI_MAX_DEST_RD_ATOMIC", "NCCL_GIN_GDAKI_MAX_QP_RD_ATOMIC",
    "NCCL_GIN_GDAKI_NIC_HANDLER", "NCCL_GIN_GDAKI_QP_DEPTH", "NCCL_GIN_IB_TC",
    "NCCL_GIN_NCONNECTIONS", "NCCL_GIN_PLUGIN_REF_COUNT", "NCCL_GIN_PROXY_QUEUE_SIZE",
    "NCCL_GIN_TYPE", "NCCL_GRAPH_DUMP_FILE_RANK", "NCCL_GRAPH_HELPER_DISABLE",
    "NCCL_GRAPH_MIXING_SUPPORT", "NCCL_GRAPH_REGISTER", "NCCL_GRAPH_STREAM_ORDERING",
    "NCCL_GROUP_CUDA_STREAM", "NCCL_IB_ADAPTIVE_ROUTING", "NCCL_IB_AR_THRESHOLD",
    "NCCL_IB_DATA_DIRECT", "NCCL_IB_DEVICE_PCI_ORDER", "NCCL_IB_DISABLE", "NCCL_IB_ECE_ENABLE",
    "NCCL_IB_FIFO_TC", "NCCL_IB_GID_INDEX", "NCCL_IB_MERGE_NICS", "NCCL_IB_MERGE_VFS",
    "NCCL_IB_MQP_RETRY_ALL", "NCCL_IB_MQP_RETRY_CNT", "NCCL_IB_MQP_RETRY_SLEEP_MSEC",
    "NCCL_IB_OOO_RQ", "NCCL_IB_PCI_RELAXED_ORDERING", "NCCL_IB_PKEY",
    "NCCL_IB_PREPOST_RECEIVE_WORK_REQUESTS", "NCCL_IB_QPS_PER_CONNECTION",
    "NCCL_IB_QUERY_PORT_SPEED", "NCCL_IB_RECEIVER_SIDE_MATCHING_SCHEME",
    "NCCL_IB_RESILIENCY_PORT_FAILOVER", "NCCL_IB_RESILIENCY_PORT_FAILOVER_MAX_ATTEMPTS",
    "NCCL_IB_RESILIENCY_PORT_FAILOVER_PROBE_DELAY", "NCCL_IB_RESILIENCY_PORT_RECOVERY",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ACK_TIMEOUT",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_INTERVAL",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_BATCH_SIZE",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_SEQUENCE_SIZE",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ALIVE_MSG_TIMEOUT",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_ATTEMPTS_MAX",
    "NCCL_IB_RESILIENCY_PORT_RECOVERY_START_DELAY", "NCCL_IB_RETRY_CNT",
    "NCCL_IB_RETURN_ASYNC_EVENTS", "NCCL_IB_ROCE_VERSION_NUM",
    "NCCL_IB_ROUTABLE_FLID_GID_INDEX", "NCCL_IB_SL", "NCCL_IB_SPLIT_DATA_ON_QPS",
    "NCCL_IB_SUBNET_AWARE_ROUTING", "NCCL_IB_SUBNET_PREFIX_LEN", "NCCL_IB_TC",
    "NCCL_IB_TIMEOUT", "NCCL_IB_USE_INLINE", "NCCL_IB_WARN_RAIL_LOCAL",
    "NCCL_IGNORE_COLLNET_MISMATCH", "NCCL_IGNORE_CPU_AFFINITY", "NCCL_IGNORE_DISABLED_P2P",
    "NCCL_IGNORE_NET_MISMATCH", "NCCL_IPC_USE_ABSTRACT_SOCKET",
    "NCCL_L1_SHARED_MEMORY_CARVEOUT", "NCCL_LAUNCH_ORDER_IMPLICIT", "NCCL_LAUNCH_RACE_FATAL",
    "NCCL_LEGACY_CUDA_REGISTER", "NCCL_LL128_BUFFSIZE", "NCCL_LL128_C2C", "NCCL_LL128_NTHREADS",
    "NCCL_LL_BUFFSIZE", "NCCL_LOCAL_REGISTER", "NCCL_LSA_TEAM_SIZE", "NCCL_MAX_CTAS",
    "NCCL_MAX_P2P_NCHANNELS", "NCCL_MEM_SYNC_DOMAIN", "NCCL_MIN_CTAS", "NCCL_MIN_P2P_NCHANNELS",
    "NCCL_MLOPART_RDMA_ENABLE", "NCCL_MNNVL_CLIQUE_ID", "NCCL_MNNVL_CROSS_CLIQUE",
    "NCCL_MNNVL_ENABLE", "NCCL_MNNVL_RAIL_PER_HOST", "NCCL_MNNVL_SCATTER_NETS_ENABLE",
    "NCCL_MNNVL_UUID", "NCCL_MULTI_RANK_GPU_ENABLE", "NCCL_MULTI_SEGMENT_REGISTER",
    "NCCL_NCHANNELS_PER_NET_PEER", "NCCL_NET_DISABLE_INTRA", "NCCL_NET_FORCE_FLUSH",
    "NCCL_NET_GDR_C2C", "NCCL_NET_GDR_MLOPART", "NCCL_NET_GDR_READ",
    "NCCL_NET_OPTIONAL_RECV_COMPLETION", "NCCL_NET_OVERHEAD", "NCCL_NET_PLUGIN_REF_COUNT",
    "NCCL_NET_SHARED_BUFFERS", "NCCL_NET_SHARED_COMMS", "NCCL_NSOCKS_PERTHREAD",
    "NCCL_NTHREADS", "NCCL_NUM_RMA_CTX", "NCCL_NVB_DISABLE", "NCCL_NVB_PRECONNECT",
    "NCCL_NVLINK_UTIL_CENTRIC_SCHED_ENABLE", "NCCL_NVLSTREE_MAX_CHUNKSIZE",
    "NCCL_NVLS_CHUNKSIZE", "NCCL_NVLS_ENABLE", "NCCL_NVLS_NCHANNELS", "NCCL_NVTX_DISABLE",
    "NCCL_OOB_NET_ENABLE", "NCCL_P2P_DIRECT_DISABLE", "NCCL_P2P_EPOCH_ENABLE",
    "NCCL_P2P_LL_THRESHOLD", "NCCL_P2P_MAX_PEERS", "NCCL_P2P_NET_CHUNKSIZE",
    "NCCL_P2P_NVL_CHUNKSIZE", "NCCL_P2P_PCI_CHUNKSIZE", "NCCL_P2P_PER_CHANNEL_NET_BW",
    "NCCL_P2P_PXN_LEVEL", "NCCL_P2P_READ_ENABLE", "NCCL_P2P_SCHEDULE_GROUP_SIZE",
    "NCCL_P2P_USE_CUDA_MEMCPY", "NCCL_PAT_ENABLE", "NCCL_PROGRESS_APPENDOP_FREQ",
    "NCCL_PROXY_APPEND_BATCH_SIZE", "NCCL_PROXY_DUMP_SIGNAL", "NCCL_PXN_C2C",
    "NCCL_PXN_DISABLE", "NCCL_RAS_ENABLE", "NCCL_RAS_TIMEOUT_FACTOR",
    "NCCL_REPORT_CONNECT_PROGRESS", "NCCL_RMA_DISABLE", "NCCL_RMA_PLUGIN_REF_COUNT",
    "NCCL_RMA_PROXY_DUMP_SIGNAL", "NCCL_RMA_PROXY_QUEUE_SIZE", "NCCL_RUNTIME_CONNECT",
    "NCCL_SET_CPU_STACK_SIZE", "NCCL_SET_STACK_SIZE", "NCCL_SHADOW_MEMPOOL_MAX_SIZE",
    "NCCL_SHM_DISABLE", "NCCL_SHM_LOCALITY", "NCCL_SINGLE_PROC_MEM_REG_ENABLE",
    "NCCL_SOCKET_INLINE", "NCCL_SOCKET_MIN_TASKSIZE", "NCCL_SOCKET_NTHREADS",
    "NCCL_SOCKET_POLL_TIMEOUT_MSEC", "NCCL_SOCKET_RCVBUF", "NCCL_SOCKET_RETRY_CNT",
    "NCCL_SOCKET_RETRY_SLEEP_MSEC", "NCCL_SOCKET_SNDBUF", "NCCL_SYM_CE_THRESHOLD",
    "NCCL_SYM_CTAS", "NCCL_SYM_GIN_KERNELS_ENABLE", "NCCL_SYM_NOWIN_ENABLE",
    "NCCL_SYM_REUSE_SYSMEM_HANDLES", "NCCL_SYM_RS_GIN_CHUNK_SIZE", "NCCL_SYM_TMA_ENABLE",
    "NCCL_TOPO_DUMP_FILE_RANK", "NCCL_TOPO_SPLIT_MLOPART", "NCCL_UID_STAGGER_RATE",
    "NCCL_UID_STAGGER_THRESHOLD", "NCCL_UNPACK_DOUBLE_NCHANNELS", "NCCL_WIN_ENABLE",
    "NCCL_WIN_STRIDE", "NCCL_WORK_ARGS_BYTES", "NCCL_WORK_FIFO_BYTES",
})
# Read by an older NCCL, not by v2.30.7-1: (name, first read in, no longer read since, source)
_NCCL_GONE: tuple[tuple[str, str, str, str], ...] = (
    ("NCCL_AGG_ALLOC_MODE", "2.10", "2.13",
     "https://github.com/NVIDIA/nccl/blob/v2.12.12-1/src/init.cc#L237"),
    ("NCCL_AGG_CHANNEL_SIZE", "2.10", "2.20",
     "https://github.com/NVIDIA/nccl/blob/v2.19.4-1/src/init.cc#L259"),
    ("NCCL_CREATE_THREAD_CONTEXT", "2.13", "2.30",
     "https://github.com/NVIDIA/nccl/blob/v2.29.7-1/src/proxy.cc#L878"),
    ("NCCL_CUDA_PATH", "2.13", "2.21",
     "https://github.com/NVIDIA/nccl/blob/v2.20.5-1/src/misc/cudawrap.cc#L179"),
    ("NCCL_GDRCOPY_TAIL_ENABLE", "2.9", "2.12",
     "https://github.com/NVIDIA/nccl/blob/v2.11.4-1/src/transport/net.cc#L126"),
    ("NCCL_GIN_COUNTER_POOL_SIZE", "2.28", "2.30",
     "https://github.com/NVIDIA/nccl/blob/v2.29.7-1/src/gin/gin_host.cc#L21"),
    ("NCCL_GIN_EXCLUSIVE_CONTEXTS", "2.29", "2.30",
     "https://github.com/NVIDIA/nccl/blob/v2.29.7-1/src/dev_runtime.cc#L797"),
    ("NCCL_GIN_NCONTEXTS", "2.28", "2.30",
     "https://github.com/NVIDIA/nccl/blob/v2.29.7-1/src/gin/gin_host.cc#L109"),
    ("NCCL_GIN_SIGNAL_POOL_SIZE", "2.28", "2.30",
     "https://github.com/NVIDIA/nccl/blob/v2.29.7-1/src/gin/gin_host.cc#L20"),
    ("NCCL_GRAPH", "2.5", "2.6",
     "https://github.com/NVIDIA/nccl/blob/v2.5.7-1/src/graph/search.cc#L454"),
    ("NCCL_MNNVL", "2.20", "2.21",
     "https://github.com/NVIDIA/nccl/blob/v2.20.5-1/src/init.cc#L820"),
    ("NCCL_PROXY_PROFILE", "2.12", "2.23",
     "https://github.com/NVIDIA/nccl/blob/v2.22.3-1/src/misc/profiler.cc#L64"),
    ("NCCL_SHARED_BUFF_COUNT", "2.8", "2.9",
     "https://github.com/NVIDIA/nccl/blob/v2.8.4-1/src/proxy.cc#L412"),
    ("NCCL_SHM_MEMCPY_MODE", "2.13", "2.30",
     "https://github.com/NVIDIA/nccl/blob/v2.29.7-1/src/transport/shm.cc#L69"),
    ("NCCL_SHM_USE_CUDA_MEMCPY", "2.13", "2.30",
     "https://github.com/NVIDIA/nccl/blob/v2.29.7-1/src/transport/shm.cc#L68"),
    ("NCCL_WORK_FIFO_DEPTH", "2.13", "2.22",
     "https://github.com/NVIDIA/nccl/blob/v2.21.5-1/src/init.cc#L257"),
)


def _table() -> dict[str, Var]:
    table = {name: Var(name, "valid", url, integer=name in _NCCL_INTEGER)
             for name, url in _NCCL_READ}
    for name, first, gone, url in _NCCL_GONE:
        last = _before(gone)
        read = f"NCCL {first}" + (f" to {last}" if last != first else "")
        table[name] = Var(name, "obsolete", url, since=gone,
                          note=f"read by {read} only, not since {gone}; ignored")
    for var in _CURATED:
        if var.name in table and var.status == "valid" and not var.integer:
            # a curated rule for a generated name keeps the generated integer flag
            var = Var(**{**var.__dict__, "integer": table[var.name].integer})
        table[var.name] = var
    return table


def _before(version: str) -> str:
    major, minor = version.split(".")[:2]
    return f"{major}.{int(minor) - 1}"


TABLE: dict[str, Var] = _table()


def lookup(name: str) -> Var | None:
    return TABLE.get(name)


def judged(name: str) -> bool:
    """Whether this table claims to know every name of ``name``'s family."""
    return name.startswith(PREFIXES)
