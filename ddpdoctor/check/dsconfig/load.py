"""Read a DeepSpeed config file into the facts the rules look at.

Only the standard library: the check must work (and stay fast) where torch or deepspeed is
not installed, and a config is data, not code. DeepSpeed reads JSON (hjson where installed);
this reads JSON, so an hjson-only file gets a clear one-line error.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from ddpdoctor.core.errors import DoctorError, ExitCode

AUTO = "auto"
_MAX_BYTES = 16 << 20  # a config is a few KiB; a huge file is a wrong path


@dataclass(frozen=True)
class DsFacts:
    """The settings the rules read, as DeepSpeed itself would interpret them.

    ``None``: not set (DeepSpeed's default applies) or "auto" (listed in ``autos``).
    """

    path: str
    raw: Mapping[str, object]
    autos: tuple[str, ...]  # dotted paths whose value is "auto"
    duplicates: tuple[str, ...]  # keys given twice in one object (DeepSpeed refuses them)
    stage: int | None
    fp16: bool
    bf16: bool
    loss_scale: float | None
    initial_scale_power: float | None
    min_loss_scale: float | None
    loss_scale_window: float | None
    fp16_master_weights: bool
    offload_optimizer: str | None  # device: "cpu" | "nvme"; None when absent or "none"
    offload_ratio: float | None
    offload_param: str | None
    train_batch: float | None
    micro_batch: float | None
    grad_acc: float | None
    reduce_bucket: float | None
    allgather_bucket: float | None
    overlap_comm: bool | None


def read(path: str) -> DsFacts:
    """The facts of the config at ``path``; DoctorError (exit 2) on a missing or bad file."""
    raw, dups = _parse(path)
    return facts_of(raw, path, dups)


def _parse(path: str) -> tuple[dict[str, object], tuple[str, ...]]:
    p = Path(path)
    try:
        with p.open("rb") as f:
            data = f.read(_MAX_BYTES + 1)
    except FileNotFoundError:
        raise DoctorError(f"--ds-config {path}: no such file", ExitCode.USAGE) from None
    except OSError as e:
        raise DoctorError(f"--ds-config {path}: cannot read: {e.strerror or e}",
                          ExitCode.USAGE) from None
    if len(data) > _MAX_BYTES:
        raise DoctorError(f"--ds-config {path}: larger than 16 MiB, not a DeepSpeed config",
                          ExitCode.USAGE)
    dups: list[str] = []

    def pairs(items: list[tuple[str, object]]) -> dict[str, object]:
        seen: dict[str, object] = {}
        for k, v in items:
            if k in seen:
                dups.append(k)
            seen[k] = v
        return seen

    try:
        raw = json.loads(data.decode("utf-8-sig"), object_pairs_hook=pairs,
                         parse_constant=_no_constant)
    except UnicodeDecodeError:
        raise DoctorError(f"--ds-config {path}: not UTF-8 text", ExitCode.USAGE) from None
    except json.JSONDecodeError as e:
        raise DoctorError(f"--ds-config {path}: not valid JSON at line {e.lineno} column "
                          f"{e.colno}: {e.msg}", ExitCode.USAGE) from None
    except ValueError as e:
        raise DoctorError(f"--ds-config {path}: {e}", ExitCode.USAGE) from None
    if not isinstance(raw, dict):
        raise DoctorError(f"--ds-config {path}: the top level is a {type(raw).__name__}, "
                          "not a JSON object", ExitCode.USAGE)
    return raw, tuple(dups)


def _no_constant(name: str) -> NoReturn:
    # NaN / Infinity are not JSON; Python's json accepts them, DeepSpeed's numbers must not
    raise ValueError(f"{name} is not a valid JSON number")


def facts_of(raw: Mapping[str, object], path: str = "<config>",
             duplicates: tuple[str, ...] = ()) -> DsFacts:
    """The facts of an already parsed config (the unit tests' entry)."""
    zero = _zero(raw)
    fp16 = _obj(raw, "fp16")
    bf16 = _obj(raw, "bf16") or _obj(raw, "bfloat16")  # "bfloat16": DeepSpeed's old name
    opt = _obj(zero, "offload_optimizer")
    return DsFacts(
        path=path, raw=raw, autos=tuple(_autos(raw, "")), duplicates=duplicates,
        stage=_stage(raw, zero),
        fp16=_flag(fp16.get("enabled")), bf16=_flag(bf16.get("enabled")),
        loss_scale=_num(fp16.get("loss_scale")),
        initial_scale_power=_num(fp16.get("initial_scale_power")),
        min_loss_scale=_num(fp16.get("min_loss_scale")),
        loss_scale_window=_num(fp16.get("loss_scale_window")),
        fp16_master_weights=_flag(fp16.get("fp16_master_weights_and_grads")),
        offload_optimizer=_device(opt) or ("cpu" if _flag(zero.get("cpu_offload")) else None),
        offload_ratio=_num(opt.get("ratio")),
        offload_param=_device(_obj(zero, "offload_param"))
        or ("cpu" if _flag(zero.get("cpu_offload_param")) else None),
        train_batch=_num(raw.get("train_batch_size")),
        micro_batch=_num(raw.get("train_micro_batch_size_per_gpu")),
        grad_acc=_num(raw.get("gradient_accumulation_steps")),
        reduce_bucket=_num(zero.get("reduce_bucket_size")),
        allgather_bucket=_num(zero.get("allgather_bucket_size")),
        overlap_comm=None if zero.get("overlap_comm") is None else _flag(zero["overlap_comm"]),
    )


def _obj(d: Mapping[str, object], key: str) -> Mapping[str, object]:
    v = d.get(key)
    return v if isinstance(v, Mapping) else {}


def _zero(raw: Mapping[str, object]) -> Mapping[str, object]:
    z = raw.get("zero_optimization")
    return z if isinstance(z, Mapping) else {}


def _stage(raw: Mapping[str, object], zero: Mapping[str, object]) -> int | None:
    z = raw.get("zero_optimization")
    if isinstance(z, bool):  # the old form: true means stage 1 (zero/config.py)
        return 1 if z else 0
    if z is None:
        return 0
    value = _num(zero.get("stage", 0))
    return int(value) if value is not None and value == int(value) else None


def _flag(v: object) -> bool:
    # pydantic, which DeepSpeed's config classes use, reads "true"/"1"/"yes" as True
    if isinstance(v, str):
        return v.strip().lower() in ("true", "1", "yes", "on")
    return bool(v) if isinstance(v, (bool, int)) else False


def _num(v: object) -> float | None:
    if isinstance(v, bool) or v is None:
        return None
    if isinstance(v, (int, float)):
        return float(v) if math.isfinite(v) else None
    if isinstance(v, str):
        try:
            f = float(v)
        except ValueError:
            return None  # "auto" and words: the auto rule (or DeepSpeed) names them
        return f if math.isfinite(f) else None
    return None


def _device(d: Mapping[str, object]) -> str | None:
    if not d:
        return None
    dev = str(d.get("device", "none")).lower()
    return None if dev in ("none", "") else dev


def _autos(v: object, at: str) -> list[str]:
    if isinstance(v, str):
        return [at] if v.strip().lower() == AUTO else []
    if isinstance(v, Mapping):
        return [p for k, sub in v.items() for p in _autos(sub, f"{at}.{k}" if at else str(k))]
    if isinstance(v, list):
        return [p for i, sub in enumerate(v) for p in _autos(sub, f"{at}[{i}]")]
    return []
