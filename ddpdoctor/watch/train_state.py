"""Each rank's training state (optimizer step count, learning rate), read beside the
desync checksums: when replicas drift because one rank resumed different state from a
checkpoint, this says which rank's state differs, and how.

The optimizer step is the optimizer's own count (Adam's ``state[p]["step"]``), which a
resumed optimizer brings from its checkpoint; ``start`` is that count minus the steps the
watch saw this rank take: the step this rank resumed from (0: a fresh optimizer). The
learning rate is ``param_groups[0]["lr"]`` (what a scheduler sets).

Who differs: the ranks whose (start, lr) differ from what a strict majority of the group
holds. With no majority (two ranks, an even split) one case is still decided by the
evidence: in a job where some ranks resumed (start > 0), a rank whose optimizer started
fresh (start 0) did not load the checkpoint's optimizer state. Otherwise every differing
rank is named, and the finding says why no one rank can be called the different one.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

UNKNOWN = -1


@dataclass(frozen=True)
class RankState:
    step: int    # the optimizer's own step count; UNKNOWN if it keeps none (plain SGD)
    start: int   # the step it resumed from (step minus the steps the watch saw); UNKNOWN
    lr: float    # param_groups[0]["lr"]; nan if unknown


@dataclass(frozen=True)
class StateVerdict:
    ranks: list[int]   # whose training state differs
    decided: bool      # False: no majority and no evidence picks one; every differing rank
    why: str
    headline: str = "resumed different training state"


def read(opt: torch.optim.Optimizer | None, own_steps: int) -> RankState:
    """``opt``'s step count and learning rate (no communication; cheap: one state entry)."""
    nan = float("nan")
    if opt is None:
        return RankState(UNKNOWN, UNKNOWN, nan)
    step = UNKNOWN
    try:
        for s in opt.state.values():
            if "step" in s:
                step = int(float(s["step"]))
                break
    except Exception:  # an optimizer whose state is not a dict of dicts
        step = UNKNOWN
    group = opt.param_groups[0] if getattr(opt, "param_groups", None) else {}
    start = step - own_steps if step != UNKNOWN and step >= own_steps else UNKNOWN
    return RankState(step, start, _number(group.get("lr")))


def _number(v: Any) -> float:  # Any: whatever a scheduler stored; float() decides
    try:
        return float(v)
    except (TypeError, ValueError, RuntimeError):
        return float("nan")


def _key(s: RankState) -> tuple:
    return (s.start, round(s.lr, 12) if s.lr == s.lr else None)


def odd_state(states: list[RankState], ranks: list[int]) -> StateVerdict | None:
    """Pure: which ranks' training state differs from the others' (None: all the same)."""
    keys = [_key(s) for s in states]
    counts = Counter(keys).most_common()
    if len(counts) < 2:
        return None
    if counts[0][1] > counts[1][1] and counts[0][1] * 2 > len(keys):
        ref = counts[0][0]
        odd = [r for r, k in zip(ranks, keys) if k != ref]
        return StateVerdict(odd, True, "the other ranks agree on the optimizer step and "
                                       "learning rate; these do not")
    starts = {s.start for s in states}
    fresh = [r for r, s in zip(ranks, states) if s.start == 0]
    if fresh and len(fresh) < len(ranks) and all(
            s.start > 0 for s in states if s.start != 0):
        return StateVerdict(fresh, True, "the job resumed from a checkpoint (other ranks' "
                                         "optimizers continue from a saved step) but these "
                                         "ranks' optimizers started fresh at step 0: they "
                                         "did not load the optimizer state",
                            "did not resume the optimizer state")
    what = "optimizer steps" if len(starts) > 1 else "learning rates"
    return StateVerdict(sorted(ranks), False,
                        f"the ranks resumed with different {what} and no majority says "
                        "which is the checkpoint meant (with two ranks there is none; a "
                        "learning rate alone does not say which schedule is right): the "
                        "rank whose step/lr is not the one you resumed from is the culprit")


def describe(states: list[RankState], ranks: list[int]) -> dict[str, dict]:
    """Per rank, for the finding's evidence."""
    out: dict[str, dict] = {}
    for r, s in zip(ranks, states):
        out[str(r)] = {"optimizer_step": None if s.step == UNKNOWN else s.step,
                       "resumed_from_step": None if s.start == UNKNOWN else s.start,
                       "lr": None if s.lr != s.lr else s.lr}
    return out


def summary(states: list[RankState], ranks: list[int], named: list[int]) -> str:
    """One line: the named ranks' state first, then the others' (at most 4 ranks)."""
    def one(r: int, s: RankState) -> str:
        step = "no step count" if s.step == UNKNOWN else (
            f"optimizer step {s.step}" + ("" if s.start == UNKNOWN else
                                          f", resumed from {s.start}"))
        lr = "" if s.lr != s.lr else f", lr {s.lr:g}"
        return f"rank {r}: {step}{lr}"

    order = sorted(zip(ranks, states), key=lambda rs: (rs[0] not in named, rs[0]))
    text = "; ".join(one(r, s) for r, s in order[:4])
    return text + (f"; +{len(order) - 4} ranks" if len(order) > 4 else "")
