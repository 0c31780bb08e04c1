"""Known upstream bugs: the releases they hit, the fix, and the log line that shows them.

Each entry has a real upstream issue. ``versions`` are the affected ranges per component
(``[first affected, first fixed)``; ``None`` = no bound); ``check`` reports an entry from
versions alone, ``diagnose`` when its ``pattern`` matches a line of the log (and the log's
printed versions, if any, are in range).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature

Range = tuple[str | None, str | None]


@dataclass(frozen=True)
class RaisedIn:
    """A bug known by where a library raises it: the exception's innermost frame (a file
    path ending, a function) and its message. The message alone is any code's (a size
    mismatch); raised in that function it is the library's bug."""

    file: str  # the end of the frame's path: "deepspeed/runtime/hybrid_engine.py"
    function: str
    message: str  # a regex searched in "Type: message"
    example: str  # a real raise site and message, as a traceback's last lines print them
    url: str  # where the example comes from

    def matches(self, raised_at: str, exception: str) -> bool:
        path, _, func = raised_at.rpartition(" in ")
        return (func == self.function and path.rsplit(":", 1)[0].endswith(self.file)
                and re.search(self.message, exception) is not None)


@dataclass(frozen=True)
class KnownBug:
    id: str
    url: str
    title: str
    affected: str
    fixed: str
    workaround: str
    versions: dict[str, Range] = field(default_factory=dict)
    signature: Signature | None = None
    raised_in: RaisedIn | None = None


def _sig(bug: str, needle: str, pattern: str, versions: str, line: str, url: str) -> Signature:
    return Signature(f"bug.{bug}", K.KNOWN_BUG, needle, pattern, "KNOWN_UPSTREAM_BUG", versions,
                     (Example(line, url, {"bug": bug}),), extra=lambda m: {"bug": bug})


KNOWN_BUGS = (
    KnownBug(
        "nccl-2.25-blackwell-maxsharedmem", "https://github.com/NVIDIA/nccl/issues/1637",
        "NCCL before 2.26 cannot run its kernels on Blackwell consumer GPUs (RTX 50xx, sm_120): "
        "they need more shared memory than the device allows",
        "NCCL < 2.26 on RTX 5090 / 5080 (sm_120)", "NCCL 2.26",
        "use a torch build bundling NCCL >= 2.26 (or pip install nvidia-nccl-cu12>=2.26); "
        "NCCL_P2P_DISABLE does not help",
        {},  # only on sm_120 GPUs: the log line decides, not the version alone
        _sig("nccl-2.25-blackwell-maxsharedmem", "exceeds device/fn maxSharedMem",
             r"ncclMaxSharedMem \d+ exceeds device/fn maxSharedMem \d+", "NCCL < 2.26",
             "localhost:11344:11344 [1] NCCL INFO ncclMaxSharedMem 82240 exceeds device/fn "
             "maxSharedMem 79856", "https://github.com/NVIDIA/nccl/issues/1637")),
    KnownBug(
        "nccl-2.26.2-nvls-invalid-argument", "https://github.com/pytorch/pytorch/issues/150852",
        "NCCL 2.26.2's NVLS setup fails with CUDA 'invalid argument' on CUDA 12.2 drivers",
        "NCCL 2.26.2 (torch 2.8 nightlies) with a CUDA 12.2 driver", "NCCL 2.26.5",
        "export NCCL_NVLS_ENABLE=0, or upgrade to a torch build bundling NCCL >= 2.26.5",
        {"nccl": ("2.26.2", "2.26.5")},
        _sig("nccl-2.26.2-nvls-invalid-argument", "nvls.cc",
             r"nvls\.cc:\d+ NCCL WARN Cuda failure \d+ 'invalid argument'", "NCCL 2.26.2",
             "[2025-04-08 08:39:46] devgpu263:589012:591652 [0] transport/nvls.cc:254 NCCL WARN "
             "Cuda failure 1 'invalid argument'",
             "https://github.com/pytorch/pytorch/issues/150852")),
    KnownBug(
        "nccl-2.25-net-id-0", "https://github.com/NVIDIA/nccl/issues/1748",
        "NCCL 2.25/2.26's tree-graph fallback looks up a hard-coded net id that NIC fusion made "
        "invalid: multi-node init fails with 'Could not find NET with id 0'",
        "NCCL 2.25 - 2.26 (NeMo 25.04 containers), multi-node over InfiniBand", "NCCL 2.27.3",
        "upgrade NCCL to >= 2.27.3 (a newer container / torch build)",
        {},  # only with NIC fusion on several nodes: the log line decides, not the version
        _sig("nccl-2.25-net-id-0", "Could not find NET with id",
             r"NCCL WARN Could not find NET with id \d+", "NCCL 2.25 - 2.26",
             "graph/topo.h:230 NCCL WARN Could not find NET with id 0",
             "https://github.com/NVIDIA-NeMo/Speech/issues/13996")),
    KnownBug(
        "nccl-2.18.5-cuda-invalid-argument", "https://github.com/NVIDIA/nccl/issues/1024",
        "NCCL 2.18.5 fails its first collective with Cuda failure 'invalid argument'",
        "NCCL 2.18.5", "NCCL 2.18.6",
        "upgrade NCCL to >= 2.18.6 (pip install nvidia-nccl-cu12>=2.18.6 or a newer torch)",
        {"nccl": ("2.18.5", "2.18.6")},
        _sig("nccl-2.18.5-cuda-invalid-argument", "Cuda failure",
             r"^Cuda failure 'invalid argument'", "NCCL 2.18.5",
             "Cuda failure 'invalid argument'", "https://github.com/NVIDIA/nccl/issues/1024")),
    KnownBug(
        "nccl-2.27.3-cumem-host-shm", "https://github.com/NVIDIA/nccl/issues/1838",
        "NCCL 2.27.3's SHM transport uses cuMem host memory and fails with Cuda failure 217 "
        "on GPUs without peer access", "NCCL 2.27.3", "not stated in the thread",
        "export NCCL_CUMEM_HOST_ENABLE=0", {"nccl": ("2.27.3", "2.27.4")},
        _sig("nccl-2.27.3-cumem-host-shm", "Cuda failure 217",
             r"shm\.cc:\d+ NCCL WARN Cuda failure 217 'peer access is not supported",
             "NCCL 2.27.3",
             "[2025-09-09 23:51:24] 9b405963aa12:774:854 [0] transport/shm.cc:590 NCCL WARN "
             "Cuda failure 217 'peer access is not supported between these two devices'",
             "https://github.com/NVIDIA/nccl/issues/1838")),
    KnownBug(
        "torch-2.3-nccl-2.12-invalid-resource-handle",
        "https://github.com/pytorch/pytorch/issues/130414",
        "torch 2.3 with NCCL <= 2.12: barrier fails with Cuda failure 'invalid resource handle' "
        "when ranks did not call torch.cuda.set_device", "torch 2.3.x with NCCL <= 2.12",
        "not stated in the thread",
        "call torch.cuda.set_device(local_rank) before the first collective, or use NCCL >= 2.13",
        {"torch": ("2.3", "2.4"), "nccl": (None, "2.13")},
        _sig("torch-2.3-nccl-2.12-invalid-resource-handle", "invalid resource handle",
             r"enqueue\.cc:\d+ NCCL WARN Cuda failure 'invalid resource handle'",
             "torch 2.3, NCCL <= 2.12",
             "iZmj7cfy2ysqwfo0nrci4pZ:2532579:2532579 [0] enqueue.cc:336 NCCL WARN Cuda failure "
             "'invalid resource handle'", "https://github.com/pytorch/pytorch/issues/130414")),
    KnownBug(
        "torch-c10d-store-py312-segfault", "https://github.com/pytorch/pytorch/issues/125990",
        "torchrun (c10d rendezvous) segfaults on Python 3.12: the store bindings allocate Python "
        "bytes without the GIL", "torch 2.2.x - 2.3.x with Python 3.12",
        "torch 2.4.0 (pytorch/pytorch#128212)", "use Python <= 3.11, or torch >= 2.4",
        {"torch": ("2.2", "2.4"), "python": ("3.12", "3.13")},
        _sig("torch-c10d-store-py312-segfault", "_PyInterpreterState_GET",
             r"_PyInterpreterState_GET \(\) at \S*python-3\.12", "Python 3.12",
             "#0  0x000055555574498d in _PyInterpreterState_GET () at /usr/local/src/conda/"
             "python-3.12.3/Include/internal/pycore_pystate.h:133",
             "https://github.com/pytorch/pytorch/issues/125990")),
    KnownBug(
        "aws-ofi-nccl-static-p5-topology", "https://github.com/aws/aws-ofi-nccl/issues/785",
        "aws-ofi-nccl before 1.11 ships a static p5.48xlarge topology file NCCL cannot parse",
        "aws-ofi-nccl < 1.11", "aws-ofi-nccl 1.11 (maintainers recommend v1.13.2-aws)",
        "upgrade the aws-ofi-nccl plugin to >= 1.11", {"aws-ofi-nccl": (None, "1.11")},
        _sig("aws-ofi-nccl-static-p5-topology", "Attribute arch of node cpu not found",
             r"xml\.h:\d+ NCCL WARN Attribute arch of node cpu not found", "aws-ofi-nccl < 1.11",
             "2a8874e7d1e6:2196:2275 [1] graph/xml.h:101 NCCL WARN Attribute arch of node cpu "
             "not found", "https://github.com/aws/aws-ofi-nccl/issues/785")),
    KnownBug(
        "windows-tcpstore-libuv", "https://github.com/pytorch/pytorch/issues/139990",
        "the rendezvous store (TCPStore) uses libuv by default, but PyTorch's Windows wheels "
        "are built without it: creating the store fails on Windows",
        "torch 2.4 and later on Windows",
        "see pytorch/pytorch#139990 for the release that defaults to USE_LIBUV=0 on Windows",
        "set USE_LIBUV=0 in the environment (or pass use_libuv=False to the TCPStore / "
        "rendezvous URL)",
        {},
        _sig("windows-tcpstore-libuv", "use_libuv was requested",
             r"use_libuv was requested but PyTorch was build without libuv support",
             "torch >= 2.4 (Windows wheels)",
             "RuntimeError: use_libuv was requested but PyTorch was build without libuv support",
             "https://github.com/pytorch/pytorch/issues/139990")),
    KnownBug(
        "rocm-6.2-ipc-mainline-kernel", "https://github.com/ROCm/rccl/issues/1454",
        "ROCm 6.2's runtime (ROCr) shares GPU memory between processes through the out-of-tree "
        "KFD driver's IPC calls, which the mainline (upstream) amdgpu kernel driver lacks: "
        "RCCL's P2P transport fails with hipIpcGetMemHandle 'invalid argument'",
        "ROCm 6.2.x on a mainline (distribution) kernel driver",
        "ROCm 6.3 (reported passing with AMD's amdgpu-dkms driver)",
        "upgrade to ROCm >= 6.3 or install AMD's amdgpu-dkms driver",
        {},  # the ROCm release is not printed in a form read as a version: the line decides
        _sig("rocm-6.2-ipc-mainline-kernel", "hipIpcGetMemHandle failed",
             r"p2p\.cc:\d+ NCCL WARN hipIpcGetMemHandle failed : invalid argument",
             "ROCm 6.2.x, mainline kernel",
             "UVOSLinux:19403:19417 [1] /usr/src/debug/rccl/build/hipify/src/transport/p2p.cc:235"
             " NCCL WARN hipIpcGetMemHandle failed : invalid argument",
             "https://github.com/ROCm/rccl/issues/1454")),
    KnownBug(
        "transformers-staged-checkpoint-rename-race",
        "https://github.com/huggingface/transformers/issues/27925",
        "transformers' Trainer saves each checkpoint into a staging directory "
        "(tmp-checkpoint-*) and renames it; when several processes rename it, the one that "
        "comes second finds it gone or the target there (FileNotFoundError / FileExistsError "
        "/ Directory not empty)",
        "transformers 4.36.0 - 4.37.1 multi-GPU or multi-node (PR #27820; 4.36.1 fixed only "
        "part), and a main-branch build of February 2025 (os.renames of a random tmp dir)",
        "transformers 4.37.2 (only the main process renames: PR #28364)",
        "upgrade transformers to >= 4.37.2 (or pin 4.35.2); use a release, not a main-branch "
        "build",
        {},  # the transformers version is not printed in a form read as a version
        _sig("transformers-staged-checkpoint-rename-race", "tmp-checkpoint-",
             r"\[Errno \d+\] [^'\n]*'[^'\n]*tmp-checkpoint-[^'\n]*' -> '[^'\n]*checkpoint-\d+'",
             "transformers 4.36.0 - 4.37.1",
             "FileNotFoundError: [Errno 2] No such file or directory: 'model/tmp-checkpoint-49' "
             "-> 'model/checkpoint-49'", "https://github.com/axolotl-ai-cloud/axolotl/issues/948")),
    KnownBug(
        "ddp-broadcast-buffers-inplace", "https://github.com/pytorch/pytorch/issues/22095",
        "DDP with broadcast_buffers=True overwrites module buffers in place on every forward: "
        "a module run twice before backward fails autograd's version check",
        "all torch releases (DDP broadcast_buffers=True, the default)",
        "no fix; pytorch/pytorch#70260 discusses it",
        "DistributedDataParallel(..., broadcast_buffers=False), or one forward per backward",
        {},
        _sig("ddp-broadcast-buffers-inplace", "inplace operation",
             r"modified by an inplace operation", "all",
             "RuntimeError: one of the variables needed for gradient computation has been "
             "modified by an inplace operation: [torch.FloatTensor [1, 32,3,3]] is at version 2; "
             "expected version 1 instead.", "https://github.com/XPixelGroup/BasicSR/issues/541")),
    KnownBug(
        "inductor-legacy-tf32-read", "https://github.com/pytorch/pytorch/issues/166387",
        "torch.compile (Inductor) reads TF32 through the legacy allow_tf32 flag; once anything "
        "set it with the new fp32_precision API (transformers' tf32=True does), the read raises "
        "'you have used mix of the legacy and new APIs to set the TF32 status'",
        "torch builds with the fp32_precision API (seen on torch 2.10) under torch.compile, "
        "TF32 set through that API",
        "not fixed in a release (pytorch/pytorch#173731 moves Inductor to the new API)",
        "set TF32 through one API only: drop the new-API setting (transformers' --tf32, "
        "torch.backends.cuda.matmul.fp32_precision) and use allow_tf32, or run without "
        "torch.compile",
        {},  # the versions the log prints do not bound it: the line decides
        _sig("inductor-legacy-tf32-read", "mix of the legacy and new APIs",
             r"used mix of the legacy and new APIs to set the TF32 status",
             "torch with the fp32_precision API",
             "torch._inductor.exc.InductorError: LoweringException: RuntimeError: PyTorch is "
             "checking whether allow_tf32_new is enabled for cuBlas matmul,Current status "
             "indicate that you have used mix of the legacy and new APIs to set the TF32 status "
             "for cublas matmul. We suggest only using the new API to set the TF32 flag.",
             "https://github.com/pytorch/pytorch/pull/194680")),
    KnownBug(
        "deepspeed-hybrid-engine-fuse-lora", "https://github.com/deepspeedai/DeepSpeed/issues/3543",
        "DeepSpeed's hybrid engine fuses LoRA weights into the inference containers' fused QKV "
        "matrices with the per-projection LoRA shapes: generation fails with 'The size of "
        "tensor a (6144) must match the size of tensor b (8192)' in _fuse_lora",
        "DeepSpeed 0.9.x - 0.10.x hybrid engine (DeepSpeed-Chat step 3, "
        "--enable_hybrid_engine with --actor_lora_dim)",
        "not fixed for every model container (deepspeedai/DeepSpeedExamples#602, #622, #650 "
        "report it on later releases)",
        "run step 3 without --enable_hybrid_engine, or without LoRA on the actor "
        "(--actor_lora_dim 0)",
        {},  # the releases the log prints do not bound it: the raise site decides
        raised_in=RaisedIn(
            "deepspeed/runtime/hybrid_engine.py", "_fuse_lora",
            r"The size of tensor a \(\d+\) must match the size of tensor b",
            "/root/anaconda3/envs/deepspeed3.8/lib/python3.8/site-packages/deepspeed/runtime/"
            "hybrid_engine.py:137 in _fuse_lora | RuntimeError: The size of tensor a (6144) "
            "must match the size of tensor b (8192) at non-singleton dimension 0",
            "https://github.com/hch1017/TH_LLM/blob/b3d65d77245786821d9fa9067cf6f6119c30c29e/"
            "training/step3_rlhf_finetuning/output_TH_entire_random/training.log")),
)

BY_ID = {b.id: b for b in KNOWN_BUGS}
RAISED_IN = tuple(b for b in KNOWN_BUGS if b.raised_in is not None)
SIGNATURES = tuple(b.signature for b in KNOWN_BUGS if b.signature is not None)
