"""Failure families by the shape of the message, whatever raised it.

An OS error names its cause by errno and wording, the same in a ``ValueError`` from c10d's
store, an ``OSError`` from a DataLoader, a C++ ``std::runtime_error`` from tensorpipe or a
launcher's log line: a host name that does not resolve, a process out of file descriptors.
These signatures match the wording, not the raiser, so an unseen raiser of a known errno is
still named (the family's finding leads when no more specific rule explains the failure).
"""

from __future__ import annotations

from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.kb.signature import Example, Signature

SIGNATURES = (
    Signature(
        # accelerate's debug mode (ACCELERATE_DEBUG_MODE=1) compares the shapes every process
        # passes to a collective before calling it, and raises instead of hanging
        "accelerate.operation_shape_mismatch", K.MISMATCH_DETAIL,
        "Cannot apply desired operation due to shape mismatches",
        r"Cannot apply desired operation due to shape mismatches",
        "HANG_COLLECTIVE_MISMATCH", "accelerate >= 0.20 (debug mode)",
        (Example("Cannot apply desired operation due to shape mismatches. All shapes across "
                 "devices must be valid.",
                 "https://github.com/huggingface/accelerate/blob/main/docs/source/"
                 "basic_tutorials/troubleshooting.md#mismatched-tensor-shapes",
                 {"check": "accelerate's debug-mode shape check"}),),
        extra=lambda m: {"check": "accelerate's debug-mode shape check"}),
    Signature(
        # DeepSpeed's multi-node runner checks each hostfile host with `ssh HOST hostname`
        # before it starts pdsh: exit status 255 is ssh's own failure (no route, no key, a
        # name that does not resolve)
        "family.node_unreachable_ssh", K.FAMILY_SSH,
        ("hostname' returned non-zero exit status 255", "was not reachable via ssh"),
        r"ssh -o PasswordAuthentication=no (?P<host>\S+) hostname' returned non-zero exit "
        r"status 255|host=(?P<host2>\S+) was not reachable via ssh",
        "ENV_RENDEZVOUS_UNREACHABLE", "deepspeed.launcher.runner (multi-node, pdsh)",
        (Example("subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no "
                 "192.168.3.100 hostname' returned non-zero exit status 255.",
                 "https://github.com/deepspeedai/DeepSpeed/issues/4907",
                 {"host": "192.168.3.100"}),
         Example("RuntimeError: Using hostfile at /home/552/dz9214/hostfile but "
                 "host=gadi-gpu-v100-0011 was not reachable via ssh. If you are running with a "
                 "single node please remove /home/552/dz9214/hostfile or setup passwordless "
                 "ssh.", "https://github.com/hpcac/2023-APAC-HPC-AI/issues/1",
                 {"host2": "gadi-gpu-v100-0011"}))),
    Signature(
        "family.name_resolution", K.FAMILY_RESOLVE,
        ("not known", "not found", "name resolution", "servname", "getaddrinfo",
         "associated with hostname", "does not resolve"),
        r"(?i)Name or service not known|nodename nor servname provided|Temporary failure in "
        r"name resolution|\bhost not found\b|getaddrinfo failed|No address associated with "
        r"hostname|Name does not resolve",
        "ENV_RENDEZVOUS_UNREACHABLE", "glibc / musl (Alpine, busybox) / c10d / Python socket "
        "wording",
        (Example("ValueError: host not found: Name or service not known",
                 "https://github.com/pytorch/pytorch/issues/73682"),
         Example("Error: Rank -1 received an Exception. Detailed message: host not found: Name "
                 "or service not known", "https://github.com/pytorch/elastic/issues/31"),
         # musl's EAI_NONAME, as busybox's nslookup prints it in a launch script
         Example("nslookup: can't resolve 'dlc1dwuhvtro4c27-master-0': Name does not resolve",
                 "https://github.com/modelscope/ms-swift/issues/6368"))),
    Signature(
        "family.too_many_open_files", K.FAMILY_LIMITS,
        ("open files", "Errno 24", "EMFILE"),
        r"(?i)too many open files|\[Errno 24\]|\bEMFILE\b",
        "ENV_LIMITS", "any (errno 24, EMFILE)",
        (Example("OSError: [Errno 24] Too many open files",
                 "https://github.com/facebookresearch/maskrcnn-benchmark/issues/158"),
         Example('  what():  In connectFromLoop at tensorpipe/transport/uv/uv.h:297 "rv < 0: '
                 'too many open files"', "https://github.com/pytorch/tensorpipe/issues/460"))),
    Signature(
        "family.cannot_start", K.FAMILY_START,
        ("can't open file", "execve", "command not found"),
        r"can't open file '[^']*': \[Errno 2\]|execve\(\): \S+: No such file or directory|"
        r": command not found$",
        "UNRECOGNIZED_FAILURE", "CPython, slurmstepd, sh",
        (Example("/home/niels/.pyenv/versions/3.9.10/bin/python3.9: can't open file '/home/niels/"
                 "python_projects/community-events-1/train.py': [Errno 2] No such file or "
                 "directory", "https://github.com/huggingface/community-events/pull/6"),
         Example("slurmstepd: error: execve(): torchrun: No such file or directory",
                 "https://github.com/CSCfi/pytorch-ddp-examples/issues/1"))),
    Signature(
        # init_process_group's env:// rendezvous reads what a launcher sets: a script run
        # with plain `python`, or a launcher that does not export them, lacks them
        "family.rendezvous_env_missing", K.FAMILY_RDZV_ENV, "expected, but not set",
        r"environment variable (?P<variable>\w+) expected, but not set",
        "ENV_RENDEZVOUS_UNREACHABLE", "torch >= 1.0 (torch.distributed.rendezvous)",
        (Example("ValueError: Error initializing torch.distributed using env:// rendezvous: "
                 "environment variable MASTER_ADDR expected, but not set",
                 "https://github.com/hwang2006/large-scale-lm-tutorials/blob/a7341cb0b52b8556ff"
                 "bab4bf1bceb98ba85dd150/docs/02_distributed_programming.md?plain=1#L242-L256",
                 {"variable": "MASTER_ADDR"}),)),
    Signature(
        # set_epoch exists on DistributedSampler: a loop that calls it on another sampler
        # was written for one, and its loader does not split the data between the ranks
        "family.sampler_not_distributed", K.FAMILY_SAMPLER, "has no attribute 'set_epoch'",
        r"'(?P<sampler>\w*Sampler)' object has no attribute 'set_epoch'",
        "SAMPLER_MISSING", "any torch (DistributedSampler.set_epoch)",
        (Example("AttributeError: 'RandomSampler' object has no attribute 'set_epoch'",
                 "https://github.com/s3prl/s3prl/issues/195", {"sampler": "RandomSampler"}),)),
    Signature(
        # init_process_group asked for a backend this torch build has none of: Windows and
        # macOS wheels have no NCCL, MPI is only in builds made on a host with MPI
        "family.backend_not_built", K.FAMILY_BACKEND, "Distributed package doesn't have",
        r"Distributed package doesn't have (?P<backend>\w+) built in",
        "ENV_NCCL_CONFIG", "any torch (distributed_c10d's backend check)",
        (Example("RuntimeError: Distributed package doesn't have NCCL built in",
                 "https://github.com/bshall/hubert/issues/1", {"backend": "NCCL"}),
         Example("RuntimeError: Distributed package doesn't have NCCL built in",
                 "https://github.com/ZTGeng/ZTGeng.github.io/blob/a5d67c3f43fb1260ee47a4860cb9"
                 "973b30db3d2c/_posts/2024-03-28-%E5%9C%A8Windows%E4%B8%8A%E4%B8%8B%E8%BD%BD%E5"
                 "%92%8C%E8%BF%90%E8%A1%8CLlama2.md", {"backend": "NCCL"}))),
)
