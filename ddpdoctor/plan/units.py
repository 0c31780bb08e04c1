"""Strict parsing of sizes ("80G", "80GiB", "81920M") and counts ("7e9", "7B", "350M").

No torch, no float surprises: NaN, inf, negative and unknown suffixes are refused with a
one-line reason (ValueError), which the command turns into a usage error.
"""

from __future__ import annotations

import math
import re

# Memory sizes: G means GiB, as nvidia-smi and the CUDA OOM message count them; GB is 10^9.
_SIZE_UNITS: dict[str, int] = {
    "": 1, "b": 1,
    "k": 2**10, "kib": 2**10, "kb": 10**3,
    "m": 2**20, "mib": 2**20, "mb": 10**6,
    "g": 2**30, "gib": 2**30, "gb": 10**9,
    "t": 2**40, "tib": 2**40, "tb": 10**12,
}
# Parameter counts: K/M/B/T as model cards write them (7B = 7e9).
_COUNT_UNITS: dict[str, int] = {"": 1, "k": 10**3, "m": 10**6, "b": 10**9, "g": 10**9,
                                "t": 10**12}
_NUMBER = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:[eE][+-]?[0-9]+)?)\s*([A-Za-z]*)\s*$")


def _split(text: str, units: dict[str, int], what: str) -> float:
    m = _NUMBER.match(str(text))
    if not m:
        raise ValueError(f"{text!r} is not a {what} (examples: {_EXAMPLES[what]})")
    unit = m.group(2).lower()
    if unit not in units:
        raise ValueError(f"{text!r}: unknown unit {m.group(2)!r} (examples: {_EXAMPLES[what]})")
    value = float(m.group(1)) * units[unit]
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"{text!r} must be a positive finite {what}")
    return value


_EXAMPLES = {"size": "80G, 80GiB, 80GB, 81920M", "count": "7e9, 7B, 350M, 1.3e9"}


def parse_size(text: str) -> int:
    """Bytes in ``text``: ``80G``/``80GiB`` = 80 * 2**30, ``80GB`` = 80 * 10**9."""
    return int(_split(text, _SIZE_UNITS, "size"))


def parse_count(text: str) -> int:
    """A parameter count: ``7e9``, ``7B``, ``350M``."""
    value = _split(text, _COUNT_UNITS, "count")
    if value < 1:
        raise ValueError(f"{text!r}: a parameter count must be at least 1")
    return int(round(value))


def fmt_bytes(n: float) -> str:
    """Bytes in GiB/MiB/KiB with 3 significant figures (binary units, like nvidia-smi)."""
    for unit, size in (("TiB", 2**40), ("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if abs(n) >= size:
            return f"{n / size:.3g} {unit}"
    return f"{n:.0f} B"


def fmt_count(n: float) -> str:
    for unit, size in (("T", 1e12), ("B", 1e9), ("M", 1e6), ("K", 1e3)):
        if abs(n) >= size:
            return f"{n / size:.3g}{unit}"
    return f"{n:.0f}"
