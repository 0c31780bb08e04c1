"""Pure: which side of a split is the culprit, decided from the fused evidence.

When the ranks split into sides that wait in different places (1 vs 1 on two ranks, k vs
k on a group), counting ranks cannot decide. Each kind of evidence has one small rule that
votes for a side and says how strongly:

- flight recorder (decisive): the rank whose entries leave the job's regular sequence of
  collectives, or that is missing one the sequence predicts (``fr_sequence``);
- stacks (strong): a rank waiting in the collective the job issues every step (DDP's
  gradient all-reduce in backward, FSDP's all-gather / reduce-scatter, the optimizer step)
  does the usual thing; a rank waiting in a checkpoint, evaluation, metrics or logging
  function, or in a barrier outside the step, is the odd one;
- source (strong): a rank whose user frame lies inside a rank-guarded block
  (``if rank == 0``, ``is_main_process``, ``is_global_zero``...);
- steps (strong with 3+ ranks, weak on 1 vs 1): per-rank step counts that disagree
  name the rank that skipped or repeated a step.

The combiner takes the strongest votes; when votes of the same strength disagree, or none
was cast, the answer is "undecided", with what to look at.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from enum import IntEnum

from ddpdoctor.attach.classify import RankState
from ddpdoctor.attach.evidence import HangEvidence
from ddpdoctor.attach.fr_sequence import PARAM_ORDER


class Strength(IntEnum):
    WEAK = 1
    STRONG = 2
    DECISIVE = 3


@dataclass(frozen=True)
class Vote:
    rule: str  # "flight recorder", "stacks", "source", "steps"
    culprits: frozenset[int]
    strength: Strength
    reason: str

    def line(self) -> str:
        ranks = ",".join(map(str, sorted(self.culprits)))
        return f"{self.rule} ({self.strength.name.lower()}): rank {ranks}: {self.reason}"


@dataclass(frozen=True)
class Attribution:
    culprits: tuple[int, ...]  # every candidate when undecided
    decided: bool
    votes: tuple[Vote, ...]
    decided_by: str = ""  # the rule(s) that decided
    look_at: str = ""  # when undecided: what a person should check

    def evidence(self) -> dict:
        ev: dict = {"decided": self.decided, "votes": [v.line() for v in self.votes]}
        if self.decided:
            ev["decided by"] = self.decided_by
        else:
            ev["undecided"] = self.look_at
        return ev


# -- stacks -------------------------------------------------------------------------

_ODD_NAME = re.compile(
    r"(checkpoint|save|consolidate|state_dict|eval|valid|metric|gather_for_metrics|"
    r"^log|_log|logging|report|summar|test_step|predict|on_\w+_(end|start)|"
    r"rank_zero|print|dump)", re.IGNORECASE)
_C10D_CORE = ("torch/distributed/distributed_c10d.py", "torch/distributed/c10d_logger.py")
_FSDP_DIRS = ("torch/distributed/fsdp/", "torch/distributed/_composable/fsdp/")
_OPTIM_DIRS = ("torch/optim/", "torch/distributed/optim/")
_BARRIERS = {"barrier", "monitored_barrier"}
# Training-loop code of frameworks: a collective issued straight from it (not from a user
# hook it calls) runs every step, e.g. Lightning's per-step SIGTERM broadcast.
_LOOP_DIRS = ("lightning/pytorch/loops/", "pytorch_lightning/loops/")


def _leaf(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def _odd_reason(state: RankState) -> str:
    for f in state.frames:
        if f.filename.endswith(_C10D_CORE):
            continue
        leaf = _leaf(f.name)
        if _ODD_NAME.search(leaf):
            return f"waits inside {leaf}() ({f.short}): not part of a training step"
    if state.op in _BARRIERS:
        return f"waits in {state.op} at {state.where or '?'}: a barrier, not a training step"
    return ""


def _usual_reason(state: RankState) -> str:
    if state.op.startswith("backward"):
        return "waits in DDP's gradient all-reduce in backward (every step)"
    for f in state.frames:
        if any(d in f.filename for d in _LOOP_DIRS):
            return (f"waits in a collective of the framework's training loop "
                    f"({_leaf(f.name)}, every step)")
        if any(d in f.filename for d in _FSDP_DIRS):
            return "waits in FSDP's all-gather / reduce-scatter (every step)"
        if any(d in f.filename for d in _OPTIM_DIRS) and _leaf(f.name) == "step":
            return "waits in the optimizer step (every step)"
        if f.filename.endswith("torch/nn/parallel/distributed.py") and \
                _leaf(f.name) in ("forward", "_pre_forward", "_sync_buffers"):
            return "waits in DDP's forward (every step)"
    return ""


def stack_role(state: RankState) -> tuple[int, str]:
    """+1 odd (checkpoint, evaluation, metrics, barrier), -1 usual (the step's own
    collective), 0 unknown; and why."""
    odd = _odd_reason(state)
    if odd:
        return 1, odd
    usual = _usual_reason(state)
    return (-1, usual) if usual else (0, "")


def _side_role(ev: HangEvidence, side: list[int]) -> tuple[int, str]:
    """A side's role when all its ranks agree (1 odd, -1 usual), else 0; and why."""
    states = [s for s in (ev.state(r) for r in side) if s is not None]
    scored = [stack_role(s) for s in states]
    values = {v for v, _ in scored}
    role = values.pop() if len(values) == 1 else 0
    return role, next((why for v, why in scored if v == role and why), "")


def _the_others(why: str) -> str:
    return "the others " + why.replace("waits", "wait")


def by_stacks(ev: HangEvidence, sides: list[list[int]]) -> Vote | None:
    roles = [_side_role(ev, side) for side in sides]
    odd = [i for i, (role, _) in enumerate(roles) if role == 1]
    usual = [i for i, (role, _) in enumerate(roles) if role == -1]
    if len(odd) == 1 and usual and len(usual) + 1 == len(sides):
        why = roles[odd[0]][1] + "; " + _the_others(roles[usual[0]][1])
        return Vote("stacks", frozenset(sides[odd[0]]), Strength.STRONG, why)
    if len(odd) == 1 and not usual:
        return Vote("stacks", frozenset(sides[odd[0]]), Strength.WEAK, roles[odd[0]][1])
    if len(usual) == len(sides) - 1 and not odd:
        i = next(i for i, (role, _) in enumerate(roles) if role != -1)
        return Vote("stacks", frozenset(sides[i]), Strength.WEAK,
                    _the_others(roles[usual[0]][1]) + "; this side waits somewhere else")
    return None


# -- source -------------------------------------------------------------------------

def by_source(ev: HangEvidence, sides: list[list[int]]) -> Vote | None:
    guarded = [i for i, side in enumerate(sides) if all(r in ev.guards for r in side)]
    if len(guarded) != 1 or any(r in ev.guards for i, side in enumerate(sides)
                                if i != guarded[0] for r in side):
        return None
    side = sides[guarded[0]]
    return Vote("source", frozenset(side), Strength.STRONG,
                ev.guards[side[0]].describe() + ": only some ranks run this block")


# -- flight recorder ----------------------------------------------------------------

def by_flight_recorder(ev: HangEvidence, sides: list[list[int]]) -> Vote | None:
    candidates = {r for side in sides for r in side}
    for v in ev.sequences:
        culprits = frozenset(v.culprits) & candidates
        if not culprits or culprits == candidates:
            continue
        return Vote("flight recorder", _whole_sides(culprits, sides), Strength.DECISIVE,
                    v.describe())
    return None


def _whole_sides(ranks: frozenset[int], sides: list[list[int]]) -> frozenset[int]:
    return frozenset(r for side in sides if ranks & set(side) for r in side)


def parameter_order(ev: HangEvidence) -> str:
    """A parameter-order verdict of the sequence rule, when there is one."""
    return next((v.describe() for v in ev.sequences if v.kind == PARAM_ORDER), "")


# -- steps --------------------------------------------------------------------------

def by_steps(ev: HangEvidence, sides: list[list[int]]) -> Vote | None:
    ranks = [r for side in sides for r in side if r in ev.steps]
    counts = Counter(ev.steps[r] for r in ranks)
    if len(counts) < 2 or len(ranks) < 2:
        return None
    if len(ranks) == 2:
        low = min(ranks, key=lambda r: ev.steps[r])
        culprits, strength = frozenset({low}), Strength.WEAK
        why = (f"step counts {_steps_text(ev, ranks)}: rank {low} did fewer steps "
               "(skipped one, or consumed more batches per step)")
    else:
        rare = min(counts.values())
        odd = {r for r in ranks if counts[ev.steps[r]] == rare}
        if len(odd) * 2 >= len(ranks):
            return None
        culprits, strength = frozenset(odd), Strength.STRONG
        why = (f"step counts {_steps_text(ev, ranks)}: these ranks skipped or repeated "
               "a step")
    culprits = _whole_sides(culprits, sides)
    if culprits == frozenset(ranks):
        return None
    return Vote("steps", culprits, strength, why)


def _steps_text(ev: HangEvidence, ranks: list[int]) -> str:
    return ", ".join(f"rank {r}: {ev.steps[r]}" for r in sorted(ranks))


# -- combiner -----------------------------------------------------------------------

RULES = (by_flight_recorder, by_stacks, by_source, by_steps)


def attribute(ev: HangEvidence, sides: list[list[int]]) -> Attribution:
    """The culprit side of ``sides`` (lists of ranks), or every rank when undecided."""
    everyone = tuple(sorted(r for side in sides for r in side))
    votes = tuple(v for v in (rule(ev, sides) for rule in RULES) if v is not None)
    if not votes:
        return Attribution(everyone, False, votes, look_at=_look_at(ev))
    top = max(v.strength for v in votes)
    best = [v for v in votes if v.strength == top]
    choices = {v.culprits for v in best}
    if len(choices) > 1:
        return Attribution(everyone, False, votes, look_at=(
            "the evidence conflicts (" + "; ".join(v.line() for v in best) + "). "
            + _look_at(ev)))
    culprits = choices.pop()
    by = " + ".join(f"{v.rule} ({v.strength.name.lower()})" for v in votes
                    if v.culprits == culprits)
    return Attribution(tuple(sorted(culprits)), True, votes, decided_by=by)


def _look_at(ev: HangEvidence) -> str:
    tips = ["look at each side's innermost user frame: the side that called a collective "
            "the other ranks never call (under a rank check, after the loop, on an "
            "uneven data split) is the culprit"]
    if not ev.has_flight_recorder:
        tips.append("run the job under `ddpdoctor run` (or watch() with DDPDOCTOR_FR_DIR) "
                    "so attach can read Flight Recorder's sequence of collectives")
    return "; ".join(tips)
