"""The DeepSpeed config rules, as data: what contradicts what, and where DeepSpeed says so.

Each entry is one constraint with the DeepSpeed source (its code as released in 0.19.8, or
its documentation) that states it. ``test`` reads the facts and returns what is wrong, or
None. Severity: "error" where DeepSpeed refuses the config, crashes, or silently does not
do what the config asks (an offload that is ignored); "warning" where it runs but is
known to go wrong (a fixed fp16 loss scale, buckets that eat the device's memory).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ddpdoctor.check.dsconfig.load import DsFacts
from ddpdoctor.core.findings import Severity

DS = "https://github.com/deepspeedai/DeepSpeed/blob/v0.19.8/deepspeed/runtime/"
DOCS = "https://www.deepspeed.ai/docs/config-json/"
HF_DS = "https://huggingface.co/docs/transformers/main/en/deepspeed"


@dataclass(frozen=True)
class JobFacts:
    """What the job adds: its world size and each device's memory, when known."""

    world_size: int | None = None
    device_mem: int | None = None  # bytes
    auto_filled: bool = False  # HF Trainer / accelerate fill the "auto" values
    config: str = ""  # the config file's path (check --ds-config)


@dataclass(frozen=True)
class DsRule:
    name: str
    severity: Severity  # "error" | "warning"
    setting: str  # the config keys it is about
    source: str  # the DeepSpeed code or documentation that states the constraint
    test: Callable[[DsFacts, JobFacts], str | None]


def _auto(f: DsFacts, job: JobFacts) -> str | None:
    if not f.autos or job.auto_filled:
        return None
    return (f"{', '.join(f.autos[:6])}{' ...' if len(f.autos) > 6 else ''} "
            f"{'is' if len(f.autos) == 1 else 'are'} \"auto\": only the HF Trainer and "
            "accelerate fill \"auto\" in; deepspeed.initialize fails on it (TypeError: "
            "unsupported operand type(s) ... 'str')")


def _fp16_and_bf16(f: DsFacts, job: JobFacts) -> str | None:
    return ("fp16 and bf16 are both enabled (DeepSpeed: \"bfloat16 and fp16 modes cannot be "
            "simultaneously enabled\")" if f.fp16 and f.bf16 else None)


def _stage_range(f: DsFacts, job: JobFacts) -> str | None:
    stage = f.raw.get("zero_optimization")
    if isinstance(stage, dict) and "stage" in stage and f.stage not in (0, 1, 2, 3) \
            and "zero_optimization.stage" not in f.autos:
        return f"zero_optimization.stage is {stage['stage']!r}: ZeRO stages are 0, 1, 2, 3"
    return None


def _offload_optimizer_stage(f: DsFacts, job: JobFacts) -> str | None:
    if f.offload_optimizer and f.stage == 0:
        return (f"offload_optimizer (device {f.offload_optimizer}) at ZeRO stage 0: offloading "
                "the optimizer is valid for stages 1, 2, 3; at stage 0 it is ignored and the "
                "optimizer state stays on the device")
    return None


def _offload_param_stage(f: DsFacts, job: JobFacts) -> str | None:
    if f.offload_param and f.stage is not None and f.stage < 3:
        return (f"offload_param (device {f.offload_param}) at ZeRO stage {f.stage}: parameter "
                "offload is valid only with stage 3; below it the parameters stay on the device")
    return None


def _offload_ratio_stage(f: DsFacts, job: JobFacts) -> str | None:
    if f.offload_ratio is not None and f.offload_ratio < 1.0 and f.stage != 3:
        return (f"offload_optimizer.ratio {f.offload_ratio:g} at ZeRO stage {f.stage}: partial "
                "offloading is only supported for stage 3 (DeepSpeed refuses the config)")
    return None


def _master_weights_stage(f: DsFacts, job: JobFacts) -> str | None:
    if f.fp16_master_weights and f.stage == 0:
        return ("fp16.fp16_master_weights_and_grads at ZeRO stage 0: it is only supported with "
                "stage 1, 2 or 3 (DeepSpeed refuses the config)")
    return None


def _batch(f: DsFacts, job: JobFacts) -> str | None:
    tb, mb, ga = f.train_batch, f.micro_batch, f.grad_acc
    if tb is None or mb is None or ga is None or mb <= 0 or ga <= 0:
        return None
    per_step = mb * ga
    if job.world_size is not None and tb != per_step * job.world_size:
        return (f"train_batch_size {tb:g} != train_micro_batch_size_per_gpu {mb:g} x "
                f"gradient_accumulation_steps {ga:g} x world size {job.world_size} "
                f"(= {per_step * job.world_size:g}): DeepSpeed asserts \"Check batch related "
                "parameters\" at initialize")
    if job.world_size is None and tb % per_step:
        return (f"train_batch_size {tb:g} is not a multiple of train_micro_batch_size_per_gpu "
                f"{mb:g} x gradient_accumulation_steps {ga:g}: no world size makes it add up")
    return None


def _positive(f: DsFacts, job: JobFacts) -> str | None:
    bad = [f"{k} {v:g}" for k, v in (("train_batch_size", f.train_batch),
                                     ("train_micro_batch_size_per_gpu", f.micro_batch),
                                     ("gradient_accumulation_steps", f.grad_acc),
                                     ("zero_optimization.reduce_bucket_size", f.reduce_bucket))
           if v is not None and v <= 0]
    return f"{', '.join(bad)}: must be greater than 0" if bad else None


def _dynamic(f: DsFacts) -> bool:
    return f.fp16 and not f.loss_scale  # fp16.loss_scale 0 (the default) = dynamic


def _fixed_loss_scale(f: DsFacts, job: JobFacts) -> str | None:
    if f.fp16 and f.loss_scale:
        return (f"fp16.loss_scale {f.loss_scale:g} is a fixed scale: an overflow is never "
                "backed off (every step whose gradients overflow at this scale is skipped, "
                "for the whole run) and a scale too small lets gradients underflow to 0; 0 "
                "selects dynamic loss scaling")
    return None


def _scale_power(f: DsFacts, job: JobFacts) -> str | None:
    p = f.initial_scale_power
    if not _dynamic(f) or p is None:
        return None
    if p > 24:
        return (f"fp16.initial_scale_power {p:g} starts the scale at 2^{p:g}: each overflow "
                f"halves it and skips the step, so about {p - 16:g} steps are skipped before "
                "it settles near the default 2^16")
    if p < 8:
        return (f"fp16.initial_scale_power {p:g} starts the scale at 2^{p:g}: small gradients "
                "underflow to 0 in fp16 until it has grown (one doubling per "
                "loss_scale_window steps, 1000 by default)")
    return None


def _scaler_floor(f: DsFacts, job: JobFacts) -> str | None:
    if not _dynamic(f):
        return None
    if f.loss_scale_window is not None and f.loss_scale_window <= 0:
        return "fp16.loss_scale_window must be > 0 with dynamic loss scaling (loss_scale 0)"
    if f.min_loss_scale is not None and f.min_loss_scale <= 0:
        return ("fp16.min_loss_scale must be > 0 with dynamic loss scaling: the scale can "
                "collapse to 0 and every step is skipped")
    return None


_OVERLAP_FACTOR = 4.5  # DeepSpeed ZeRO-2 with overlap_comm: 4.5 x the bucket sizes
_DEFAULT_BUCKET = 5e8  # elements, reduce_bucket_size / allgather_bucket_size default


def bucket_bytes(f: DsFacts) -> float | None:
    """Bytes the ZeRO-1/2 communication buckets take, by the rule HF's DeepSpeed guide gives
    ("5e8 x 2 Bytes x 2 x 4.5" = 9 GB with overlap_comm)."""
    if f.stage not in (1, 2):
        return None
    elem = 2 if f.fp16 or f.bf16 else 4
    total = (f.reduce_bucket or _DEFAULT_BUCKET) + (f.allgather_bucket or _DEFAULT_BUCKET)
    # overlap_comm defaults to off below stage 3 (zero/config.py overlap_comm_valid)
    return total * elem * (_OVERLAP_FACTOR if f.overlap_comm else 1.0)


def _buckets_vs_memory(f: DsFacts, job: JobFacts) -> str | None:
    need = bucket_bytes(f)
    if need is None or not job.device_mem or need <= job.device_mem / 2:
        return None
    return (f"the ZeRO-{f.stage} communication buckets take about {need / 2**30:.1f} GiB "
            f"(reduce_bucket_size + allgather_bucket_size x {2 if f.fp16 or f.bf16 else 4} B"
            f"{' x 4.5 with overlap_comm' if f.overlap_comm else ''}) of the device's "
            f"{job.device_mem / 2**30:.1f} GiB: more than half, before weights, gradients, "
            "optimizer state and activations")


def _duplicates(f: DsFacts, job: JobFacts) -> str | None:
    if not f.duplicates:
        return None
    return (f"key(s) given twice: {', '.join(sorted(set(f.duplicates)))} (DeepSpeed: "
            "\"Duplicate keys in DeepSpeed config\")")


RULES: tuple[DsRule, ...] = (
    DsRule("duplicate_keys", "error", "(any)", DS + "config_utils.py", _duplicates),
    DsRule("auto_outside_hf", "error", "(any \"auto\" value)",
           HF_DS + "#deepspeed-and-trainer-parameters", _auto),
    DsRule("fp16_and_bf16", "error", "fp16.enabled, bf16.enabled", DS + "config.py",
           _fp16_and_bf16),
    DsRule("zero_stage_range", "error", "zero_optimization.stage", DS + "zero/config.py",
           _stage_range),
    DsRule("offload_optimizer_stage0", "error", "zero_optimization.offload_optimizer",
           DS + "zero/config.py", _offload_optimizer_stage),
    DsRule("offload_param_below_stage3", "error", "zero_optimization.offload_param",
           DS + "zero/config.py", _offload_param_stage),
    DsRule("partial_offload_below_stage3", "error", "zero_optimization.offload_optimizer.ratio",
           DS + "zero/config.py", _offload_ratio_stage),
    DsRule("fp16_master_weights_stage0", "error", "fp16.fp16_master_weights_and_grads",
           DS + "config.py", _master_weights_stage),
    DsRule("batch_arithmetic", "error",
           "train_batch_size, train_micro_batch_size_per_gpu, gradient_accumulation_steps",
           DS + "config.py", _batch),
    DsRule("positive_sizes", "error", "batch sizes, reduce_bucket_size", DS + "config.py",
           _positive),
    DsRule("fixed_fp16_loss_scale", "warning", "fp16.loss_scale", DOCS + "#fp16-training-options",
           _fixed_loss_scale),
    DsRule("initial_scale_power_extreme", "warning", "fp16.initial_scale_power",
           DOCS + "#fp16-training-options", _scale_power),
    DsRule("dynamic_scaler_floor", "error", "fp16.loss_scale_window, fp16.min_loss_scale",
           DS + "precision_config.py", _scaler_floor),
    DsRule("buckets_vs_memory", "warning",
           "zero_optimization.reduce_bucket_size, allgather_bucket_size, overlap_comm",
           HF_DS + "#zero-2", _buckets_vs_memory),
)
