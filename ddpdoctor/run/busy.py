"""Pure: what the blamed ranks did while run watched them a few seconds more.

Both ways run looks at a quiet job end here: one node's own look (run/looks.py) and a
node's answer to the job view's leader (run/jobnode.py). Each watched rank ends up in
exactly one of four kinds, each with the line that says why:

- working: it used CPU with a stack that moved (or mostly in native work), or did
  storage I/O (a checkpoint written to a slow disk);
- spinning: it used CPU on the same lines in every stack read, with no I/O
  (run/spinning.py);
- idle: next to no CPU and no I/O (a rank asleep, blocked or stopped);
- unmeasured: its CPU could not be read before and after; not known to be idle, so it
  never confirms a hang.

Only ranks that are all idle or spinning confirm a hang.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from ddpdoctor.run.spinning import SpinVerdict

# A rank asleep, blocked or stopped uses next to no CPU (measured here: <= ~1% of a
# core with the watch's threads, right after py-spy read it); one still working, even
# starved on a host loaded 15x over its cores, got >= 7%. Storage I/O (a checkpoint
# written to a slow disk) counts as work too. Ranks inside a collective are not asked.
WORK_CPU_SHARE = 0.02  # of one core, over the recheck
WORK_CPU_MIN_S = 0.03
WORK_IO_BYTES = 256 << 10

Usage = tuple[float, int]  # (CPU seconds, storage bytes read + written) of one rank


def is_working(cpu_s: float, io_bytes: int, took_s: float) -> bool:
    """CPU or storage I/O over ``took_s`` seconds that only a working rank shows."""
    return cpu_s > max(WORK_CPU_MIN_S, WORK_CPU_SHARE * took_s) or io_bytes >= WORK_IO_BYTES


def used(rank: int, cpu: float, io: int, took: float) -> str:
    return (f"rank {rank} used {cpu:.2f} s of CPU"
            + (f" and {io / 1e6:.1f} MB of I/O" if io >= 50_000 else "") + f" in {took:.1f} s")


@dataclass(frozen=True)
class Recheck:
    """The watched ranks by what they did; each value is the line that says why."""

    took_s: float
    working: Mapping[int, str] = field(default_factory=dict)
    spinning: Mapping[int, str] = field(default_factory=dict)
    idle: Mapping[int, str] = field(default_factory=dict)
    unmeasured: tuple[int, ...] = ()

    def lines(self) -> tuple[str, ...]:
        """One line per watched rank, in rank order."""
        every = {**self.working, **self.spinning, **self.idle,
                 **{r: f"rank {r} could not be measured" for r in self.unmeasured}}
        return tuple(line for _, line in sorted(every.items()))


def recheck_of(watched: list[int], before: Mapping[int, Usage], after: Mapping[int, Usage],
               took: float, spin_of: Callable[[int], SpinVerdict]) -> Recheck:
    """Sort the ``watched`` ranks by their usage ``before`` and ``after`` ``took`` seconds
    and, for those that used CPU without I/O, their stack reads' verdict (``spin_of``)."""
    working, spinning, idle, unmeasured = {}, {}, {}, []
    for r in sorted(watched):
        if r not in before or r not in after:
            unmeasured.append(r)
            continue
        cpu, io = after[r][0] - before[r][0], after[r][1] - before[r][1]
        if not is_working(cpu, io, took):
            idle[r] = used(r, cpu, io, took)
        elif io >= WORK_IO_BYTES:
            working[r] = used(r, cpu, io, took)
        else:
            spin = spin_of(r)
            if spin.spinning:
                spinning[r] = (f"rank {r} {spin.reason}, {cpu:.2f} s of CPU in {took:.1f} s, "
                               "no step and no collective: spinning, not working")
            else:
                working[r] = f"{used(r, cpu, io, took)} ({spin.reason})"
    return Recheck(took, working, spinning, idle, tuple(unmeasured))
