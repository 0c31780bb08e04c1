"""Known texts of a GPU that is broken, shared, or missing."""

from __future__ import annotations

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature

_ASSERT_SOURCE = ("https://github.com/jaeyun95/error_collections/blob/"
                  "05887ec21a10a2c6c828e4b553349f79805be2e1/README.md")

SIGNATURES = (
    Signature(
        # Ascend's HCCL, its device still owned by a process of an earlier run
        "hccl.device_held", K.DEVICE_HELD, "last training process is running",
        r"(?:(?P<code>E[A-Z]\d{4}): .*?)?Failed to initialize the HCCP process\. Reason: Maybe "
        r"the last training process is running",
        "GPU_MEMORY_OCCUPIED", "torch_npu with CANN's HCCL",
        (Example("EJ0001: 2024-05-21-11:57:54.167.645 Failed to initialize the HCCP process. "
                 "Reason: Maybe the last training process is running.",
                 "https://github.com/hiyouga/LlamaFactory/issues/3839", {"code": "EJ0001"}),)),
    Signature(
        "cuda.uncorrectable_ecc", K.GPU_ECC, "ECC error",
        r"(?P<what>uncorrectable ECC error encountered)", "GPU_HEALTH", "CUDA (all)",
        (Example("RuntimeError: CUDA error: uncorrectable ECC error encountered",
                 "https://github.com/jade-hpc-gpu/jade-hpc-gpu.github.io/issues/194",
                 {"what": "uncorrectable ECC error encountered"}),)),
    Signature(
        "kernel.nvidia_xid", K.GPU_XID, "Xid",
        r"NVRM: Xid \((?P<pci>PCI:[0-9a-fA-F:.]+)\): (?P<xid>\d+), (?P<message>.*)",
        "GPU_HEALTH", "NVIDIA driver kernel log (dmesg)",
        (Example("NVRM: Xid (PCI:0000:06:00): 79, GPU has fallen off the bus.",
                 "https://github.com/NVIDIA/open-gpu-kernel-modules/issues/1151",
                 {"pci": "PCI:0000:06:00", "xid": 79}),),
        convert={"xid": int}),
    Signature(
        # NVSwitch systems (A100/H100/B200 HGX) need the Fabric Manager up, at the driver's
        # version: without it CUDA will not start (802), and NCCL's NVLS cannot bind
        "gpu.fabric_not_ready", K.GPU_FABRIC,
        ("system not yet initialized", "Fabric Manager", "NVLink SHARP"),
        r"(?P<what>system not yet initialized|Failed to bind NVLink SHARP \(NVLS\) Multicast "
        r"memory|error in the Fabric Manager or NVSwitches)",
        "GPU_HEALTH", "CUDA >= 11 (cudaErrorSystemNotReady), NCCL >= 2.17 (NVLS)",
        (Example("RuntimeError: cuda runtime error (802) : system not yet initialized at "
                 "/opt/conda/conda-bld/pytorch_1579022034529/work/aten/src/THC/THCGeneral.cpp:50",
                 "https://github.com/pytorch/pytorch/issues/35710",
                 {"what": "system not yet initialized"}),
         Example("UserWarning: CUDA initialization: Unexpected error from cudaGetDeviceCount(). "
                 "Did you run some cuda functions before calling NumCudaDevices() that might "
                 "have already set an error? Error 802: system not yet initialized (Triggered "
                 "internally at  ../c10/cuda/CUDAFunctions.cpp:112.)",
                 "https://github.com/microsoft/lisa/issues/2823"),
         Example("Failed to bind NVLink SHARP (NVLS) Multicast memory of size 2097152 : CUDA "
                 "error 401 'the operation cannot be performed in the present state'. ",
                 "https://github.com/pytorch/pytorch/pull/177472",
                 {"what": "Failed to bind NVLink SHARP (NVLS) Multicast memory"}))),
    Signature(
        # ROCm's HSA runtime, when the device itself stops (a hang the driver resets, a
        # hardware error): the GPU faulted, not this rank's Python; the other ranks then
        # wait in their collective until the watchdog (RCCL prints NCCL's texts)
        "rocm.hw_exception", K.GPU_FAULT, "HW Exception by GPU",
        r"HW Exception by GPU node-(?P<node>\d+) \(Agent handle: (?P<agent>0x[0-9a-fA-F]+)\) "
        r"reason ?: ?(?P<reason>[^\n]+?)\s*$", "GPU_HEALTH", "ROCm (HSA runtime)",
        (Example("HW Exception by GPU node-9 (Agent handle: 0x64ff272d8ab0) reason :GPU Hang",
                 "https://github.com/ROCm/legacy-rocm-build/issues/4021",
                 {"node": "9", "reason": "GPU Hang"}),
         Example("HW Exception by GPU node-1 (Agent handle: 0x563e71f098b0) reason :GPU Hang",
                 "https://github.com/ROCm/ROCm/issues/5443", {"node": "1"}))),
    Signature(
        # ROCm's page fault: a kernel read or wrote memory it does not own (the analogue of
        # CUDA's illegal memory access); a "GPU Hang" after it is its consequence
        "rocm.memory_access_fault", K.GPU_MEMFAULT, "Memory access fault by GPU",
        r"Memory access fault by GPU node-(?P<node>\d+) \(Agent handle: (?P<agent>0x[0-9a-fA-F]+)"
        r"\) on address (?P<address>0x[0-9a-fA-F]+)\. ?Reason: (?P<reason>[^\n]+?)\.?\s*$",
        "RANK_CRASHED", "ROCm (HSA runtime)",
        (Example("Memory access fault by GPU node-1 (Agent handle: 0x556e9b7e3360) on address "
                 "0x7f52c3f5f000. Reason: Page not present or supervisor privilege.",
                 "https://github.com/ROCm/ROCm/issues/5443",
                 {"node": "1", "reason": "Page not present or supervisor privilege"}),
         Example("Memory access fault by GPU node-1 (Agent handle: 0xeea28e0) on address "
                 "0x7a6eedb80000. Reason: Page not present or supervisor privilege.",
                 "https://github.com/ROCm/ROCm/issues/5225", {"address": "0x7a6eedb80000"}))),
    Signature(
        # PyTorch's ROCm build says "HIP error" where the CUDA build says "CUDA error"
        "cuda.illegal_memory_access", K.CUDA_ILLEGAL, "illegal memory access",
        r"(?P<watchdog>NCCL watchdog thread terminated with exception: )?(?:(?:CUDA|HIP) error: "
        r"|Test CUDA failure \S+:\d+ ')an illegal memory access was encountered", "RANK_CRASHED",
        "CUDA (all), ROCm (HIP); nccl-tests",
        (Example("[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with "
                 "exception: CUDA error: an illegal memory access was encountered",
                 "https://github.com/vllm-project/vllm/issues/4108",
                 {"watchdog": "NCCL watchdog thread terminated with exception:"}),
         Example("torch.AcceleratorError: HIP error: an illegal memory access was encountered",
                 "https://github.com/ROCm/legacy-rocm-build/issues/5742"),
         Example("     2097152         32768     float    none      -1 node0: Test CUDA failure "
                 "common.cu:389 'an illegal memory access was encountered'",
                 "https://github.com/NVIDIA/nccl-tests/issues/355"))),
    Signature(
        "cuda.invalid_device_ordinal", K.DUPLICATE_GPU, "invalid device ordinal",
        # the same cudaErrorInvalidDevice in each raiser's words: torch, nccl-tests, NCCL
        r"(?:(?:CUDA error|cuda runtime error \(\d+\)) ?: |Test CUDA failure \S+:\d+ '?|"
        r"NCCL WARN Cuda failure (?:\d+ )?')invalid device ordinal",
        "GPU_DEVICE_MAPPING",
        "CUDA (all); nccl-tests; NCCL",
        (Example("RuntimeError: cuda runtime error (10) : invalid device ordinal at "
                 "/pytorch/torch/csrc/cuda/Module.cpp:33",
                 "https://github.com/HRNet/HRNet-Semantic-Segmentation/issues/171"),
         Example("nvidiatools-29-workload: Test CUDA failure common.cu:1030 invalid device "
                 "ordinal", "https://github.com/NVIDIA/nccl-tests/issues/323"),
         Example("[2026-04-18 12:45:41] gpu002:704798:704908 [0] transport/p2p.cc:275 NCCL WARN "
                 "Cuda failure 101 'invalid device ordinal'",
                 "https://github.com/openhackathons-org/Profiling-AI-Software-Bootcamp/blob/"
                 "06e3338ad1f11c6d025a4d4df538a71b64270fdd/Deployment_Guide.md"))),
    Signature(
        # cudaErrorDevicesUnavailable: the GPU is in exclusive-process compute mode and
        # another process (another rank given the same GPU, or a leftover) holds it
        "cuda.devices_unavailable", K.DUPLICATE_GPU, "is/are busy or unavailable",
        r"CUDA-capable device\(s\) is/are busy or unavailable", "GPU_DEVICE_MAPPING",
        "CUDA (all)",
        (Example("gpu-1-1: Test CUDA failure common.cu:1304 'CUDA-capable device(s) is/are busy "
                 "or unavailable'", "https://github.com/NVIDIA/nccl-tests/issues/369"),),
        extra=lambda m: {"busy": True}),
    Signature(
        "cuda.error", K.CUDA_ERROR, ("CUDA error", "HIP error"),
        r"(?:CUDA|HIP) error: (?P<message>[^\n]+)", "RANK_CRASHED", "CUDA (all), ROCm (HIP)",
        (Example("RuntimeError: CUDA error: uncorrectable ECC error encountered",
                 "https://github.com/jade-hpc-gpu/jade-hpc-gpu.github.io/issues/194",
                 {"message": "uncorrectable ECC error encountered"}),),
        fallback=True),
    # nccl-tests' report of a failed CUDA call ("Test CUDA failure common.cu:389 '...'")
    Signature(
        "nccl_tests.cuda_failure", K.CUDA_ERROR, "Test CUDA failure",
        r"Test CUDA failure \S+:\d+ '?(?P<message>[^'\n]+?)'?\s*$", "RANK_CRASHED", "nccl-tests",
        (Example("gpu-1-1: Test CUDA failure common.cu:1304 'CUDA-capable device(s) is/are busy "
                 "or unavailable'", "https://github.com/NVIDIA/nccl-tests/issues/369",
                 {"message": "CUDA-capable device(s) is/are busy or unavailable"}),),
        fallback=True),
    # torch < 1.5's wording of the same CUDA errors ("cuda runtime error (710) : ...")
    Signature(
        "cuda.runtime_error", K.CUDA_ERROR, "cuda runtime error (",
        r"cuda runtime error \((?P<code>\d+)\) : (?P<message>.+?)(?: at \S+:\d+)?$",
        "RANK_CRASHED", "torch < 1.5 (THC)",
        (Example("[1,1]<stderr>:RuntimeError: cuda runtime error (710) : device-side assert "
                 "triggered at /tmp/pip-req-build-l1dtn3mo/aten/src/THC/THCReduceAll.cuh:321",
                 _ASSERT_SOURCE, {"code": "710", "message": "device-side assert triggered"}),),
        fallback=True),
    # a CUDA kernel's own assert (an index out of range): the process's CUDA context is
    # dead, and its next CUDA call raises "device-side assert triggered"
    Signature(
        "cuda.kernel_assert", K.CUDA_ERROR, "Assertion `",
        r"\.cu:\d+: .*block: \[\d+,\d+,\d+\], thread: \[\d+,\d+,\d+\] "
        r"Assertion `(?P<assertion>[^`]+)` failed",
        "RANK_CRASHED", "CUDA (all)",
        (Example("/tmp/pip-req-build-l1dtn3mo/aten/src/THC/THCTensorIndex.cu:362: void "
                 "indexSelectLargeIndex(TensorInfo<T, IndexType>, TensorInfo<T, IndexType>, "
                 "TensorInfo<long, IndexType>, int, int, IndexType, IndexType, long) [with T = "
                 "c10::Half, IndexType = unsigned int, DstDim = 2, SrcDim = 2, IdxDim = -2, "
                 "IndexIsMajor = true]: block: [4,0,0], thread: [96,0,0] Assertion `srcIndex < "
                 "srcSelectDimSize` failed.", _ASSERT_SOURCE,
                 {"assertion": "srcIndex < srcSelectDimSize"}),),
        extra=lambda m: {"message": f"device-side assert triggered (a kernel's assertion "
                                    f"`{m['assertion']}` failed)"}),
)
