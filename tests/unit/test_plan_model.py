"""`plan`'s arithmetic without processes: sizes, shapes, the per-strategy formulas, fit."""

from __future__ import annotations

import pytest

from ddpdoctor.plan import PRECISIONS, Setup, advice_for_oom, best, estimate, plan
from ddpdoctor.plan.model import from_module, from_params, from_preset
from ddpdoctor.plan.units import parse_count, parse_size

GB = 10**9


@pytest.mark.parametrize("text,expected", [
    ("80G", 80 * 2**30), ("80GiB", 80 * 2**30), ("80gib", 80 * 2**30), ("80GB", 80 * 10**9),
    ("81920M", 80 * 2**30), ("1.5T", int(1.5 * 2**40)), ("1024", 1024),
])
def test_sizes_parse_strictly(text: str, expected: int) -> None:
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["nan", "inf", "-1G", "0", "80X", "G", "", "80 G B", "1e999G"])
def test_bad_sizes_are_refused(text: str) -> None:
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize("text,expected", [("7e9", 7 * 10**9), ("7B", 7 * 10**9),
                                           ("350M", 350 * 10**6), ("1.3e9", 1_300_000_000)])
def test_counts(text: str, expected: int) -> None:
    assert parse_count(text) == expected


def test_preset_shape_is_the_trainers_gpt_parameter_for_parameter() -> None:
    torch = pytest.importorskip("torch")
    from ddpdoctor.train.config import ModelConfig
    from ddpdoctor.train.model import GPT

    for size in ("tiny", "small"):
        with torch.device("meta"):
            real = sum(p.numel() for p in GPT(ModelConfig.preset(size)).parameters())
        assert from_preset(size).params == real


def test_7b_shape_and_the_zero1_worked_example() -> None:
    """The example of docs/plan.md: mixed precision Adam, 7B on 4 GPUs. ZeRO-1 keeps 2+2 bytes of
    weights and gradients whole and shards the 12 bytes of optimizer state: 28 + 21 = 49 GB
    (a widely read guide says 28 GB, which is ZeRO-3's number)."""
    shape = from_params(7 * 10**9)
    assert shape.params == 7 * 10**9
    assert (shape.layers, shape.dim, shape.heads) == (32, 4096, 32)
    setup = Setup(world=4, precision=PRECISIONS["mixed"])
    states = {s: estimate(s, shape, setup)[0].model_states / GB
              for s in ("ddp", "zero1", "zero2", "zero3")}
    assert states["ddp"] == pytest.approx(112)
    assert states["zero1"] == pytest.approx(49)
    assert states["zero3"] == pytest.approx(28)
    # FSDP2's zero2 shards the resting weights too; the gathered copy is in the buffers
    z2 = estimate("zero2", shape, setup)[0]
    assert z2.model_states / GB == pytest.approx(28)
    assert z2.buffers >= shape.params * 2


def test_tp_and_pp_split_what_the_trainer_splits() -> None:
    shape = from_preset("small")
    setup = Setup(world=2, precision=PRECISIONS["fp32"], batch_size=8)
    tp = estimate("tp", shape, setup)[0]
    split = shape.layers * shape.block_tp_params
    assert tp.params == shape.params - split / 2
    stages = estimate("pp", shape, setup)
    assert [r.ranks for r in stages] == [[0], [1]]
    assert sum(r.params for r in stages) == shape.params
    assert stages[0].params - shape.embed_params == stages[1].params - shape.head_params


def test_offload_moves_states_to_the_host() -> None:
    shape = from_params(7 * 10**9)
    on = estimate("zero3", shape, Setup(world=8, precision=PRECISIONS["mixed"], offload=True))[0]
    off = estimate("zero3", shape, Setup(world=8, precision=PRECISIONS["mixed"]))[0]
    assert on.model_states == 0 and on.host == pytest.approx(off.model_states)


def test_checkpointing_cuts_activations() -> None:
    shape = from_params(7 * 10**9)
    full = estimate("ddp", shape, Setup(world=8, precision=PRECISIONS["mixed"], batch_size=4))
    ckpt = estimate("ddp", shape, Setup(world=8, precision=PRECISIONS["mixed"], batch_size=4,
                                        checkpointing=True))
    assert ckpt[0].activations < full[0].activations / 5


def test_cheapest_that_fits_comes_first_with_its_command() -> None:
    shape = from_params(7 * 10**9)
    setup = Setup(world=8, precision=PRECISIONS["mixed"], reserve=2**30)
    plans = plan(shape, setup, gpu_mem=80 * 2**30)
    good = best(plans)
    assert good is plans[0] and good.strategy == "zero1"      # ddp needs ~140 GiB
    assert next(sp for sp in plans if sp.strategy == "ddp").fits is False
    assert good.command.startswith("ddpdoctor train --nproc 8 --strategy zero1 --layers 32")
    assert best(plan(shape, setup, gpu_mem=8 * 2**30)) is None


def test_a_strategy_that_cannot_split_says_why() -> None:
    shape = from_preset("tiny")  # 2 layers, 4 heads
    plans = plan(shape, Setup(world=8, precision=PRECISIONS["fp32"]), ["pp", "tp"])
    assert all(sp.unsupported and not sp.ranks for sp in plans)


def test_advice_for_oom_names_the_need_and_a_fix() -> None:
    adv = advice_for_oom(7 * 10**9, 8, "ddp", 80 * 2**30)
    assert adv["strategy"] == "zero1"
    assert adv["evidence"]["predicted_ddp_per_rank"].endswith("GiB")
    assert adv["command"].startswith("ddpdoctor plan --params 7e+09 --nproc 8 --gpu-mem 80G")
    assert "--strategy zero1" in adv["fix"]
    none = advice_for_oom(70 * 10**9, 2, "ddp", 24 * 2**30)
    assert none["strategy"] is None and none["fix"] == ""


def tiny_gpt():  # a --model factory for the test below
    from ddpdoctor.train.config import ModelConfig
    from ddpdoctor.train.model import GPT

    return GPT(ModelConfig.preset("small"))


def test_module_on_the_meta_device_counts_like_the_preset() -> None:
    pytest.importorskip("torch")
    shape = from_module("test_plan_model:tiny_gpt", seq=128)
    ref = from_preset("small")
    assert shape.params == ref.params
    assert (shape.layers, shape.dim) == (ref.layers, ref.dim)
    assert shape.block_params == ref.block_params
    with pytest.raises(ValueError, match="expected module.path:factory"):
        from_module("nocolon")
    with pytest.raises(ValueError):
        from_module("no_such_module_xyz:f")


def test_cublas_workspaces_by_gpu_generation_and_setting() -> None:
    from ddpdoctor.plan.workspace import DEFAULT, per_handle, step_bytes

    # torch's defaults (pytorch test/test_cuda.py): 32 MiB on Hopper, :4096:2:16:8 before
    assert per_handle((9, 0), {}) == 32 * 2**20
    assert per_handle((8, 0), {}) == (2 * 4096 + 8 * 16) * 2**10
    assert per_handle(None, {}) == (2 * 4096 + 8 * 16) * 2**10
    assert per_handle((9, 0), {"CUBLAS_WORKSPACE_CONFIG": ":16:8"}) == 128 * 2**10
    assert per_handle((9, 0), {"CUBLAS_WORKSPACE_CONFIG": ":0:0"}) == 0
    assert per_handle((9, 0), {"CUBLAS_WORKSPACE_CONFIG": "junk"}) == 32 * 2**20
    # the forward's thread and autograd's backward thread: measured on an H200
    assert step_bytes((9, 0), {}) == DEFAULT == 64 * 2**20


def test_the_workspaces_are_buffers_inside_the_allocator() -> None:
    shape = from_preset("small")
    bare = Setup(world=1, precision=PRECISIONS["amp"])
    ws = Setup(world=1, precision=PRECISIONS["amp"], workspace=64 * 2**20)
    a, b = estimate("ddp", shape, bare)[0], estimate("ddp", shape, ws)[0]
    assert b.buffers - a.buffers == 64 * 2**20 and b.subtotal - a.subtotal == 64 * 2**20
    assert any("cuBLAS workspaces" in n for n in b.notes)
