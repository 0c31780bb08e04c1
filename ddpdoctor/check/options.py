"""``CheckOptions``: every knob of a check, validated once, and sent to the ranks as JSON.

The click command builds it from its flags; ``ddpdoctor check --nnodes`` hands it to
``torchrun -m ddpdoctor.check.worker --opts JSON``; probes and analyses read its typed
fields. ``None`` means "derive it on the rank" (from the backend or the deadline).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any

COLLECTIVES = ("all_reduce", "all_gather", "reduce_scatter", "broadcast")
DEPTHS = ("quick", "default", "full")

# The largest bandwidth message by depth, (gloo, nccl), unless --max-bytes says otherwise.
_DEPTH_MAX_BYTES = {"quick": (1 << 20, 16 << 20), "default": (16 << 20, 256 << 20),
                    "full": (64 << 20, 1 << 30)}
# What --quick and --full change from the field defaults below (the default depth). Every
# probe runs at every depth: only the probes whose cost grows with what they move do less
# (--quick) or more (--full).
_DEPTH_FIELDS: dict[str, dict[str, object]] = {
    "quick": {"collectives": ("all_reduce",), "link_iters": 1, "dl_batches": 2},
    "default": {},
    "full": {"warmup": 2, "trial_budget_s": None},
}


class OptionsError(ValueError):
    """An option out of range or of the wrong type; the message names it."""


@dataclass(frozen=True)
class CheckOptions:
    # env
    shm_min_free: int = 512 << 20  # bytes of free /dev/shm below which ENV_SHM_TOO_SMALL
    # rendezvous: the job's own MASTER_ADDR / MASTER_PORT (default: the environment's)
    master_addr: str | None = None
    master_port: int | None = None
    # the backend the ranks ran on (set by the launcher's result)
    backend: str | None = None
    # how thorough: "quick", "default" or "full" (see ``at_depth``)
    depth: str = "default"
    # bandwidth
    max_bytes: int | None = None  # None: by depth and backend (16 MiB gloo, 256 MiB nccl)
    min_bytes: int = 1024
    expect_busbw: float | None = None  # GB/s; below half of it is COMM_BANDWIDTH_LOW
    warmup: int = 1  # untimed calls per size (the call that sizes the trials comes after)
    iters: int = 5  # at most this many back-to-back calls per trial ...
    # ... and fewer when one call takes longer than this share of a trial: a 16 MiB gloo
    # all_reduce (~16 ms here) needs no averaging over 5, and on a slow link the sweep's
    # cost stays bounded. None: always ``iters``.
    trial_budget_s: float | None = 0.025
    trials: int = 3
    collectives: tuple[str, ...] = COLLECTIVES
    link_bytes: int | None = None  # None: min(8 MiB, max_bytes)
    link_timeout_s: float = 30.0
    link_iters: int = 3
    # connectivity
    p2p_timeout_s: float | None = None  # None: the deadline shared by the rounds
    # dataloader
    dl_workers: int = 2
    dl_batch: int = 4
    dl_item_bytes: int = 8 << 20
    dl_timeout_s: float | None = None  # None: a third of the deadline, in [5, 30] s
    dl_batches: int = 4

    def __post_init__(self) -> None:
        for f in fields(self):
            _validate(f.name, getattr(self, f.name))
        unknown = [c for c in self.collectives if c not in COLLECTIVES]
        if unknown:
            raise OptionsError(f"collectives: unknown {unknown}; choose from {COLLECTIVES}")
        if self.depth not in DEPTHS:
            raise OptionsError(f"depth must be one of {DEPTHS}, not {self.depth!r}")
        if self.backend not in (None, "gloo", "nccl"):
            raise OptionsError(f"backend must be gloo or nccl, not {self.backend!r}")

    def bandwidth_max_bytes(self, backend: str) -> int:
        if self.max_bytes is not None:
            return self.max_bytes
        gloo, nccl = _DEPTH_MAX_BYTES[self.depth]
        return nccl if backend == "nccl" else gloo

    @classmethod
    def at_depth(cls, depth: str, **fields: object) -> CheckOptions:
        """Options for ``--quick`` / ``--full`` (or the default depth); ``fields`` win."""
        if depth not in DEPTHS:
            raise OptionsError(f"depth must be one of {DEPTHS}, not {depth!r}")
        # Unchecked here: __post_init__ checks each value's type at run time.
        values: dict[str, Any] = {**_DEPTH_FIELDS[depth], "depth": depth, **fields}
        return cls(**values)

    def replace(self, **changes: object) -> CheckOptions:
        return CheckOptions.from_dict({**self.to_dict(), **changes})

    def to_dict(self) -> dict[str, object]:
        out = asdict(self)
        out["collectives"] = list(self.collectives)
        return out

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), sort_keys=True)

    @classmethod
    def from_dict(cls, data: Mapping[str, object]) -> CheckOptions:
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(data) - known)
        if unknown:
            raise OptionsError(f"unknown check option(s) {', '.join(unknown)}")
        # JSON or a caller's dict, unchecked here: __post_init__ checks each value's type.
        values: dict[str, Any] = dict(data)
        if "collectives" in values:
            values["collectives"] = tuple(values["collectives"])
        return cls(**values)

    @classmethod
    def from_json(cls, text: str) -> CheckOptions:
        try:
            data = json.loads(text)
        except ValueError as e:
            raise OptionsError(f"not JSON: {e}") from None
        if not isinstance(data, dict):
            raise OptionsError("check options must be a JSON object")
        return cls.from_dict(data)

    @classmethod
    def coerce(cls, opts: CheckOptions | Mapping[str, object] | None) -> CheckOptions:
        """Options as given by a caller: a ``CheckOptions``, a plain dict or nothing."""
        if isinstance(opts, CheckOptions):
            return opts
        return cls.from_dict(opts or {})


# field -> (type, minimum); a minimum of None means any finite value of the type
_LIMITS: dict[str, tuple[type, float | None]] = {
    "shm_min_free": (int, 1), "master_port": (int, 1), "max_bytes": (int, 1024),
    "min_bytes": (int, 1), "expect_busbw": (float, 0), "warmup": (int, 0),
    "iters": (int, 1), "trials": (int, 1), "link_bytes": (int, 4), "trial_budget_s": (float, 0),
    "link_timeout_s": (float, 0), "link_iters": (int, 1), "p2p_timeout_s": (float, 0),
    "dl_workers": (int, 0), "dl_batch": (int, 1), "dl_item_bytes": (int, 4),
    "dl_timeout_s": (float, 0), "dl_batches": (int, 1),
}


def _validate(name: str, value: object) -> None:
    if value is None or name not in _LIMITS:
        return
    kind, minimum = _LIMITS[name]
    if isinstance(value, bool) or not isinstance(value, int | float) or \
            (kind is int and not isinstance(value, int)):
        raise OptionsError(f"{name} must be {'an integer' if kind is int else 'a number'}, "
                           f"not {value!r}")
    if not math.isfinite(value) or (minimum is not None and value < minimum):
        raise OptionsError(f"{name} must be a finite number >= {minimum:g}, not {value!r}")
    if name == "master_port" and value > 65535:
        raise OptionsError(f"master_port must be <= 65535, not {value!r}")
