"""Known texts of NCCL and of ProcessGroupNCCL: timeouts, transports, setup, the GPU."""

from __future__ import annotations

import re

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature, ints

# IB verbs work-completion status codes NCCL prints (ibv_wc_status).
IB_STATUS = {5: "IBV_WC_WR_FLUSH_ERR", 10: "IBV_WC_REM_ACCESS_ERR",
             12: "IBV_WC_RETRY_EXC_ERR", 13: "IBV_WC_RNR_RETRY_EXC_ERR"}


def _ib(m: re.Match[str]) -> dict[str, str]:
    code = int(m["code"])
    out = {"status_name": IB_STATUS.get(code, f"status {code}")}
    hca = re.search(r"\b(mlx\d+_\d+(?::\d+)?)", m.string)
    if hca:
        out["hca"] = hca.group(1)
    return out


def nccl_version(printed: str) -> str:
    """NCCL's version as NCCL numbers it. torch before 1.11 decoded NCCL's version code with
    the scheme NCCL dropped in 2.9 (code = X*1000 + Y*100 + Z, then X*10000 + Y*100 + Z):
    its error messages print 2.9.8 as "20.9.8" and 2.10.3 as "21.0.3" (pytorch#63445, the
    encoding in pytorch#73611), while NCCL's own banner in the same log says 2.9.8."""
    major, minor, patch = (int(p) for p in printed.split("."))
    if major < 10:
        return printed
    code = major * 1000 + minor * 100 + patch
    return f"{code // 10000}.{code % 10000 // 100}.{code % 100}"


SIGNATURES = (
    Signature(
        "nccl.watchdog_timeout", K.NCCL_WATCHDOG, "Watchdog caught collective operation timeout",
        r"Watchdog caught collective operation timeout: WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?"
        r"OpType=(?P<op>\w+)(?:, NumelIn=(?P<numel_in>\d+), NumelOut=(?P<numel_out>\d+))?"
        r"(?:, Timeout\(ms\)=(?P<timeout_ms>\d+))?\) ran for (?P<ran_ms>\d+) milliseconds",
        "COLLECTIVE_TIMEOUT", "torch >= 1.13 (NumelIn/NumelOut from 2.0)",
        (Example("[E ProcessGroupNCCL.cpp:475] [Rank 1] Watchdog caught collective operation "
                 "timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, "
                 "Timeout(ms)=1800000) ran for 1800572 milliseconds before timing out.",
                 "https://github.com/hiyouga/LlamaFactory/issues/2424",
                 {"seq": 2, "op": "ALLREDUCE", "numel_in": 1, "timeout_ms": 1800000}),),
        convert={"seq": int, "numel_in": int, "numel_out": int, "timeout_ms": int,
                 "ran_ms": int}),
    Signature(
        "nccl.work_state", K.NCCL_WORK_STATE, "last enqueued",
        r"(?:Timeout at|detected by watchdog at) (?:NCCL )?work(?: sequence id)?: (?P<seq>\d+)"
        r"(?:,| PG status:) last enqueued (?:NCCL )?work: (?P<last_enqueued>-?\d+), last "
        r"completed (?:NCCL )?work: (?P<last_completed>-?\d+)",
        "HANG_RANK_MISSING_COLLECTIVE", "torch >= 2.3",
        (Example("[rank0]:[E1206 18:44:16.994932383 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 0] "
                 "Timeout at NCCL work: 7753, last enqueued NCCL work: 7755, last completed "
                 "NCCL work: 7752.", "https://github.com/hiyouga/LlamaFactory/issues/6269",
                 {"seq": 7753, "last_enqueued": 7755, "last_completed": 7752}),
         Example("[rank0]:[E515 18:36:47.343391940 ProcessGroupNCCL.cpp:2268] [PG ID 0 PG GUID "
                 "0(default_pg) Rank 0]  failure detected by watchdog at work sequence id: 241 "
                 "PG status: last enqueued work: 315, last completed work: 183", "https://github.com/pytorch/pytorch/issues/152623",
                 {"seq": 241, "last_enqueued": 315, "last_completed": 183})),
        convert={"seq": int, "last_enqueued": int, "last_completed": int}),
    Signature(
        "nccl.desync_never_joined", K.DESYNC_MISSING, "are the lagging ranks",
        r"ranks \[(?P<ranks>[\d, ]+)\] are the lagging ranks that caused this timeout",
        "COLLECTIVE_TIMEOUT", "torch >= 2.0 with TORCH_NCCL_DESYNC_DEBUG=1",
        (Example("\t - To our best knowledge, ranks [2, 3] are the lagging ranks that caused "
                 "this timeout. They never joined any collectives",
                 "https://github.com/pytorch/pytorch/blob/v2.3.0/torch/csrc/distributed/c10d/"
                 "TraceUtils.h", {"ranks": [2, 3]}),),
        convert={"ranks": ints}),
    Signature(
        "nccl.desync_header", K.DESYNC_HEADER, "caused the desync are",
        r"the lagging/dead/mismatched ranks that caused the desync are",
        "COLLECTIVE_TIMEOUT", "torch >= 2.0 with TORCH_NCCL_DESYNC_DEBUG=1",
        (Example("         - To our best knowledge, the lagging/dead/mismatched ranks that "
                 "caused the desync are:", "https://github.com/pytorch/pytorch/issues/152623"),)),
    Signature(
        "nccl.desync_unfinished", K.DESYNC_UNFINISHED, "didn't finish collective",
        r"\[(?P<ranks>[\d, ]+)\] joined but didn't finish collective #(?P<seq>\d+)",
        "COLLECTIVE_TIMEOUT", "torch >= 2.0 with TORCH_NCCL_DESYNC_DEBUG=1",
        (Example("\t     [3] joined but didn't finish collective #183 (count from 1)",
                 "https://github.com/pytorch/pytorch/blob/v2.3.0/torch/csrc/distributed/c10d/"
                 "TraceUtils.h", {"ranks": [3], "seq": 183}),),
        convert={"ranks": ints, "seq": int}),
    Signature(
        "nccl.desync_unjoined", K.DESYNC_UNJOINED, "didn't join collective",
        r"\[(?P<ranks>[\d, ]+)\] finished collective #(?P<seq>\d+), but didn't join "
        r"collective #(?P<next>\d+)",
        "COLLECTIVE_TIMEOUT", "torch >= 2.0 with TORCH_NCCL_DESYNC_DEBUG=1",
        (Example("             [7] finished collective #182, but didn't join collective #183 "
                 "(count from 1)", "https://github.com/pytorch/pytorch/issues/152623",
                 {"ranks": [7], "seq": 182, "next": 183}),),
        convert={"ranks": ints, "seq": int, "next": int}),
    Signature(
        "nccl.desync_timeout_at", K.DESYNC_TIMEOUT_AT, "Timeout at collective",
        r"\[(?P<at_rank>\d+)\] Timeout at collective: (?P<op>\w+), #(?P<seq>\d+)",
        "COLLECTIVE_TIMEOUT", "torch >= 2.0 with TORCH_NCCL_DESYNC_DEBUG=1",
        (Example("         - [0] Timeout at collective: ALLREDUCE, #315", "https://github.com/pytorch/pytorch/issues/152623",
                 {"at_rank": 0, "op": "ALLREDUCE", "seq": 315}),),
        convert={"at_rank": int, "seq": int}),
    Signature(
        "nccl.desync_started", K.DESYNC_STARTED, "] started ",
        r"^\s*\[(?P<ranks>[\d, ]+)\] started (?P<op>\w+)\s*$",
        "HANG_COLLECTIVE_MISMATCH", "torch >= 2.0 with TORCH_NCCL_DESYNC_DEBUG=1",
        (Example("             [3, 4, 5, 6] started _ALLGATHER_BASE", "https://github.com/pytorch/pytorch/issues/152623",
                 {"ranks": [3, 4, 5, 6], "op": "_ALLGATHER_BASE"}),),
        convert={"ranks": ints}),
    Signature(
        "nccl.remote_error", K.NCCL_REMOTE, "remote process exited or there was a network error",
        r"remote process exited or there was a network error", "COMM_CONNECTIVITY",
        "torch >= 2.0, NCCL >= 2.12",
        (Example("torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/csrc/"
                 "distributed/c10d/NCCLUtils.hpp:268, remote process exited or there was a "
                 "network error, NCCL version 2.21.5",
                 "https://github.com/NVIDIA/nccl/issues/2076"),)),
    Signature(
        # ProcessGroupNCCL's error for work on a communicator its watchdog (or another
        # failure) already aborted: the rank felt the abort, it did not cause it
        "nccl.communicator_aborted", K.NCCL_ABORTED, "communicator was aborted",
        r"NCCL communicator was aborted on rank (?P<aborted_rank>\d+)",
        "COLLECTIVE_TIMEOUT", "torch >= 1.13",
        (Example("[rank3]: torch.distributed.DistBackendError: NCCL communicator was aborted on "
                 "rank 3.", "https://github.com/SujeethJinesh/LatentWire/blob/14b5adf34cc130cd"
                 "47f18b1cf0be61ac99f90f24/paper_writing/runs/ablations_20251108_190831/"
                 "2a_stable_32tok/train.log#L1-L911", {"aborted_rank": 3}),),
        convert={"aborted_rank": int}),
    Signature(
        "nccl.error_class", K.NCCL_DETAIL,
        ("ncclRemoteError", "ncclSystemError", "ncclInvalidUsage", "ncclInternalError",
         "ncclUnhandledCudaError", "ncclInvalidArgument"),
        r"^(?P<nccl_error>ncclRemoteError|ncclSystemError|ncclInvalidUsage|ncclInternalError"
        r"|ncclUnhandledCudaError|ncclInvalidArgument):",
        "COMM_CONNECTIVITY", "NCCL >= 2.12",
        (Example("ncclInvalidUsage: This usually reflects invalid usage of NCCL library.",
                 "https://github.com/Peterande/D-FINE/issues/289",
                 {"nccl_error": "ncclInvalidUsage"}),)),
    Signature(
        "nccl.unhandled_system_error", K.NCCL_SYSTEM, "unhandled system error",
        r"unhandled system error", "COMM_CONNECTIVITY", "all",
        (Example("RuntimeError: NCCL error in ProcessGroupNCCL.cpp:290, unhandled system error",
                 "https://github.com/NVIDIA/nccl/issues/328"),)),
    Signature(
        "nccl.unhandled_cuda_error", K.NCCL_CUDA, "unhandled cuda error",
        r"unhandled cuda error", "RANK_CRASHED", "all",
        (Example("[rank0]: torch.distributed.DistBackendError: NCCL error in: /pytorch/torch/"
                 "csrc/distributed/c10d/NCCLUtils.cpp:77, unhandled cuda error (run with "
                 "NCCL_DEBUG=INFO for details), NCCL version 2.26.2",
                 "https://github.com/pytorch/pytorch/issues/150852"),)),
    Signature(
        "nccl.socket_connect_failed", K.NCCL_SOCKET, "Connect to",
        r"(?:(?P<call>socketStartConnect|connectAddress|socketConnect|socketProgressState): "
        r"|NCCL WARN )Connect to (?P<address>[^<\s]+)<(?P<port>\d+)> failed ?: "
        r"(?P<reason>[^\n]+?)\s*$",
        "COMM_CONNECTIVITY", "NCCL >= 2.12 (a function's name first), NCCL < 2.12 (socket.h)",
        (Example("socketStartConnect: Connect to 127.0.0.1<45069> failed : Software caused "
                 "connection abort", "https://github.com/awslabs/awsome-distributed-ai/issues/192",
                 {"address": "127.0.0.1", "port": 45069,
                  "reason": "Software caused connection abort"}),
         Example("4: cgpu14:53622:56536 [0] include/socket.h:406 NCCL WARN Connect to "
                 "192.168.184.61<42427> failed : No route to host",
                 "https://github.com/sparticlesteve/nersc-pytorch-testing/blob/"
                 "645da4232cde0a93b8806517bbaadc70458ba8c2/nccl-test-shifter-1450334.out",
                 {"address": "192.168.184.61", "port": 42427, "reason": "No route to host"})),
        convert={"port": int}),
    Signature(
        "nccl.socket_peer_lost", K.NCCL_PEER_LOST, "Call to recv from",
        r"Call to recv from (?P<address>[^<\s]+)<(?P<port>\d+)> failed ?: (?P<reason>.+)",
        "COMM_CONNECTIVITY", "NCCL >= 2.12",
        (Example("socketProgressOpt: Call to recv from 172....<33759> failed : Connection reset "
                 "by peer", "https://github.com/NVIDIA/nccl/issues/2076",
                 {"address": "172....", "port": 33759, "reason": "Connection reset by peer"}),),
        convert={"port": int}),
    Signature(
        "nccl.no_socket_interface", K.NET_CONFIG, "no socket interface found",
        r"Bootstrap ?: no socket interface found", "ENV_NCCL_CONFIG", "NCCL >= 2.7",
        (Example("[rank0]: Bootstrap : no socket interface found",
                 "https://github.com/EvolvingLMMs-Lab/open-r1-multimodal/issues/7"),),
        extra=lambda m: {"config": "NCCL_SOCKET_IFNAME"}),
    Signature(
        "nccl.ib_completion_error", K.IB_COMPLETION, "Got completion",
        r"NET/IB ?: Got completion (?:from peer (?P<peer>[^<\s]+)<(?P<peer_port>\d+)> )?with "
        r"(?:error |status=)(?P<code>\d+),? opcode[ =](?P<opcode>\d+),? len[ =](?P<len>\d+),? "
        r"vendor err (?P<vendor_err>\d+)",
        "COMM_CONNECTIVITY", "NCCL >= 2.4 (peer from 2.12)",
        (Example("NCCL WARN NET/IB : Got completion from peer 192.168.17.147<38560> with error "
                 "12, opcode 0, len 0, vendor err 129",
                 "https://github.com/pytorch/pytorch/issues/81628",
                 {"peer": "192.168.17.147", "code": 12, "vendor_err": 129,
                  "status_name": "IBV_WC_RETRY_EXC_ERR"}),
         Example("NCCL WARN NET/IB : Got completion with error 12, opcode 0, len 0, vendor err "
                 "129", "https://github.com/NVIDIA/nccl/issues/902", {"code": 12})),
        convert={"peer_port": int, "code": int, "opcode": int, "len": int, "vendor_err": int},
        extra=_ib),
    Signature(
        # rdma-core's mlx5 provider dumps the failed completion itself (its status is in the
        # hex dump that follows): the same failure as NCCL's "NET/IB : Got completion", seen
        # below NCCL (or under any library on verbs)
        "ibverbs.mlx5_completion_error", K.IB_COMPLETION, "got completion with error",
        r"\bmlx5: (?P<host>\S+): got completion with error",
        "COMM_CONNECTIVITY", "rdma-core (libmlx5), any NCCL",
        (Example("(LLMRayActor pid=90738, ip=172.19.24.110) mlx5: host_unknown: got completion "
                 "with error:", "https://github.com/OpenRLHF/OpenRLHF/issues/621",
                 {"host": "host_unknown"}),)),
    Signature(
        "nccl.ib_async_event", K.IB_ASYNC, "Got async event",
        r"NET/IB ?: Got async event ?: (?P<event>[a-z][\w ]*?)\s*$",
        "COMM_CONNECTIVITY", "NCCL >= 2.4",
        (Example("...-48:34050:34121 [0] transport/net_ib.cc:93 NCCL WARN NET/IB : Got async "
                 "event : port error", "https://github.com/Lightning-AI/lit-llama/issues/380",
                 {"event": "port error"}),
         Example("transport/net_ib.cu:80 NCCL WARN NET/IB : Got async event : local "
                 "catastrophic error", "https://github.com/NVIDIA/nccl/issues/230",
                 {"event": "local catastrophic error"}))),
    Signature(
        "nccl.ib_size_mismatch", K.NET_CONFIG, "collective mismatch error",
        r"NET/IB ?: req \S+ tag \S+ peer (?P<peer>[^<\s]+)<\d+> collective mismatch error, "
        r"local size (?P<local_size>\d+) remote size (?P<remote_size>\d+)",
        "ENV_NCCL_CONFIG", "NCCL >= 2.12",
        (Example("10.10.23.10: so-ucloud-10-10-23-10:1307367:1307586 [0] transport/net_ib.cc:1038 "
                 "NCCL WARN NET/IB : req 0/1 tag 0 peer 10.10.23.6<58683> collective mismatch "
                 "error, local size 496640 remote size 65536",
                 "https://github.com/NVIDIA/nccl/issues/969",
                 {"peer": "10.10.23.6", "local_size": 496640, "remote_size": 65536}),),
        convert={"local_size": int, "remote_size": int},
        extra=lambda m: {"config": "NCCL_* settings differ between nodes"}),
    Signature(
        "nccl.mismatched_collective", K.MISMATCH_DETAIL, "Mismatched collective detected",
        r"Mismatched collective detected, please check your collective calls at and around "
        r"rank (?P<around_rank>\d+)",
        "HANG_COLLECTIVE_MISMATCH", "NCCL 2.4 - 2.8",
        (Example("init.cc:1247 NCCL WARN Mismatched collective detected, please check your "
                 "collective calls at and around rank 39. You can use NCCL_DEBUG=INFO and "
                 "NCCL_DEBUG_SUBSYS=COLL to see the collective logs",
                 "https://github.com/NVIDIA/nccl/issues/296", {"around_rank": 39}),),
        convert={"around_rank": int}),
    Signature(
        # the message's shape, its prefix dropped or reworded where it is quoted
        "nccl.duplicate_gpu", K.DUPLICATE_GPU, "both on CUDA device",
        r"rank (?P<rank_a>\d+) and rank (?P<rank_b>\d+) both on CUDA device (?P<device>\w+)",
        "GPU_DEVICE_MAPPING", "NCCL >= 2.6",
        (Example("Duplicate GPU detected : rank 0 and rank 1 both on CUDA device 2000",
                 "https://github.com/Peterande/D-FINE/issues/289",
                 {"rank_a": 0, "rank_b": 1, "device": "2000"}),
         # NCCL 2.28.9 on an H200, recorded by `make gpu-verify` (docs/gpu-verified.md)
         Example("[2026-11-27 13:39:08] vm:1001:1001 [0] init.cc:904 NCCL WARN Duplicate GPU "
                 "detected : rank 0 and rank 1 both on CUDA device 60",
                 "tests/fixtures/logs/recorded/nccl_duplicate_gpu_nvidia_h200.log",
                 {"rank_a": 0, "rank_b": 1, "device": "60"}),
         Example("Error: rank 27 and rank 19 both on CUDA device 53000 (PCI 53:00.0)",
                 "https://www.thomaskalnik.com/posts/deepseek-v3-part-4-nccl-networking-"
                 "stability", {"rank_a": 27, "rank_b": 19, "device": "53000"})),
        convert={"rank_a": int, "rank_b": int}),
    Signature(
        "nccl.shm_call_failed", K.NCCL_SHM, "Call to ",
        r"Call to (?P<call>shm_open|posix_fallocate|ftruncate|mmap|shm_unlink) failed ?: "
        r"(?P<reason>.+)",
        "ENV_SHM_TOO_SMALL", "NCCL 2.4 - 2.11 (include/shm.h)",
        (Example("node08:27106:27302 [0] include/shm.h:27 NCCL WARN Call to shm_open failed : "
                 "Permission denied", "https://github.com/NVIDIA/nccl/issues/328",
                 {"call": "shm_open", "reason": "Permission denied"}),
         Example("include/shm.h:28 NCCL WARN Call to posix_fallocate failed: No space left on "
                 "device", "https://github.com/NVIDIA/nccl/issues/342",
                 {"call": "posix_fallocate"})),),
    Signature(
        "nccl.shm_segment_failed", K.NCCL_SHM, "shared memory segment",
        r"Error while creating shared memory segment (?P<segment>\S+) \(size (?P<size>\d+)\)",
        "ENV_SHM_TOO_SMALL", "NCCL >= 2.4",
        (Example("include/shm.h:48 NCCL WARN Error while creating shared memory segment "
                 "nccl-shm-recv-250a7cc850ba9298-0-1-3 (size 9637888)",
                 "https://github.com/NVIDIA/nccl/issues/342", {"size": 9637888}),),
        convert={"size": int}),
    Signature(
        "nccl.shm_extend_failed", K.NCCL_SHM, "failed to extend",
        r"failed to extend (?P<segment>/dev/shm/\S+) to (?P<size>\d+) bytes(?:, error: "
        r"(?P<reason>.+))?",
        "ENV_SHM_TOO_SMALL", "NCCL >= 2.12 (misc/shmutils.cc)",
        (Example("[2026-04-22 21:34:20] mt-l-x86iavx512-45-172-t4-4-csmpw-runner-g4sfw-workflow:"
                 "202016:202235 [0] misc/shmutils.cc:88 NCCL WARN Error: failed to extend "
                 "/dev/shm/nccl-WU88OE to 9637892 bytes, error: No space left on device (28)",
                 "https://github.com/pytorch/ci-infra/pull/490",
                 {"segment": "/dev/shm/nccl-WU88OE", "size": 9637892}),),
        convert={"size": int}),
    Signature(
        "nccl.xml_graph_import", K.NCCL_XML, "XML Import Channel",
        r"XML Import Channel ?: dev (?P<dev>\d+) not found", "ENV_NCCL_CONFIG", "NCCL >= 2.6",
        (Example("Spotllm:73025:73112 [0] graph/search.cc:719 NCCL WARN XML Import Channel : "
                 "dev 1 not found.", "https://github.com/NVIDIA/nccl/issues/1240", {"dev": 1}),),
        convert={"dev": int}),
    Signature(
        "nccl.env_set", K.NCCL_ENV, "set by environment to",
        r"(?P<var>NCCL_\w+) set by environment to (?P<value>\S+)", "ENV_NCCL_CONFIG", "all",
        (Example("Spotllm:73025:73112 [0] NCCL INFO NCCL_GRAPH_FILE set by environment to "
                 "/opt/microsoft/ncv4/graph.xml", "https://github.com/NVIDIA/nccl/issues/1240",
                 {"var": "NCCL_GRAPH_FILE", "value": "/opt/microsoft/ncv4/graph.xml"}),)),
    Signature(
        # Which network plugin each process loaded: nodes that load different ones (a
        # plugin installed on some nodes only) do not speak the same transport.
        "nccl.net_plugin", K.NCCL_NET, ("NET/Plugin", "Plugin Path :"),
        r"NCCL INFO (?:NET/Plugin ?: ?(?:(?P<missing>Could not find: \S+|Plugin load returned "
        r"\d+)|Loaded net plugin (?P<loaded>\S+))|Plugin Path : (?P<path>\S+))",
        "ENV_VERSION_MISMATCH", "NCCL >= 2.4",
        (Example("HGX-H100-11:18226:18274 [5] NCCL INFO NET/Plugin: Could not find: "
                 "libnccl-net.so. Using internal network plugin.",
                 "https://github.com/NVIDIA/nccl/issues/1634",
                 {"plugin": "internal"}),
         Example("HGX-H100-04:589474:589541 [0] NCCL INFO Plugin Path : /opt/hpcx/"
                 "nccl_rdma_sharp_plugin/lib/libnccl-net.so",
                 "https://github.com/NVIDIA/nccl/issues/1634",
                 {"plugin": "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so"})),
        extra=lambda m: {"plugin": "internal" if m["missing"] else m["loaded"] or m["path"]}),
    Signature(
        # The interfaces NCCL's socket transport (and its bootstrap) use, one line, or
        # wrapped one entry a line where a log was pasted: nodes reach each other only
        # through an interface they share (rules_env.nccl_ifaces).
        "nccl.socket_interfaces", K.NCCL_IFACES, "<0>",
        # the address stops at its "<": with \S+ an entry could swallow the next, and a
        # line of entries with no blank between them backtracked exponentially (20: 0.3 s)
        r"^(?:.*\b(?:NET/Socket|Bootstrap) ?: Using)?\s*(?P<list>(?:\[\d+\][\w.@-]+:[^\s<]+"
        r"<\d+>\s*)+)$",
        "ENV_NCCL_CONFIG", "NCCL >= 2.4",
        (Example("ip-172-31-92-218:4760:4826 [0] NCCL INFO NET/Socket : Using [0]ens5:"
                 "172.31.92.218<0> [1]vethe2e6725:fe80::4811:8aff:fe89:315f%vethe2e6725<0>",
                 "https://github.com/pytorch/pytorch/issues/68893",
                 {"interfaces": ["ens5", "vethe2e6725"]}),
         Example("[12]veth6163fba:fe80::b878:6cff:fe52:abe2%veth6163fba<0> ",
                 "https://github.com/NVIDIA/nccl/issues/697", {"interfaces": ["veth6163fba"]})),
        extra=lambda m: {"interfaces": re.findall(r"\[\d+\]([\w.@-]+):", m["list"])}),
    Signature(
        # accelerate refuses to start multi-GPU work on RTX 3090 / 40xx without P2P/IB off
        # (accelerate/state.py, check_cuda_p2p_ib_support)
        "accelerate.no_p2p", K.NO_P2P, "communication broadband via P2P",
        r"doesn't support faster communication broadband via P2P or IB",
        "TOPO_NO_P2P", "accelerate >= 0.26",
        (Example("NotImplementedError: Using RTX 3090 or 4000 series doesn't support faster "
                 "communication broadband via P2P or IB. Please set `NCCL_P2P_DISABLE=\"1\"` "
                 "and `NCCL_IB_DISABLE=\"1\" or use `accelerate launch` which will do this "
                 "automatically.", "https://github.com/zai-org/ChatGLM3/issues/536"),),
        extra=lambda m: {"what": "accelerate: this GPU model has no P2P/IB between cards",
                         "fix": "NCCL_P2P_DISABLE=1 NCCL_IB_DISABLE=1, or `accelerate launch`"}),
    Signature(
        # NCCL_NET names a transport NCCL cannot load (SHM is no NET plugin), or the
        # network plugin installed fails: no rank can build a communicator
        "nccl.no_net_plugin", K.NET_CONFIG, "Failed to initialize any NET plugin",
        r"Failed to initialize any NET plugin", "ENV_NCCL_CONFIG", "NCCL >= 2.19",
        (Example("[2026-06-21 21:35:22] gpu005:2319245:2319245 [0] plugin/net.cc:379 NCCL WARN "
                 "Failed to initialize any NET plugin",
                 "https://github.com/Ryukijano/agentic_converstations/blob/85853bcb3212254d923"
                 "fb7d024222b68ff80fd52/helix_conv/RF-DETR%20Ablation%20Plotting.md"),),
        extra=lambda m: {"config": "NCCL_NET", "plugin_failed": True}),
    Signature(
        # the NVIDIA kernel driver and its user-space library differ (a driver upgraded
        # without a reboot): NVML, and NCCL through it, cannot start on that node
        "nvml.driver_library_mismatch", K.DRIVER_MISMATCH, "Driver/library version mismatch",
        r"(?P<call>\w+\(\)) failed: Driver/library version mismatch|Driver/library version "
        r"mismatch", "ENV_VERSION_MISMATCH", "NVIDIA driver (NVML)",
        (Example("[rank0]: nvmlInit_v2() failed: Driver/library version mismatch",
                 "https://github.com/facebookresearch/dinov2/blob/93aad6083b64e9dc88bf98beb124"
                 "920ffeb5e85f/distillation/wandb/run-20250111_100401-ad7kn56z/files/output.log",
                 {"call": "nvmlInit_v2()"}),)),
    Signature(
        # each communicator a rank starts, with the unique id its ranks must share: ranks
        # that start one communicator under different ids never meet (rules_collective)
        "nccl.comm_init_start", K.NCCL_COMM_INIT, "Init START",
        r"ncclCommInitRank\w* comm (?P<comm>0x[0-9a-f]+) rank (?P<nccl_rank>\d+) nranks "
        r"(?P<nranks>\d+) .*commId (?P<comm_id>0x[0-9a-f]+) - Init START",
        "HANG_COLLECTIVE_MISMATCH", "NCCL >= 2.19 (commId on the Init START line)",
        (Example("vae-bc5a469e-2296-0:10209:10243 [1] NCCL INFO ncclCommInitRankConfig comm "
                 "0x650f7526ddc0 rank 1 nranks 2 cudaDev 1 nvmlDev 1 busId 200000 commId "
                 "0x56bea185a98d5193 - Init START",
                 "https://github.com/tcwalther/bugreport-mosaicml-streaming-lightning-torchrun/"
                 "blob/main/README.md",
                 {"nccl_rank": 1, "nranks": 2, "comm_id": "0x56bea185a98d5193"}),),
        convert={"nccl_rank": int, "nranks": int}),
    Signature(
        "nccl.version", K.VERSION, "NCCL version",
        r"NCCL version (?P<nccl>\d+\.\d+\.\d+)", "KNOWN_UPSTREAM_BUG", "all",
        (Example("NCCL version 2.19.3+cuda12.3", "https://github.com/NVIDIA/nccl/issues/1240",
                 {"nccl": "2.19.3"}),
         Example("RuntimeError: NCCL error in: ../torch/lib/c10d/ProcessGroupNCCL.cpp:832, "
                 "unhandled system error, NCCL version 20.9.8",
                 "https://github.com/sparticlesteve/nersc-pytorch-testing/blob/d6aa2354838b8071"
                 "a92e8c00d19b5863f8bf21ec/slurm-pm-shifter-test-8597.out", {"nccl": "2.9.8"})),
        convert={"nccl": nccl_version}),
    Signature(
        "nccl.warn", K.NCCL_WARN, "NCCL WARN",
        r"NCCL WARN (?P<message>.+)", "UNRECOGNIZED_FAILURE", "all",
        (Example("2a8874e7d1e6:2196:2275 [1] graph/xml.h:101 NCCL WARN Attribute arch of node "
                 "cpu not found", "https://github.com/aws/aws-ofi-nccl/issues/785",
                 {"message": "Attribute arch of node cpu not found"}),),
        fallback=True),
    Signature(
        "nccl.socket_no_address", K.NET_CONFIG, "nor AF_INET6",
        r"connecting to address\s+with family (?P<family>\d+) is neither AF_INET\(2\) nor "
        r"AF_INET6\(10\)", "ENV_NCCL_CONFIG", "NCCL 2.18 - 2.27",
        (Example("[trainer0|0]:ncclSocketInit: connecting to address  with family 59936 is "
                 "neither AF_INET(2) nor AF_INET6(10)", "https://github.com/NVIDIA/nccl/issues/1837",
                 {"family": "59936"}),),
        extra=lambda m: {"config": "NCCL_SOCKET_IFNAME"}),
    Signature(
        "nccl.no_interface_in_subnet", K.NET_CONFIG, "No interface found in the same subnet",
        r"No interface found in the same subnet as remote address (?P<address>[^<\s]+)",
        "ENV_NCCL_CONFIG", "NCCL >= 2.4",
        (Example("e82c50601d13:213:213 [0] include/socket.h:197 NCCL WARN Net : No interface "
                 "found in the same subnet as remote address 192.168.0.91<27030>",
                 "https://github.com/NVIDIA/nccl/issues/331", {"address": "192.168.0.91"}),),
        extra=lambda m: {"config": "NCCL_SOCKET_IFNAME / NCCL_COMM_ID"}),
    Signature(
        "nccl.watchdog_timeout_wrapped", K.NCCL_WATCHDOG,
        "Watchdog caught collective operation timeout",
        r"Watchdog caught collective operation timeout(?::\s*WorkNCCL\((?:SeqNum=(?P<seq>\d+), )?"
        r"OpType=(?P<op>\w+))?", "COLLECTIVE_TIMEOUT",
        "torch >= 1.13, the line wrapped or cut (before its WorkNCCL(...) part, or inside it)",
        (Example("[Rank 0] Watchdog caught collective operation timeout:",
                 "https://github.com/alan-turing-institute/autocast/issues/381"),
         Example("Watchdog caught collective operation timeout: WorkNCCL(SeqNum=3, OpType="
                 "BROADCAST, Timeout(ms)=1800000) ran for 1808442 millis econds before timing "
                 "out.", "https://github.com/InternLM/xtuner/issues/390",
                 {"seq": 3, "op": "BROADCAST"})),
        convert={"seq": int}, fallback=True),
    Signature(
        "nccl.watchdog_check_timeout_frame", K.NCCL_WATCHDOG, "WorkNCCL::checkTimeout",
        r"c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout", "COLLECTIVE_TIMEOUT",
        "torch >= 2.2 (C++ stack of the watchdog's timeout exception)",
        (Example("frame #1: c10d::ProcessGroupNCCL::WorkNCCL::checkTimeout(std::optional<std::"
                 "chrono::duration<long, std::ratio<1l, 1000l> > >) + 0x1d2 (0x1554e9e0f8f2 in "
                 "/mnt/home/ewulff/miniforge3/envs/mlpf/lib/python3.11/site-packages/torch/lib/"
                 "libtorch_cuda.so)", "https://github.com/jpata/particleflow/issues/390"),)),
    Signature(
        "gloo.interface_not_found", K.NET_CONFIG, "Unable to find address for",
        r"Unable to find address for: (?P<interface>\S+)", "ENV_NCCL_CONFIG",
        "gloo (all torch releases)",
        (Example("RuntimeError: [enforce fail at /root/pytorch/third_party/gloo/gloo/transport/"
                 "tcp/device.cc:83] ifa != nullptr. Unable to find address for: bond1",
                 "https://github.com/NVIDIA/Megatron-LM/issues/436", {"interface": "bond1"}),),
        extra=lambda m: {"config": "GLOO_SOCKET_IFNAME"}),
    Signature(
        "gloo.hostname_loopback", K.NET_CONFIG, "Unable to resolve hostname",
        r"Unable to resolve hostname to a \(local\) address\. Using the loopback",
        "ENV_NCCL_CONFIG", "gloo (torch >= 1.8)",
        (Example("[rank8] Warning: Unable to resolve hostname to a (local) address. Using the "
                 "loopback", "https://github.com/aws-samples/aws-do-eks/pull/50"),),
        extra=lambda m: {"config": "GLOO_SOCKET_IFNAME (the hostname resolves to no local "
                                   "address)"}),
)
