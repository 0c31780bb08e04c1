"""nccl-tests' bandwidth arithmetic (see nccl-tests doc/PERFORMANCE.md).

algbw = size / time. busbw rescales it to what each link carried, so that it is comparable
to the hardware's peak whatever the rank count:
  all_reduce       busbw = algbw * 2(n-1)/n
  all_gather       busbw = algbw * (n-1)/n    (size = the gathered output)
  reduce_scatter   busbw = algbw * (n-1)/n    (size = the full input)
  broadcast        busbw = algbw
"""

from __future__ import annotations

BUS_FACTOR = {
    "all_reduce": lambda n: 2 * (n - 1) / n,
    "all_gather": lambda n: (n - 1) / n,
    "reduce_scatter": lambda n: (n - 1) / n,
    "broadcast": lambda n: 1.0,
}


def algbw_gbps(size_bytes: int, seconds: float) -> float:
    return size_bytes / seconds / 1e9 if seconds > 0 else 0.0


def busbw_gbps(collective: str, size_bytes: int, seconds: float, world_size: int) -> float:
    return algbw_gbps(size_bytes, seconds) * BUS_FACTOR[collective](world_size)


def sizes(min_bytes: int, max_bytes: int, factor: int = 4) -> list[int]:
    out, s = [], min_bytes
    while s <= max_bytes:
        out.append(s)
        s *= factor
    return out
