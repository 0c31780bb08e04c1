"""``--vs-plain``: what an option costs or saves, measured against the plain strategy.

The plain run is the same strategy, model, data and steps without the options that trade
memory for time or precision (accumulation, compression, fp16/bf16, offload, activation
checkpointing); hsdp's plain run is fsdp (full sharding over every rank). Both runs measure
their last step exactly (plan/measure.py: tensor bytes, not the process's RSS, which on CPU
only ever grows), and rank 0 prints one line per strategy.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from ddpdoctor.train.config import RunConfig

_PLAIN_OF = {"hsdp": "fsdp"}
# the options that trade memory, time or precision, in the order they are named
_TRADED = ("grad_accum", "comm_hook", "precision", "cpu_offload", "activation_checkpointing")


@dataclass(frozen=True)
class RunNumbers:
    """What one strategy's run measured (rank 0's view)."""

    name: str
    step_s: float
    final_loss: float
    peak_mb: float  # the device's peak (GPU: max_memory_allocated, reset per strategy)
    memory: dict[str, float]  # plan.measure FIELDS of this rank's last step; {} if unmeasured


def plain_of(name: str, rcfg: RunConfig) -> tuple[str, RunConfig] | None:
    """The plain run for ``name``, or None when ``rcfg`` asks for nothing to compare."""
    plain = replace(rcfg, grad_accum=1, comm_hook="none", precision="fp32"
                    if rcfg.precision in ("fp16", "bf16") else rcfg.precision,
                    cpu_offload=False, activation_checkpointing=False, profile=0,
                    json_log=None)
    plain_name = _PLAIN_OF.get(name, name)
    if plain_name == name and plain == replace(rcfg, json_log=None, profile=0):
        return None
    return plain_name, plain


def options_text(name: str, rcfg: RunConfig, plain: RunConfig) -> str:
    """``fsdp --cpu-offload --activation-checkpointing``: the run being compared, named by
    the options in which it differs from ``plain``."""
    parts = [name]
    for field in _TRADED:
        value = getattr(rcfg, field)
        if value != getattr(plain, field):
            flag = "--" + field.replace("_", "-")
            parts.append(flag if isinstance(value, bool) else f"{flag} {value}")
    return " ".join(parts)


def _change(now: float, before: float) -> str:
    return f"{(now - before) / before:+.0%}" if before > 0 else "n/a"


def _mb(n: float) -> str:
    return f"{n / 2**20:.2f} MB"


def comparison(what: str, run: RunNumbers, plain: RunNumbers) -> tuple[str, dict[str, object]]:
    """One line for the terminal and the JSON record (``event: vs_plain``)."""
    parts = [f"step {run.step_s * 1000:.1f} ms vs {plain.step_s * 1000:.1f} ms "
             f"({_change(run.step_s, plain.step_s)})"]
    m, p = run.memory, plain.memory
    if m and p:
        states = ("params_bytes", "grads_bytes", "optimizer_bytes")
        parts += [
            f"peak {_mb(m['peak_bytes'])} vs {_mb(p['peak_bytes'])} "
            f"({_change(m['peak_bytes'], p['peak_bytes'])})",
            f"saved activations {_mb(m['activations_bytes'])} vs "
            f"{_mb(p['activations_bytes'])}",
            f"params+grads+optimizer {_mb(sum(m[k] for k in states))} vs "
            f"{_mb(sum(p[k] for k in states))}"]
    parts.append(f"final loss {run.final_loss:.4f} vs {plain.final_loss:.4f}")
    line = f"[{run.name}] {what} vs plain {plain.name}: " + "; ".join(parts)
    record: dict[str, object] = {
        "event": "vs_plain", "strategy": run.name, "run": what, "plain": plain.name,
        "step_time_s": [run.step_s, plain.step_s],
        "final_loss": [run.final_loss, plain.final_loss],
        "peak_mem_mb": [run.peak_mb, plain.peak_mb],
        "memory": [m, p]}
    return line, record
