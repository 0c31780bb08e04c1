"""Known texts of torch.distributed itself: DDP, gloo, the c10d store and its sockets."""

from __future__ import annotations

import re

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature, ints

FIX = "tests/fixtures/logs/"


def _fingerprint(text: str) -> dict[str, str | int]:
    """The parts of a CollectiveFingerPrint a person compares: op, shapes, dtypes, seq."""
    out: dict[str, str | int] = {}
    for key, pat in (("op", r"OpType=(\w+)"), ("seq", r"SequenceNumber=(\d+)"),
                     ("shape", r"TensorShape=\[([^\]]*)\]"), ("dtype", r"TensorDtypes=(\w+)")):
        m = re.search(pat, text)
        if m:
            out[key] = int(m.group(1)) if key == "seq" else m.group(1)
    return out


def _collectives(m: re.Match[str]) -> dict[str, dict[int, dict[str, str | int]]]:
    # older torch names one rank ("is running inconsistent collective"), and a pasted line
    # is often cut before the second: each rank the line names, with what it ran
    out = {int(m["rank_a"]): _fingerprint(m["coll_a"])}
    if m["rank_b"] is not None:
        out[int(m["rank_b"])] = _fingerprint(m["coll_b"] or "")
    return {"collectives": out}


def _endpoint(m: re.Match[str]) -> dict[str, object]:
    """The endpoint whichever way the line wrote it: ``(host, port)`` or ``host:port``."""
    if m["host_colon"] is None:
        return {}
    return {"host": m["host_colon"], "port": int(m["port_colon"])}


def _store_key_ranks(keys: str) -> list[int]:
    # c10d's store barrier waits on one key per rank ("/default_pg/0//cpu//0/1": rank 1);
    # the trailing number of each listed key names a rank that never arrived.
    out = []
    for key in keys.strip("[]").split(","):
        m = re.search(r"/(\d+)$", key.strip())
        if m:
            out.append(int(m.group(1)))
    return out


_PORT_IN = re.compile(r"port[: =]+(\d+)|failed to bind to \S*?:(\d+)|\]:(\d+)")


def _port(m: re.Match[str]) -> dict[str, int]:
    found = _PORT_IN.search(m.string)
    if found is None:
        return {}
    return {"port": int(next(g for g in found.groups() if g))}


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "ddp.reduction_not_finished", K.DDP_REDUCTION, "Expected to have finished reduction",
        r"Expected to have finished reduction in the prior iteration",
        "DDP_REDUCTION_NOT_FINISHED", "torch >= 1.1",
        (Example("RuntimeError: Expected to have finished reduction in the prior iteration "
                 "before starting a new one. This error indicates that your module has "
                 "parameters that were not used in producing loss.",
                 "https://github.com/open-mmlab/mmdetection3d/issues/488"),),
        extra=lambda m: {"static_graph": "static_graph" in m.string}),
    Signature(
        "ddp.unused_parameter_names", K.UNUSED_NAMES, "did not receive grad",
        r"Parameters which did not receive grad for rank (?P<param_rank>\d+): (?P<names>.+)",
        "DDP_UNUSED_PARAMETERS", "torch >= 1.9 with TORCH_DISTRIBUTED_DEBUG=INFO|DETAIL",
        (Example("[rank1]: Parameters which did not receive grad for rank 1: "
                 "unused_head.bias, unused_head.weight", FIX + "unused_params_info.log",
                 {"param_rank": 1, "names": ["unused_head.bias", "unused_head.weight"]}),),
        convert={"param_rank": int,
                 "names": lambda s: [n.strip() for n in s.split(",") if n.strip()]}),
    Signature(
        "ddp.unused_parameter_indices", K.UNUSED_INDICES, "did not receive grad",
        r"Parameter indices which did not receive grad for rank (?P<param_rank>\d+): "
        r"(?P<indices>[\d ]+)",
        "DDP_UNUSED_PARAMETERS", "torch >= 1.9",
        (Example("[rank1]: Parameter indices which did not receive grad for rank 1: 2 3",
                 FIX + "unused_params.log", {"param_rank": 1, "indices": [2, 3]}),),
        convert={"param_rank": int, "indices": ints}),
    Signature(
        "lightning.unused_parameters", K.UNUSED_FRAMEWORK, "has parameters that were not used",
        r"It looks like your (?P<framework>LightningModule) has parameters that were not used "
        r"in producing the loss",
        "DDP_UNUSED_PARAMETERS", "Lightning >= 2.0",
        (Example("RuntimeError: It looks like your LightningModule has parameters that were "
                 "not used in producing the loss returned by training_step. If this is "
                 "intentional, you must enable the detection of unused parameters in DDP, "
                 "either by setting the string value `strategy='ddp_find_unused_parameters_true'`",
                 "https://github.com/p0p4k/pflowtts_pytorch/issues/8",
                 {"framework": "LightningModule"}),)),
    Signature(
        "c10d.collective_mismatch", K.MISMATCH_DETAIL, "Detected mismatch between collectives",
        r"Detected mismatch between collectives on ranks\. Rank (?P<rank_a>\d+) is running "
        r"(?:inconsistent )?collective: (?P<coll_a>.*?)(?:, but Rank (?P<rank_b>\d+) is "
        r"running collective: (?P<coll_b>.*)|$)",
        "HANG_COLLECTIVE_MISMATCH", "torch >= 1.10 with TORCH_DISTRIBUTED_DEBUG=DETAIL",
        (Example("[rank1]: RuntimeError: Detected mismatch between collectives on ranks. Rank 1 "
                 "is running collective: CollectiveFingerPrint(SequenceNumber=0, "
                 "OpType=BROADCAST, TensorShape=[4], TensorDtypes=Float), but Rank 0 is running "
                 "collective: CollectiveFingerPrint(SequenceNumber=0, OpType=ALLREDUCE, "
                 "TensorShape=[4], TensorDtypes=Float).", FIX + "mismatch_detail.log",
                 {"rank_a": 1, "rank_b": 0}),
         # torch 1.10-1.12: one rank, "inconsistent collective"
         Example("RuntimeError: Detected mismatch between collectives on ranks. Rank 0 is "
                 "running inconsistent collective: CollectiveFingerPrint(OpType=BROADCAST, "
                 "TensorShape=[4], TensorDtypes=Float, TensorDeviceTypes=TensorOptions(dtype="
                 "float (default), device=cuda, layout=Strided (default), requires_grad=false "
                 "(default), pinned_memory=false (default), memory_format=(nullopt))",
                 "https://github.com/speechbrain/speechbrain/issues/1166", {"rank_a": 0})),
        convert={"rank_a": int, "rank_b": int}, extra=_collectives),
    Signature(
        # the enforce itself ("the message is longer than the buffer the receiver posted"):
        # older gloo prints only the condition, newer adds the sentence
        "gloo.size_mismatch", K.SIZE_MISMATCH,
        ("Received data size doesn't match expected size", "op.preamble.length <= op.nbytes"),
        r"op\.preamble\.length <= op\.nbytes\. (?P<received_bytes>\d+) vs "
        r"(?P<expected_bytes>\d+)|Received data size doesn't match expected size",
        "HANG_COLLECTIVE_MISMATCH", "gloo (all torch releases)",
        (Example("  what():  [enforce fail at /__w/pytorch/pytorch/third_party/gloo/gloo/"
                 "transport/tcp/pair.cc:456] op.preamble.length <= op.nbytes. 8 vs 4. Received "
                 "data size doesn't match expected size. Is there a distributed collective "
                 "mismatch in your code?", FIX + "size_mismatch.log",
                 {"received_bytes": 8, "expected_bytes": 4}),
         Example("  what():  [enforce fail at /opt/pytorch/pytorch/third_party/gloo/gloo/"
                 "transport/tcp/pair.cc:446] op.preamble.length <= op.nbytes. 256000 vs 128000",
                 "https://github.com/NVIDIA/nccl/issues/1394",
                 {"received_bytes": 256000, "expected_bytes": 128000})),
        convert={"received_bytes": int, "expected_bytes": int}),
    Signature(
        "gloo.monitored_barrier", K.MONITORED_BARRIER, "failed to pass monitoredBarrier",
        r"Ranks? (?P<missing_ranks>[\d, ]+) failed to pass monitoredBarrier in "
        r"(?P<timeout_ms>\d+) ms",
        "COLLECTIVE_TIMEOUT", "torch >= 1.9 (printed by rank 0)",
        (Example("[rank0]:[E1122 00:45:41.002563234 ProcessGroupGloo.cpp:67] [Rank 0]: Rank 1 "
                 "failed to pass monitoredBarrier in 3000 ms", FIX + "monitored_barrier.log",
                 {"missing_ranks": [1], "timeout_ms": 3000}),
         Example("RuntimeError: [Rank 0]: Ranks 4, 5, 6, 7 failed to pass monitoredBarrier in "
                 "2000000 ms", "https://github.com/NVIDIA/nccl/issues/849",
                 {"missing_ranks": [4, 5, 6, 7], "timeout_ms": 2000000})),
        convert={"missing_ranks": ints, "timeout_ms": int}),
    Signature(
        "gloo.monitored_barrier_peer", K.BARRIER_PEER_ERROR,
        "successfully reached monitoredBarrier",
        r"Rank (?P<reporter>\d+) successfully reached monitoredBarrier, but received errors "
        r"while waiting for send/recv from rank (?P<peer>\d+)",
        "COLLECTIVE_TIMEOUT", "torch >= 1.9 (printed by the ranks that arrived)",
        (Example("RuntimeError: Rank 2 successfully reached monitoredBarrier, but received "
                 "errors while waiting for send/recv from rank 0. Please check rank 0 logs for "
                 "faulty rank.", "https://github.com/pytorch/pytorch/issues/121606",
                 {"reporter": 2, "peer": 0}),),
        convert={"reporter": int, "peer": int}),
    Signature(
        "gloo.timeout", K.GLOO_TIMEOUT, "Timed out waiting",
        r"Timed out waiting (?P<timeout_ms>\d+)ms for (?P<op>\w+) operation to complete",
        "COLLECTIVE_TIMEOUT", "gloo (all torch releases)",
        (Example("[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
                 "tcp/unbound_buffer.cc:78] Timed out waiting 5000ms for recv operation to "
                 "complete", FIX + "op_mismatch.log", {"timeout_ms": 5000, "op": "recv"}),),
        convert={"timeout_ms": int}),
    Signature(
        # the TCPStore client's socket wait for the server's answer (a get / wait on a key
        # another rank sets): the store's own timeout, no key named
        "store.socket_wait_timeout", K.STORE_TIMEOUT, "waitForInput: socket",
        r"waitForInput: socket SocketImpl\(fd=\d+, addr=\S+, remote=(?P<remote>\S+?)\) "
        r"timed out after (?P<timeout_ms>\d+)ms",
        "COLLECTIVE_TIMEOUT", "torch >= 2.3 (c10d socket.cpp)",
        (Example("[rank1]:[W516 14:34:56.854597329 socket.cpp:489] [c10d] waitForInput: socket "
                 "SocketImpl(fd=79, addr=[localhost]:41170, remote=[localhost]:29500) timed out "
                 "after 1800000ms",
                 "https://github.com/axolotl-ai-cloud/axolotl/issues/2684",
                 {"remote": "[localhost]:29500", "timeout_ms": 1800000}),),
        convert={"timeout_ms": int}),
    Signature(
        "store.wait_timeout", K.STORE_TIMEOUT, "wait timeout after",
        r"wait timeout after (?P<timeout_ms>\d+)ms, keys: (?P<keys>\S+)",
        "COLLECTIVE_TIMEOUT", "torch >= 2.1",
        (Example("torch.distributed.DistStoreError: wait timeout after 5000ms, keys: "
                 "/default_pg/0//cpu//0/1", FIX + "missing_init.log",
                 {"timeout_ms": 5000, "missing_ranks": [1]}),),
        convert={"timeout_ms": int},
        extra=lambda m: {"missing_ranks": _store_key_ranks(m["keys"])}),
    Signature(
        "store.nccl_unique_id", K.STORE_UNIQUEID, "ncclUniqueId from",
        r"\[(?P<waiter>\d+)\] is setting up NCCL communicator and retr(?:ie|ei)ving ncclUniqueId "
        r"from \[(?P<source_rank>\d+)\] via c10d key-value store by key '(?P<key>[^']*)', but "
        r"store->get\('[^']*'\) got error: (?P<error>.+)",
        "HANG_RANK_MISSING_COLLECTIVE", "torch 1.12 - 2.3 (store based NCCL bootstrap)",
        (Example("This may indicate a possible application crash on rank 0 or a network set up "
                 "issue.[7] is setting up NCCL communicator and retrieving ncclUniqueId from [0] "
                 "via c10d key-value store by key '0', but store->get('0') got error: Socket "
                 "Timeout", "https://github.com/SpongebBob/Finetune-ChatGLM2-6B/issues/13",
                 {"waiter": 7, "source_rank": 0, "error": "Socket Timeout"}),
         Example("RuntimeError: [2] is setting up NCCL communicator and retreiving ncclUniqueId "
                 "from [0] via c10d key-value store by key '0', but store->get('0') got error: "
                 "Socket Timeout", "https://github.com/pytorch/pytorch/issues/82091",
                 {"waiter": 2, "source_rank": 0})),
        convert={"waiter": int, "source_rank": int}),
    Signature(
        "c10d.client_connect_timeout", K.CONNECT_TIMEOUT, "The client socket has",
        r"The client socket has (?:timed out after (?:(?P<timeout_ms>\d+)ms|(?P<timeout_s>\d+)s) "
        r"while trying to connect to|failed to connect to any network address of) "
        r"(?:\((?P<host>[^,]+), (?P<port>\d+)\)|(?P<host_colon>[^\s()]+):(?P<port_colon>\d+))",
        "ENV_RENDEZVOUS_UNREACHABLE", "torch >= 1.11 (seconds before 2.2, ms after)",
        (Example("[E1122 00:43:44.877756097 socket.cpp:1028] [c10d] The client socket has timed "
                 "out after 5000ms while trying to connect to (127.0.0.1, 29799).",
                 FIX + "rendezvous_unreachable.log",
                 {"timeout_ms": 5000, "host": "127.0.0.1", "port": 29799}),
         Example("[E socket.cpp:793] [c10d] The client socket has timed out after 1800s while "
                 "trying to connect to (127.0.0.1, 48391).",
                 "https://github.com/lllyasviel/ControlNet/issues/382",
                 {"timeout_s": 1800, "host": "127.0.0.1", "port": 48391}),
         Example("[E socket.cpp:753] [c10d] The client socket has failed to connect to any "
                 "network address of (6841231, 47389).",
                 "https://github.com/hpcaitech/Open-Sora/issues/667",
                 {"host": "6841231", "port": 47389}),
         # torch 2.0: the endpoint as host:port
         Example("[E socket.cpp:860] [c10d] The client socket has timed out after 60s while "
                 "trying to connect to 192.0.0.1:1234",
                 "https://github.com/pytorch/pytorch/issues/107021",
                 {"timeout_s": 60, "host": "192.0.0.1", "port": 1234})),
        convert={"timeout_ms": int, "timeout_s": int, "port": int}, extra=_endpoint),
    Signature(
        # torchelastic's c10d rendezvous backend wraps any failure to reach its store
        # (timeout, refused, unresolved) in this error: the agent never joined
        "elastic.rendezvous_connection_error", K.CONNECT_TIMEOUT,
        "The connection to the C10d store has failed",
        r"RendezvousConnectionError: The connection to the C10d store has failed",
        "ENV_RENDEZVOUS_UNREACHABLE", "torch >= 1.9 (rdzv_backend=c10d)",
        (Example("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The "
                 "connection to the C10d store has failed. See inner exception for details.",
                 "https://github.com/pytorch/pytorch/issues/107021", {}),)),
    Signature(
        "c10d.client_connect_errno", K.CONNECT_TIMEOUT, "The client socket has failed to connect",
        r"The client socket has failed to connect to (?P<host>\S+?):(?P<port>\d+) "
        r"\(errno: (?P<errno>\d+) - (?P<reason>[^)]+)\)",
        "ENV_RENDEZVOUS_UNREACHABLE", "torch 1.11 - 2.1",
        (Example("[W socket.cpp:697] [c10d] The client socket has failed to connect to "
                 "0.104.99.143:47389 (errno: 110 - Connection timed out).",
                 "https://github.com/hpcaitech/Open-Sora/issues/667",
                 {"host": "0.104.99.143", "port": 47389, "errno": 110}),),
        convert={"port": int, "errno": int}),
    Signature(
        "socket.connection_refused", K.CONN_REFUSED, "onnection refused",
        r"(?:connect \[(?P<address>[^\]]+)\]:(?P<port>\d+): )?[Cc]onnection refused",
        "ENV_RENDEZVOUS_UNREACHABLE", "all",
        (Example("  what():  [/opt/conda/conda-bld/pytorch_1544084119927/work/third_party/gloo/"
                 "gloo/transport/tcp/pair.cc:724] connect [127.0.1.1]:3210: Connection refused",
                 "https://github.com/pytorch/pytorch/issues/15592",
                 {"address": "127.0.1.1", "port": 3210}),),
        convert={"port": int}),
    Signature(
        "socket.address_in_use", K.ADDR_IN_USE, "lready in use",
        r"[Aa]ddress already in use",
        "ENV_PORT_IN_USE", "all (wording of torch >= 1.11 carries the port)",
        (Example("torch.distributed.DistNetworkError: The server socket has failed to listen on "
                 "any local network address. port: 29733, useIpv6: false, code: -98, name: "
                 "EADDRINUSE, message: address already in use", FIX + "port_in_use.log",
                 {"port": 29733}),
         Example("[W socket.cpp:401] [c10d] The server socket has failed to bind to [::]:29400 "
                 "(errno: 98 - Address already in use).",
                 "https://github.com/wenet-e2e/wekws/issues/93", {"port": 29400}),
         Example("RuntimeError: Address already in use at /pytorch/torch/lib/THD/process_group/"
                 "General.cpp:17", "https://github.com/facebookresearch/XLM/issues/53")),
        extra=_port),
    Signature(
        "socket.connection_reset", K.CONN_RESET, "Connection reset by peer",
        r"Connection reset by peer", "RANK_CRASHED", "all",
        (Example("[rank1]: ConnectionResetError: [Errno 104] Connection reset by peer",
                 FIX + "dataloader_exit_connreset.log"),)),
    Signature(
        "gloo.connection_closed", K.CONN_CLOSED, "onnection closed by",
        r"Connection closed by (?:remote )?peer", "RANK_CRASHED", "gloo (all torch releases)",
        (Example("[rank0]: RuntimeError: [/__w/pytorch/pytorch/third_party/gloo/gloo/transport/"
                 "tcp/pair.cc:553] Connection closed by peer [127.0.0.1]:926. This is typically "
                 "caused by a remote worker crashing.", FIX + "exception.log"),)),
)

SIGNATURES += (
    Signature(
        "ddp.marked_ready_twice", K.DDP_REDUCTION, "mark a variable ready only once",
        r"Expected to mark a variable ready only once", "DDP_REDUCTION_NOT_FINISHED",
        "torch >= 1.1",
        (Example("[rank3]: RuntimeError: Expected to mark a variable ready only once. This error "
                 "is caused by one of the following reasons: 1) Use of a module parameter "
                 "outside the `forward` function.",
                 "https://github.com/modelscope/ms-swift/issues/3171"),),
        extra=lambda m: {"marked_twice": True}),
)

# torch < 2.1's process-group init waits in a store barrier until world_size processes
# have joined, printing this line again and again: worker_count below world_size means
# some ranks never reached init_process_group (stuck in start-up or never started)
SIGNATURES += (
    Signature(
        "c10d.store_barrier_waiting", K.STORE_BARRIER_WAIT, "Waiting in store based barrier",
        r"Waiting in store based barrier to initialize process group for rank: (?P<rank>\d+), "
        r"key: \S+ \(world_size=(?P<world_size>\d+), worker_count=(?P<worker_count>\d+)",
        "RANK_UNRESPONSIVE", "torch 1.8 - 2.0 (distributed_c10d._store_based_barrier)",
        (Example("INFO:root:Waiting in store based barrier to initialize process group for "
                 "rank: 6, key: store_based_barrier_key:1 (world_size=8, worker_count=7, "
                 "timeout=0:30:00)",
                 "https://github.com/Lightning-AI/pytorch-lightning/issues/4420",
                 {"rank": 6, "world_size": 8, "worker_count": 7}),
         Example("Waiting in store based barrier to initialize process group for rank: 0, key: "
                 "store_based_barrier_key:1 (world_size=2, worker_count=4, timeout=1 day, "
                 "0:00:00)", "https://github.com/AlibabaResearch/efficientteacher/issues/85",
                 {"world_size": 2, "worker_count": 4})),
        convert={"rank": int, "world_size": int, "worker_count": int}),
    # the same barrier at its deadline: the rank raising it waited, it did not crash
    Signature(
        "c10d.store_barrier_timeout", K.STORE_BARRIER_WAIT,
        "Timed out initializing process group in store based barrier",
        r"Timed out initializing process group in store based barrier on rank: "
        r"(?P<rank>\d+), for key: \S+ \(world_size=(?P<world_size>\d+), "
        r"worker_count=(?P<worker_count>\d+)",
        "HANG_RANK_MISSING_COLLECTIVE", "torch 1.8 - 2.0 (distributed_c10d._store_based_barrier)",
        (Example(" 94: RuntimeError: Timed out initializing process group in store based barrier "
                 "on rank: 94, for key: store_based_barrier_key:1 (world_size=256, "
                 "worker_count=247, timeout=0:30:00)",
                 "https://github.com/loubnabnl/nanotron-smol-cluster/blob/"
                 "4406dd800f0d466ea6f17eb8247ee56eeaf1a153/logs/32n-2gbs-test-3619762.out",
                 {"rank": 94, "world_size": 256, "worker_count": 247}),),
        convert={"rank": int, "world_size": int, "worker_count": int},
        extra=lambda m: {"timed_out": True}),
    # TCPStore's server waits at start-up until world_size clients have connected; at its
    # deadline init_process_group raises this in the process that hosts it (rank 0 of an
    # env:// or tcp:// rendezvous: torch/distributed/rendezvous.py, start_daemon = rank
    # == 0). The count includes the host's own client: the rest never reached the store.
    Signature(
        "c10d.store_clients_timeout", K.STORE_BARRIER_WAIT, "clients joined",
        r"Timed out after (?P<seconds>\d+) seconds waiting for clients\. "
        r"(?P<worker_count>\d+)/(?P<world_size>\d+) clients joined",
        "RANK_UNRESPONSIVE", "torch 2.x (the TCPStore server's wait for its clients)",
        (Example("torch.distributed.DistStoreError: Timed out after 1801 seconds waiting for "
                 "clients. 1/16 clients joined.",
                 "https://github.com/LoucaVuilleumier/Anemoi_S2S_experiment/blob/144ff63dd07c6"
                 "d6213c49034dca31f9097bff7d4/Anemoi_S2S_experiment/slurm_scripts/output_slurm/"
                 "finetuning_10k_default-39501466.out",
                 {"seconds": 1801, "worker_count": 1, "world_size": 16}),),
        convert={"seconds": int, "world_size": int, "worker_count": int},
        extra=lambda m: {"timed_out": True, "store_host": True}),
)

# What each rank says at process-group start-up, and what says every member came: the
# census of rules_collective.rank_census (ranks never started, or two processes taking one
# rank, leave a start-up that never ends)
SIGNATURES += (
    Signature(
        "lightning.rank_announce", K.RANK_ANNOUNCE, "GLOBAL_RANK:",
        r"[Ii]nitializing (?:ddp|distributed|deepspeed distributed): GLOBAL_RANK: "
        r"(?P<announced>\d+), MEMBER: \d+/(?P<world_size>\d+)",
        "HANG_RANK_MISSING_COLLECTIVE", "pytorch-lightning >= 1.0 (every rank, at set-up)",
        (Example("initializing ddp: GLOBAL_RANK: 0, MEMBER: 1/8",
                 "https://github.com/Lightning-AI/pytorch-lightning/issues/8707",
                 {"announced": 0, "world_size": 8}),
         Example("Initializing distributed: GLOBAL_RANK: 0, MEMBER: 1/2",
                 "https://github.com/facebookresearch/dinov2/blob/93aad6083b64e9dc88bf98beb124"
                 "920ffeb5e85f/distillation/wandb/run-20250109_155123-o9mij305/files/output.log",
                 {"announced": 0, "world_size": 2})),
        convert={"announced": int, "world_size": int}),
    Signature(
        "lightning.all_registered", K.RANK_ANNOUNCE, "All distributed processes registered",
        r"All distributed processes registered\. Starting with (?P<registered>\d+) processes",
        "HANG_RANK_MISSING_COLLECTIVE", "pytorch-lightning >= 1.0 (rank 0, after set-up)",
        (Example("All distributed processes registered. Starting with 2 processes",
                 "https://github.com/facebookresearch/dinov2/blob/93aad6083b64e9dc88bf98beb124"
                 "920ffeb5e85f/distillation/wandb/run-20250109_155123-o9mij305/files/output.log",
                 {"registered": 2}),),
        convert={"registered": int}),
    Signature(
        "c10d.store_barrier_completed", K.RANK_ANNOUNCE, "Completed store-based barrier",
        r"Completed store-based barrier for key:\S+ with (?P<registered>\d+) nodes",
        "HANG_RANK_MISSING_COLLECTIVE", "torch 1.8 - 2.0 (distributed_c10d._store_based_barrier)",
        (Example("10/27/2022 09:59:21 - INFO - torch.distributed.distributed_c10d - Rank 0: "
                 "Completed store-based barrier for key:store_based_barrier_key:2 with 1 nodes.",
                 "https://github.com/microsoft/DeepSpeedExamples/blob/d0df7a8c1d154f75fba856f0a"
                 "0a58cc51fb93f85/random_ltd/gpt_finetuning/output1/check/train_with_kernel_"
                 "fp16.log", {"registered": 1}),),
        convert={"registered": int}),
)
