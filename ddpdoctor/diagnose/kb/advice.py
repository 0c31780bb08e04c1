"""A framework's own performance advice, printed by jobs that run on.

DDP's reducer says when find_unused_parameters=True found nothing unused (an extra autograd
traversal every iteration); Lightning says when a DataLoader's workers may starve the
step; RCCL says when the IOMMU is not in passthrough (GPU peer-to-peer can hang). They
are facts about speed or set-up, never a failure by themselves: diagnose reports them as info, after
any error, and a log that holds only these is healthy.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature


def _advises(finding: str) -> Callable[[re.Match[str]], dict[str, str]]:
    def extra(m: re.Match[str]) -> dict[str, str]:
        return {"advice": finding}
    return extra


SIGNATURES: tuple[Signature, ...] = (
    Signature(
        "ddp.find_unused_none_found", K.ADVICE, "did not find any unused parameters",
        r"find_unused_parameters=True was specified in DDP constructor, but did not find any "
        r"unused parameters",
        "DDP_FIND_UNUSED_OVERHEAD", "torch >= 1.8 (reducer.cpp, once per rank)",
        (Example("[rank0]:[W306 14:11:30.969179112 reducer.cpp:1431] Warning: "
                 "find_unused_parameters=True was specified in DDP constructor, but did not "
                 "find any unused parameters in the forward pass. This flag results in an "
                 "extra traversal of the autograd graph every iteration, which can adversely "
                 "affect performance.", "https://github.com/m2lines/Samudra/issues/630",
                 {"advice": "DDP_FIND_UNUSED_OVERHEAD"}),
         Example("[W reducer.cpp:1303] Warning: find_unused_parameters=True was specified in "
                 "DDP constructor, but did not find any unused parameters in the forward "
                 "pass. ", "https://github.com/cszn/KAIR/issues/103", {})),
        extra=_advises("DDP_FIND_UNUSED_OVERHEAD")),
    Signature(
        "lightning.few_workers", K.ADVICE, "which may be a bottleneck",
        # (?<!\S): tried where a word starts, not at each offset of a long one
        r"(?<!\S)(?P<loader>\S+(?: \d+)?),? does not have many workers which may be a bottleneck",
        "DATALOADER_BOTTLENECK", "pytorch_lightning >= 1.0 (data_connector.py)",
        (Example("/home/tes001/u/TxT2SPEECH/miniconda3_u20/envs/EveryVoice/lib/python3.9/"
                 "site-packages/pytorch_lightning/trainer/connectors/data_connector.py:441: The "
                 "'val_dataloader' does not have many workers which may be a bottleneck. "
                 "Consider increasing the value of the `num_workers` argument` to "
                 "`num_workers=15` in the `DataLoader` to improve performance.",
                 "https://github.com/EveryVoiceTTS/EveryVoice/issues/173",
                 {"loader": "'val_dataloader'", "advice": "DATALOADER_BOTTLENECK"}),
         Example("/uufs/chpc.utah.edu/common/home/u1323098/software/pkg/miniconda3/envs/"
                 "CADUCEUS_3/lib/python3.8/site-packages/pytorch_lightning/trainer/connectors/"
                 "data_connector.py:224: PossibleUserWarning: The dataloader, val_dataloader "
                 "0, does not have many workers which may be a bottleneck. Consider increasing "
                 "the value of the `num_workers` argument` (try 128 which is the number of "
                 "cpus on this machine) in the `DataLoader` init to improve performance.",
                 "https://github.com/kuleshov-group/caduceus/issues/29",
                 {"loader": "val_dataloader 0"})),
        extra=_advises("DATALOADER_BOTTLENECK")),
    Signature(
        "lightning.spawn_workers", K.ADVICE, "may result in data loading bottlenecks",
        r"persistent_workers=False, and strategy=(?P<strategy>\w+) may result in data loading "
        r"bottlenecks",
        "DATALOADER_BOTTLENECK", "pytorch_lightning >= 1.5 (spawn strategies)",
        (Example("num_workers>0, persistent_workers=False, and strategy=ddp_spawn may result "
                 "in data loading bottlenecks. Consider setting ",
                 "https://github.com/archinetai/audio-diffusion-pytorch-trainer/issues/6",
                 {"strategy": "ddp_spawn", "advice": "DATALOADER_BOTTLENECK"}),),
        extra=_advises("DATALOADER_BOTTLENECK")),
    Signature(
        # RCCL: peer-to-peer DMA between AMD GPUs hangs unless the IOMMU is in passthrough
        "rccl.iommu_not_passthrough", K.ADVICE, 'Missing "iommu=pt"',
        r'NCCL WARN Missing "iommu=pt" from kernel command line',
        "TOPO_NO_P2P", "RCCL (ROCm)",
        (Example('> supllm:402:402 [0] /longer_pathname_so_that_rpms_can_support_packaging_the'
                 '_debug_info_for_all_os_profiles/src/out/ubuntu-22.04/22.04/build/rccl/hipify/'
                 'src/init.cc:179 NCCL WARN Missing "iommu=pt" from kernel command line which '
                 'can lead to system instablity or hang!',
                 "https://github.com/ROCm/vllm/issues/390", {"advice": "TOPO_NO_P2P"}),),
        extra=_advises("TOPO_NO_P2P")),
)
