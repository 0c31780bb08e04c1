"""The finding catalog: every stable finding id ddpdoctor can emit.

Ids are a public contract (docs/design.md): add new ones, never rename. Each id names exactly
one playbook under ``playbooks/<ID>.md``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FindingSpec:
    id: str
    severity: str  # default severity: "error" | "warning" | "info"
    meaning: str
    found_by: tuple[str, ...]


def _spec(id: str, severity: str, meaning: str, found_by: str) -> FindingSpec:
    return FindingSpec(id, severity, meaning, tuple(s.strip() for s in found_by.split(",")))


_SPECS = [
    _spec("ENV_VERSION_MISMATCH", "error",
          "torch / CUDA / NCCL / Python versions differ across ranks or nodes", "check"),
    _spec("ENV_SHM_TOO_SMALL", "error",
          "/dev/shm too small for DataLoader workers or NCCL shared memory", "check, diagnose"),
    _spec("ENV_PORT_IN_USE", "error",
          "the rendezvous port is taken (\"Address already in use\")", "check, run, diagnose"),
    _spec("ENV_RENDEZVOUS_UNREACHABLE", "error",
          "MASTER_ADDR/rendezvous endpoint cannot be reached or resolved",
          "check, run, diagnose"),
    _spec("ENV_NCCL_CONFIG", "error",
          "NCCL_* / GLOO_* settings that cannot work", "check, diagnose"),
    _spec("ENV_VAR_MISMATCH", "warning",
          "a NCCL_* / GLOO_* / TORCH_* / OMP_* variable differs from rank to rank",
          "check, run"),
    _spec("ENV_LIMITS", "warning",
          "ulimit, CPU affinity or thread oversubscription that hurts training", "check"),
    _spec("GPU_DEVICE_MAPPING", "error",
          "several ranks share one GPU, or LOCAL_RANK does not match the device used",
          "check, watch, diagnose"),
    _spec("GPU_HEALTH", "error",
          "ECC errors, XID errors, throttling, retired pages, degraded PCIe link",
          "check, diagnose"),
    _spec("GPU_MEMORY_OCCUPIED", "warning",
          "another process already holds GPU memory", "check"),
    _spec("TOPO_NO_P2P", "warning",
          "GPUs of one node cannot talk peer-to-peer / no NVLink where expected", "check"),
    _spec("COMM_CONNECTIVITY", "error",
          "a rank or a pair of ranks cannot complete a collective or point-to-point transfer",
          "check, diagnose"),
    _spec("COMM_BANDWIDTH_LOW", "warning",
          "bus bandwidth far below what the link should give", "check"),
    _spec("COMM_SLOW_RANK", "warning",
          "one rank makes every collective slower", "check, watch"),
    _spec("DATALOADER_WORKER_FAILURE", "error",
          "DataLoader workers cannot start, are killed or time out", "check, run, diagnose"),
    _spec("DATALOADER_BOTTLENECK", "warning",
          "ranks spend a large share of each step waiting for data", "watch, scale"),
    _spec("DDP_UNUSED_PARAMETERS", "error",
          "parameters that get no gradient", "watch, run, diagnose"),
    _spec("DDP_FIND_UNUSED_OVERHEAD", "info",
          "find_unused_parameters=True while every parameter is used", "watch"),
    _spec("DDP_REDUCTION_NOT_FINISHED", "error",
          "\"Expected to have finished reduction in the prior iteration\"", "run, diagnose"),
    _spec("GRAD_NONFINITE", "error",
          "NaN/Inf in loss or gradients", "watch, run, diagnose"),
    _spec("PARAM_DESYNC", "error",
          "replicas that should be identical have diverged", "watch"),
    _spec("SAMPLER_MISSING", "warning",
          "data-parallel training without a DistributedSampler", "watch"),
    _spec("SAMPLER_EPOCH_NOT_SET", "warning",
          "DistributedSampler.set_epoch is not called", "watch"),
    _spec("STRAGGLER", "warning",
          "one rank's steps are consistently slower than the others'", "watch, run, scale"),
    _spec("MEMORY_GROWTH", "warning",
          "memory that grows step after step", "watch"),
    _spec("OOM", "error",
          "out of memory (CUDA OOM, the CPU allocator, or a host OOM kill)",
          "watch, run, diagnose"),
    _spec("HANG_RANK_MISSING_COLLECTIVE", "error",
          "most ranks wait in a collective that one or more ranks never entered",
          "attach, run, diagnose"),
    _spec("HANG_COLLECTIVE_MISMATCH", "error",
          "ranks wait in different collectives, or the same one with different shapes",
          "attach, run, diagnose"),
    _spec("HANG_P2P_DEADLOCK", "error",
          "point-to-point sends/receives that wait on each other", "attach, run"),
    _spec("HANG_DATALOADER", "error",
          "a rank is stuck inside data loading while the others wait", "attach, run"),
    _spec("RANK_CRASHED", "error",
          "a rank died and the others were left waiting or were torn down",
          "check, attach, run, diagnose"),
    _spec("RANK_UNRESPONSIVE", "error",
          "a rank stopped making progress outside any collective (stopped, stuck in a probe "
          "or in start-up) and was killed at the deadline", "check"),
    _spec("COLLECTIVE_TIMEOUT", "error",
          "a collective hit its timeout (NCCL watchdog / gloo timeout)", "run, diagnose"),
    _spec("UNRECOGNIZED_FAILURE", "error",
          "the logs show a failure (traceback, non-zero exit, fatal error line) that no "
          "known signature explains", "run, diagnose, scale"),
    _spec("KNOWN_UPSTREAM_BUG", "warning",
          "the versions in use (or a log line) match a known bug in torch, NCCL or a plugin",
          "check, diagnose"),
    _spec("GRAD_ACCUM_OUT_OF_STEP", "warning",
          "ranks run different numbers of micro-batches per optimizer step (gradient "
          "accumulation out of step)", "watch, run"),
    _spec("SCALING_COMM_BOUND", "warning",
          "scaling efficiency is poor and the lost time is spent waiting for gradient "
          "communication", "scale"),
    _spec("SCALING_COMPUTE_BOUND", "warning",
          "scaling efficiency is poor because each rank computes slower than one rank alone "
          "did (shared cores or GPUs, memory bandwidth, a per-rank batch too small)", "scale"),
    _spec("SCALING_INEFFICIENT", "warning",
          "scaling efficiency is poor and no single cause (communication, data, straggler, "
          "compute) explains it, or the run reported no per-rank times", "scale"),
    _spec("DS_CONFIG_INVALID", "error",
          "a DeepSpeed config whose settings contradict each other or the job (ZeRO stage vs "
          "offload, fp16 and bf16, the batch arithmetic, \"auto\" outside HF/accelerate, "
          "fp16 loss scaling, bucket sizes vs memory)", "check, run, diagnose"),
]

CATALOG: dict[str, FindingSpec] = {s.id: s for s in _SPECS}


def spec(finding_id: str) -> FindingSpec:
    """The catalog entry for ``finding_id``; an unknown id is a programming error."""
    try:
        return CATALOG[finding_id]
    except KeyError:
        raise ValueError(f"unknown finding id {finding_id!r}: add it to ddpdoctor/core/catalog.py "
                         f"and write playbooks/{finding_id}.md") from None


def markdown_table() -> str:
    """The catalog as the Markdown table docs/design.md carries (a test keeps them equal)."""
    rows = ["| id | severity | meaning | found by |", "|---|---|---|---|"]
    rows += [f"| {s.id} | {s.severity} | {s.meaning.replace('|', '/')} | {', '.join(s.found_by)} |"
             for s in _SPECS]
    return "\n".join(rows)


if __name__ == "__main__":  # python -m ddpdoctor.core.catalog: print the table for docs/design.md
    print(markdown_table())
