"""Known texts of a GPU that is broken, shared, or missing."""

from __future__ import annotations

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature

SIGNATURES = (
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
        "cuda.illegal_memory_access", K.CUDA_ILLEGAL, "illegal memory access",
        r"(?P<watchdog>NCCL watchdog thread terminated with exception: )?CUDA error: an illegal "
        r"memory access was encountered", "RANK_CRASHED", "CUDA (all)",
        (Example("[E ProcessGroupNCCL.cpp:916] [Rank 0] NCCL watchdog thread terminated with "
                 "exception: CUDA error: an illegal memory access was encountered",
                 "https://github.com/vllm-project/vllm/issues/4108",
                 {"watchdog": "NCCL watchdog thread terminated with exception:"}),)),
    Signature(
        "cuda.invalid_device_ordinal", K.DUPLICATE_GPU, "invalid device ordinal",
        r"(?:CUDA error|cuda runtime error \(\d+\)) ?: invalid device ordinal",
        "GPU_DEVICE_MAPPING",
        "CUDA (all)",
        (Example("RuntimeError: cuda runtime error (10) : invalid device ordinal at "
                 "/pytorch/torch/csrc/cuda/Module.cpp:33",
                 "https://github.com/HRNet/HRNet-Semantic-Segmentation/issues/171"),)),
    Signature(
        "cuda.error", K.CUDA_ERROR, "CUDA error",
        r"CUDA error: (?P<message>[^\n]+)", "RANK_CRASHED", "CUDA (all)",
        (Example("RuntimeError: CUDA error: uncorrectable ECC error encountered",
                 "https://github.com/jade-hpc-gpu/jade-hpc-gpu.github.io/issues/194",
                 {"message": "uncorrectable ECC error encountered"}),),
        fallback=True),
)
