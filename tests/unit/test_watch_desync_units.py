"""The desync check's pure parts, no processes: what is compared when (Join lag, missed
optimizer updates, no_sync), whose training state differs (optimizer step, lr), DTensors
that are whole copies, groups that reduce nothing, and the Join hook wrapper."""

from __future__ import annotations

from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

import pytest
from lazy_torch import torch

from ddpdoctor.watch import join as join_hooks
from ddpdoctor.watch import train_state
from ddpdoctor.watch.desync import DesyncCheck, Head, _replicated, not_comparable
from ddpdoctor.watch.exchange import Exchange
from ddpdoctor.watch.join import JoinTracker, stateful
from ddpdoctor.watch.steps import StepShape
from ddpdoctor.watch.train_state import UNKNOWN, RankState, odd_state

NAN = float("nan")


def _head(lag: int = 0, missed: int = 0, synced: bool = True) -> Head:
    return Head(1, synced, lag, missed, RankState(UNKNOWN, UNKNOWN, 0.1))


# -- what must be equal now


def test_comparable_only_without_lag_sync_or_missed_updates():
    assert not_comparable([_head(), _head()], [0, 1]) is None
    assert "no_sync" in not_comparable([_head(), _head(synced=False)], [0, 1])
    why = not_comparable([_head(lag=2), _head()], [0, 1])
    assert why.startswith("rank 0 sat out steps in DDP's Join")
    # a Join ended (no lag) but rank 0's momentum missed 2 updates: may differ until the
    # next Join's final sync
    assert not_comparable([_head(missed=2), _head()], [0, 1]).startswith(
        "the optimizer state (momentum, Adam moments) of rank 0 (2) missed")
    assert not_comparable([_head(missed=2), _head(missed=2)], [0, 1]) is None


def test_join_tracker_counts_lag_and_missed_updates():
    t = JoinTracker()
    sgd = torch.optim.SGD([torch.nn.Parameter(torch.ones(2))], lr=0.1)
    t.shadow_step(sgd)  # no per-step state: nothing missed
    t.shadow_step(sgd)
    assert (t.lag, t.missed, t.shadowed) == (2, 0, 2)
    t.synced()
    assert (t.lag, t.shadowed) == (0, 2)
    p = torch.nn.Parameter(torch.ones(2))
    mom = torch.optim.SGD([p], lr=0.1, momentum=0.9)
    p.grad = torch.ones(2)
    mom.step()
    assert stateful(mom) and not stateful(sgd) and not stateful(None)
    # no state yet (never stepped): its settings say it will keep some
    assert stateful(torch.optim.Adam([torch.nn.Parameter(torch.ones(1))]))
    t.shadow_step(mom)
    assert (t.lag, t.missed, t.shadowed) == (1, 1, 3)


# -- whose training state differs


def _st(start: int, lr: float, own: int = 5) -> RankState:
    return RankState(start + own if start != UNKNOWN else UNKNOWN, start, lr)


def test_training_state_majority_names_the_odd_rank():
    v = odd_state([_st(100, 1e-3), _st(100, 1e-3), _st(40, 1e-2)], [0, 1, 2])
    assert v.ranks == [2] and v.decided
    assert odd_state([_st(100, 1e-3)] * 2, [0, 1]) is None
    assert odd_state([_st(UNKNOWN, 0.1)] * 2, [0, 1]) is None


def test_training_state_fresh_optimizer_in_a_resumed_job_is_named():
    v = odd_state([_st(6, 1.25e-3), _st(0, 1e-2)], [0, 1])
    assert v.ranks == [1] and v.decided and "did not load the optimizer state" in v.why
    assert v.headline == "did not resume the optimizer state"


def test_training_state_two_resumed_ranks_cannot_be_decided():
    v = odd_state([_st(60, 1e-3), _st(40, 1e-3)], [0, 1])
    assert v.ranks == [0, 1] and not v.decided and "different optimizer steps" in v.why
    v = odd_state([_st(UNKNOWN, 1e-3), _st(UNKNOWN, 1e-2)], [0, 1])
    assert v.ranks == [0, 1] and not v.decided and "different learning rates" in v.why


def test_training_state_read_from_a_real_optimizer():
    p = torch.nn.Parameter(torch.ones(2))
    adam = torch.optim.Adam([p], lr=0.01)
    for _ in range(3):
        p.grad = torch.ones(2)
        adam.step()
    assert train_state.read(adam, own_steps=1) == RankState(3, 2, 0.01)
    assert train_state.read(adam, own_steps=5).start == UNKNOWN  # count older than the watch
    sgd = torch.optim.SGD([p], lr=0.5)
    assert train_state.read(sgd, own_steps=1) == RankState(UNKNOWN, UNKNOWN, 0.5)
    assert train_state.read(None, 0).step == UNKNOWN


# -- replicated tensors


@dataclass
class _FakeDTensor:
    placements: tuple
    device_mesh: Any


class Shard:  # named like torch's placements: the check reads the type name
    pass


class Replicate:
    pass


def test_shard_over_a_size_one_mesh_dimension_is_a_whole_copy():
    mesh = SimpleNamespace
    assert _replicated(torch.ones(2))
    assert _replicated(_FakeDTensor((Shard(),), mesh(shape=(1,))))
    assert _replicated(_FakeDTensor((Replicate(), Shard()), mesh(shape=(2, 1))))
    assert not _replicated(_FakeDTensor((Shard(),), mesh(shape=(2,))))
    assert not _replicated(_FakeDTensor((Replicate(), Shard()), mesh(shape=(2, 2))))


# -- the check end to end on fake ranks: pack on each, analyze the rows


@dataclass
class _Sink:
    events: list = field(default_factory=list)

    def write(self, record: dict, step: int) -> None:
        self.events.append((step, record))


class _Rank:
    """What the desync check reads from a watcher, for one rank."""

    def __init__(self, model: torch.nn.Module, opt: Any = None, solo: str | None = None):
        self.named_params = list(model.named_parameters())
        self.named_buffers = list(model.named_buffers())
        self.ddp = None
        self.steps = SimpleNamespace(last=StepShape(1, True))
        self.join = JoinTracker()
        self.optimizer, self.stepping_optimizer = opt, None
        self.step = 0
        self.sink = _Sink()
        self.solo = solo
        self.world = 2

    def peer_groups(self, same_model: bool = False) -> list[list[int]]:
        return [list(range(self.world))]

    def solo_groups(self, ranks: list[int]) -> str | None:
        return self.solo


def _model(seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Linear(4, 2)


def _analyze(ranks: list[_Rank], step: int) -> list:
    checks = [DesyncCheck() for _ in ranks]  # one per rank: each packs its own tensors
    for c, r in zip(checks, ranks):
        c.attach(r)
    rows = torch.stack([c.pack(r, step) for c, r in zip(checks, ranks)])
    ranks[0].world = len(ranks)
    return checks[0].analyze(ranks[0], step, rows), ranks[0].sink.events


def test_lagging_rank_in_a_join_is_not_compared_and_says_why():
    a, b = _Rank(_model(0)), _Rank(_model(1))
    a.join.lag = 2
    findings, events = _analyze([a, b], 6)
    assert findings == []
    assert "rank 0 sat out steps in DDP's Join" in events[0][1]["message"]


def test_differing_replicas_without_state_evidence_name_both():
    findings, _ = _analyze([_Rank(_model(0)), _Rank(_model(1))], 10)
    [f] = findings
    assert (f.id, f.ranks) == ("PARAM_DESYNC", [0, 1]) and "no majority" in f.title


def _adam(model: torch.nn.Module, steps: int, lr: float) -> torch.optim.Adam:
    opt = torch.optim.Adam(model.parameters(), lr=lr)
    for _ in range(steps):
        for p in model.parameters():
            p.grad = torch.ones_like(p)
        opt.step()
    return opt


def test_rank_that_did_not_resume_its_optimizer_is_named():
    m0, m1 = _model(0), _model(1)
    a, b = _Rank(m0, _adam(m0, 8, 1e-3)), _Rank(m1, _adam(m1, 2, 1e-2))
    a.step = b.step = 2  # the watch saw 2 steps: rank 0 resumed from 6, rank 1 from 0
    [f], _ = _analyze([a, b], 2)
    assert (f.id, f.ranks) == ("PARAM_DESYNC", [1])
    assert f.title.startswith("rank 1 did not resume the optimizer state (rank 1: "
                              "optimizer step 2, resumed from 0, lr 0.01; rank 0: "
                              "optimizer step 8, resumed from 6, lr 0.001)")
    assert f.evidence["training_state"]["0"] == {"optimizer_step": 8,
                                                 "resumed_from_step": 6, "lr": 1e-3}


def test_three_ranks_name_the_one_that_resumed_elsewhere():
    models = [_model(0), _model(0), _model(0)]
    opts = [_adam(models[0], 8, 1e-3), _adam(models[1], 8, 1e-3), _adam(models[2], 5, 1e-3)]
    ranks = [_Rank(m, o) for m, o in zip(models, opts)]
    for r in ranks:
        r.step = 2
    [f], _ = _analyze(ranks, 2)
    assert (f.id, f.ranks) == ("PARAM_DESYNC", [2])
    assert f.title.startswith("rank 2 resumed different training state (rank 2: optimizer "
                              "step 5, resumed from 3, lr 0.001; rank 0: optimizer step 8")
    assert "why both" not in f.evidence


def test_group_that_reduces_nothing_is_never_reduced():
    solo = "the parameters' DeviceMesh ('dp'=1) spans only its own rank"
    [f], _ = _analyze([_Rank(_model(0), solo=solo), _Rank(_model(1), solo=solo)], 1)
    assert (f.id, f.ranks) == ("PARAM_DESYNC", [0, 1])
    assert f.title.startswith("gradients are never reduced across ranks: " + solo)
    assert "mesh" in f.evidence["fix"]


def test_exchange_solo_groups_need_every_rank_alone():
    ex = Exchange(SimpleNamespace(), [])
    ex.solo, ex.solo_text = [True, True], "DDP's process group holds only its own rank"
    assert ex.solo_groups([0, 1]) == "DDP's process group holds only its own rank"
    assert ex.solo_groups([0]) is None
    ex.solo = [True, False]
    assert ex.solo_groups([0, 1]) is None


# -- the Join hook wrapper


class _FakeDDP:
    def __init__(self) -> None:
        self.require_forward_param_sync = True
        self.calls: list[str] = []

    def join_hook(self, **kwargs: Any) -> Any:
        ddp = self

        class Hook:
            def main_hook(self) -> None:
                ddp.calls.append("main")

            def post_hook(self, is_last_joiner: bool) -> None:
                ddp.calls.append(f"post {is_last_joiner}")

        return Hook()


def test_join_hook_wrapper_counts_synchronised_shadow_iterations():
    ddp = _FakeDDP()
    seen: list[str] = []
    w = SimpleNamespace(ddp=ddp, hooks=SimpleNamespace(safe=lambda fn: fn),
                        on_shadow_step=lambda: seen.append("step"),
                        on_join_end=lambda: seen.append("end"))
    join_hooks.install(w)
    join_hooks.install(w)  # once
    hook = ddp.join_hook()
    hook.main_hook()
    ddp.require_forward_param_sync = False  # the others are inside no_sync: no step ends
    hook.main_hook()
    hook.post_hook(False)
    assert ddp.calls == ["main", "main", "post False"] and seen == ["step", "end"]
    join_hooks.remove(w)
    assert "join_hook" not in vars(ddp)
    assert ddp.join_hook().__class__.__name__ == "Hook"


def test_an_optimizer_in_the_join_steps_itself():
    opt = SimpleNamespace(_join_config=SimpleNamespace(enable=True))
    assert join_hooks.steps_itself(opt)
    assert not join_hooks.steps_itself(SimpleNamespace(_join_config=SimpleNamespace(
        enable=False)))
    assert not join_hooks.steps_itself(torch.optim.SGD([torch.nn.Parameter(torch.ones(1))],
                                                       lr=0.1))
    assert not join_hooks.steps_itself(None)


@pytest.mark.parametrize("lr", [0.1, NAN])
def test_summary_names_the_named_ranks_first(lr):
    text = train_state.summary([_st(6, 1e-3), _st(0, lr)], [0, 1], [1])
    assert text.startswith("rank 1: optimizer step 5, resumed from 0")
    assert text.endswith("rank 0: optimizer step 11, resumed from 6, lr 0.001")
