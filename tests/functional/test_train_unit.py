"""The trainer's pieces without processes: fault specs, options, data order, model split."""

from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from ddpdoctor.train import host_checks, injections
from ddpdoctor.train.config import ModelConfig, RunConfig, check_world
from ddpdoctor.train.injections import ALL_RANKS, INJECTIONS, parse
from ddpdoctor.train.options import configs, to_argv, worker_parser


def test_parse_defaults_and_explicit_rank_step() -> None:
    assert parse("nan") == injections.Injection("nan", 1, 2)
    assert parse("nan@0:3") == injections.Injection("nan", 0, 3)
    assert parse("nan:5") == injections.Injection("nan", 1, 5)
    assert parse("crash@all") == injections.Injection("crash", ALL_RANKS, 2)
    assert parse("unused-param").rank == ALL_RANKS
    assert str(parse("leak@1:4")) == "leak@1:4"


@pytest.mark.parametrize("bad", ["nope", "nan@x", "nan:0", "nan@-3", "nan:two"])
def test_parse_rejects_with_one_line(bad: str) -> None:
    with pytest.raises(ValueError) as e:
        parse(bad)
    assert "\n" not in str(e.value)


def test_every_injection_names_a_catalog_finding() -> None:
    from ddpdoctor.core.catalog import spec

    for s in INJECTIONS.values():
        spec(s.finding)  # raises on an unknown id
        assert s.kind in ("error", "hang", "silent")


def test_inject_list_one_line_each() -> None:
    from ddpdoctor.commands.train import command

    result = CliRunner().invoke(command, ["--inject", "list"])
    assert result.exit_code == 0
    lines = result.output.strip().splitlines()
    assert [ln.split()[0] for ln in lines] == list(INJECTIONS)


@pytest.mark.parametrize("args,why", [
    (["--strategy", "fsdp", "--inject", "unused-param"], "needs a DDP strategy"),
    (["--inject", "nan@5"], "rank 5 does not exist"),
    (["--strategy", "pp", "--layers", "1"], "at least 2 layers"),
    (["--strategy", "tp-dp", "--nproc", "2"], "at least two TP groups"),
    (["--strategy", "tp", "--heads", "3", "--dim", "63"], "not divisible"),
    (["--strategy", "bogus"], "unknown strategy"),
    (["--resume"], "need --checkpoint-dir"),
])
def test_usage_errors_exit_2_before_launch(args: list[str], why: str) -> None:
    from ddpdoctor.commands.train import command

    result = CliRunner().invoke(command, args)
    assert result.exit_code == 2
    assert why in result.output


def test_host_fault_refused_once_before_launch(monkeypatch) -> None:
    """All ranks of `ddpdoctor train` share this environment: the refusal comes from the
    CLI in one line (exit 2), not from a rank behind torchrun's failure report."""
    from ddpdoctor.commands.train import command

    monkeypatch.delenv("GLOO_SOCKET_IFNAME", raising=False)
    result = CliRunner().invoke(command, ["--inject", "slow-link@1:2", "--dry-run"])
    assert result.exit_code == 2
    assert result.output.strip().splitlines() == [
        "ddpdoctor train: --inject slow-link@1:2: set GLOO_SOCKET_IFNAME to the one "
        "interface (not lo) whose egress to throttle"]


def test_dry_run_builds_torchrun_command() -> None:
    from ddpdoctor.commands.train import command

    result = CliRunner().invoke(command, ["--dry-run", "--strategy", "tp-dp", "--inject",
                                          "straggler@2:3"])
    assert result.exit_code == 0
    out = result.output
    assert "-m torch.distributed.run --standalone --nproc-per-node=4 -m ddpdoctor.train" in out
    assert "--strategy tp-dp --inject straggler@2:3" in out


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_help_documents_everything_without_importing_torch() -> None:
    code = ("import sys; from ddpdoctor.cli import main\n"
            "try:\n    main(['train', '--help'])\nexcept SystemExit:\n    pass\n"
            "print('TORCH' if 'torch' in sys.modules else 'NOTORCH')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60).stdout
    assert out.strip().endswith("NOTORCH")
    for word in ["zero3", "reshard_after_forward", "tp-dp", "--size", "tiny", "data-stall",
                 "p2p-deadlock", "--pg-timeout", "--json-log"]:
        assert word in out, word


def test_worker_args_round_trip() -> None:
    values = vars(worker_parser().parse_args(["--strategy", "pp", "--steps", "3",
                                              "--inject", "nan@1:2", "--find-unused"]))
    argv = to_argv(values)
    assert vars(worker_parser().parse_args(argv)) == values
    mcfg, rcfg = configs(values)
    assert rcfg.strategies == ["pp"] and rcfg.steps == 3 and rcfg.find_unused
    assert mcfg == ModelConfig.preset("tiny")


def test_check_world_accepts_the_defaults() -> None:
    mcfg = ModelConfig.preset("tiny")
    check_world(mcfg, RunConfig(strategies=["ddp", "fsdp", "pp", "tp"]), 2)
    check_world(mcfg, RunConfig(strategies=["tp-dp"]), 4)


def test_set_epoch_changes_the_order_and_skipping_it_repeats_it() -> None:
    from ddpdoctor.train.data import Batches, SyntheticTokens, build_loader, sample_indices

    ds = SyntheticTokens(48, 8, 32)
    for call_set_epoch, same in ((True, False), (False, True)):
        loader = build_loader(ds, 8, dp_rank=1, dp_world=2, seed=0)
        b = Batches(loader, call_set_epoch)
        got = [b.next()[2].tolist() for _ in range(6)]  # 3 steps per epoch
        assert (got[:3] == got[3:]) is same
        # the replay the faults use predicts exactly what the loader yields
        assert got == [sample_indices(loader, s, call_set_epoch) for s in range(1, 7)]


def test_ranks_get_disjoint_shards() -> None:
    from ddpdoctor.train.data import SyntheticTokens, build_loader, sample_indices

    ds = SyntheticTokens(64, 8, 32)
    a, b = (sample_indices(build_loader(ds, 8, r, 2, 0), 1) for r in (0, 1))
    assert not set(a) & set(b)


def test_pipeline_stages_keep_full_model_names() -> None:
    from ddpdoctor.train.model import build_model, pipeline_stage

    cfg = ModelConfig.preset("tiny", layers=3)
    full = set(dict(build_model(cfg, 0).named_parameters()))
    s0 = set(dict(pipeline_stage(build_model(cfg, 0), 0, 2).named_parameters()))
    s1 = set(dict(pipeline_stage(build_model(cfg, 0), 1, 2).named_parameters()))
    assert s0 | s1 == full and not s0 & s1
    assert any(n.startswith("tok_emb") for n in s0) and any(n.startswith("head") for n in s1)


def test_single_process_reference_learns() -> None:
    from ddpdoctor.train.reference import reference_losses

    losses = reference_losses(ModelConfig.preset("tiny"), RunConfig(steps=5), dp_world=2)
    assert losses[-1] < losses[0] - 0.3


def test_host_faults_refuse_where_they_would_touch_the_host(monkeypatch) -> None:
    monkeypatch.setattr(host_checks.os, "geteuid", lambda: 0)  # the same as root or not
    slow = [parse("slow-link@1:3")]
    injections.check_host(slow, 0, env={})  # not this rank's fault: nothing to check
    with pytest.raises(ValueError, match="GLOO_SOCKET_IFNAME"):
        injections.check_host(slow, 1, env={})
    with pytest.raises(ValueError, match="GLOO_SOCKET_IFNAME"):
        injections.check_host(slow, 1, env={"GLOO_SOCKET_IFNAME": "lo"})
    monkeypatch.setattr(host_checks, "named_netns", lambda: None)
    with pytest.raises(ValueError, match="refusing to throttle the host's network"):
        injections.check_host(slow, 1, env={"GLOO_SOCKET_IFNAME": "eth0"})
    monkeypatch.setattr(host_checks, "named_netns", lambda: "ddpd-b-1")
    injections.check_host(slow, 1, env={"GLOO_SOCKET_IFNAME": "veth1"})  # allowed there
    oom = [parse("oom@1:2")]
    monkeypatch.setattr(host_checks, "_overcommit_mode", lambda: 1)
    with pytest.raises(ValueError, match="overcommit"):
        injections.check_host(oom, 1, "cpu")
    injections.check_host(oom, 1, "cuda")  # the GPU allocator does not overcommit
    monkeypatch.setattr(host_checks, "_overcommit_mode", lambda: 0)
    injections.check_host(oom, 1, "cpu")


# ---- accumulation, compression, precision, sharding, offload, profiling (no processes)

def _values(*argv: str) -> dict:
    from ddpdoctor.train.options import worker_parser

    return vars(worker_parser().parse_args(list(argv)))


@pytest.mark.parametrize("argv, reason", [
    (["--grad-accum", "3"], "not a multiple of --grad-accum 3"),
    (["--grad-accum", "2", "--strategy", "pp"], "pp already splits"),
    (["--comm-hook", "fp16", "--strategy", "fsdp"], "--comm-hook works with ddp, zero1"),
    (["--cpu-offload", "--strategy", "ddp"], "--cpu-offload works with fsdp"),
    (["--precision", "fp16", "--strategy", "pp"], "loss scaling"),
    (["--precision", "fp16", "--strategy", "tp"], "mix of DTensor and plain"),
])
def test_feature_options_refuse_what_cannot_work(argv: list[str], reason: str) -> None:
    from ddpdoctor.train.options import configs

    with pytest.raises(ValueError, match=reason):
        configs(_values(*argv))


def test_hsdp_needs_two_groups_of_shard_group_ranks() -> None:
    from ddpdoctor.train.config import check_world
    from ddpdoctor.train.options import configs

    mcfg, rcfg = configs(_values("--strategy", "hsdp"))
    check_world(mcfg, rcfg, 4)
    for world in (2, 3, 6 + 1):
        with pytest.raises(ValueError, match="hsdp needs"):
            check_world(mcfg, rcfg, world)


def test_feature_options_reach_the_ranks() -> None:
    from ddpdoctor.train.options import configs, to_argv

    argv = ["--grad-accum", "4", "--comm-hook", "topk", "--topk-ratio", "0.25",
            "--activation-checkpointing", "--profile", "2"]
    assert to_argv(_values(*argv)) == argv
    _, rcfg = configs(_values(*argv))
    assert (rcfg.grad_accum, rcfg.comm_hook, rcfg.topk_ratio, rcfg.profile) == (4, "topk",
                                                                                0.25, 2)
    assert rcfg.activation_checkpointing and not rcfg.cpu_offload


def test_new_injections_need_what_they_act_on() -> None:
    needs_fp16 = [parse("scaler-overflow@1")]
    with pytest.raises(ValueError, match="needs --precision fp16"):
        injections.check_compatible(needs_fp16, "ddp", 2)
    injections.check_compatible(needs_fp16, "fsdp", 2, injections.options_on("fp16"))
    for name in ("accum-skew", "hook-one-rank"):
        with pytest.raises(ValueError, match="needs a DDP strategy"):
            injections.check_compatible([parse(name)], "fsdp", 2)


def test_traced_steps_skip_the_warm_up_step_when_they_can() -> None:
    from ddpdoctor.train.profiling import traced_steps

    assert list(traced_steps(1, 5, 2)) == [2, 3]
    assert list(traced_steps(1, 2, 2)) == [1, 2]
    assert list(traced_steps(1, 3, 10)) == [1, 2, 3]
    assert list(traced_steps(3, 8, 1)) == [4]   # resumed at step 3
    assert list(traced_steps(1, 5, 0)) == []


def test_micro_batches_split_the_batch_in_order() -> None:
    import torch

    from ddpdoctor.train.step import micro_batches

    x, y = torch.arange(8).view(8, 1), torch.arange(8).view(8, 1) + 100
    chunks = micro_batches(x, y, 4)
    assert [c[0].flatten().tolist() for c in chunks] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert torch.equal(torch.cat([c[1] for c in chunks]), y)
    assert micro_batches(x, y, 1)[0][0] is x
    assert [len(c[0]) for c in micro_batches(x, y, 3)] == [3, 3, 2]  # accum-skew: uneven


class _Bucket:
    def __init__(self, buf, grads=None, index=0):
        self._buf, self._grads, self._index = buf, grads or [buf], index

    def buffer(self):
        return self._buf

    def gradients(self):
        return self._grads

    def index(self):
        return self._index


def test_topk_hook_sends_the_largest_and_keeps_the_rest(monkeypatch) -> None:
    """One rank (world 1): the bucket becomes its top-k, the rest waits in the residual and
    is added to the next step's bucket (error feedback)."""
    import torch

    from ddpdoctor.train import comm_hooks

    monkeypatch.setattr(comm_hooks.dist, "get_world_size", lambda group=None: 1)
    monkeypatch.setattr(comm_hooks.dist, "all_gather_into_tensor",
                        lambda out, t, group=None: out.copy_(t))
    state = comm_hooks.TopKState(0.25)
    buf = torch.tensor([0.1, -4.0, 0.2, 3.0, 0.0, 0.5, -0.3, 0.05])
    out = comm_hooks.topk_hook(state, _Bucket(buf)).wait()
    assert out.tolist() == [0, -4.0, 0, 3.0, 0, 0, 0, 0]
    assert state.residuals[0].tolist() == pytest.approx([0.1, 0, 0.2, 0, 0, 0.5, -0.3, 0.05])
    out = comm_hooks.topk_hook(state, _Bucket(torch.full((8,), 0.1))).wait()
    assert out.tolist() == pytest.approx([0, 0, 0.3, 0, 0, 0.6, 0, 0])  # residual + new
    assert comm_hooks.topk_payload(state, _Bucket(buf)) == 2 * (4 + 8)


def test_payload_of_each_hook() -> None:
    import torch

    from ddpdoctor.train import comm_hooks

    w, b = torch.zeros(64, 32), torch.zeros(32)
    bucket = _Bucket(torch.zeros(64 * 32 + 32), [w, b])
    assert comm_hooks._half_payload(None, bucket) == (64 * 32 + 32) * 2

    class _PowerSGD:
        iter, start_powerSGD_iter, matrix_approximation_rank = 0, 2, 1

    state = _PowerSGD()
    assert comm_hooks._powersgd_payload(state, bucket) == (64 * 32 + 32) * 4  # plain first
    state.iter = 2
    assert comm_hooks._powersgd_payload(state, bucket) == ((64 + 32) * 1 + 32) * 4
    meter = comm_hooks.CommMeter(plain=100)
    assert meter.take() == 100  # no hook: DDP's own all-reduce of every gradient
    meter.hooked, meter.bytes = True, 7
    assert (meter.take(), meter.take()) == (7, 0)


def test_scaler_skipping_finding_names_the_rank_that_overflows() -> None:
    from ddpdoctor.core.catalog import CATALOG
    from ddpdoctor.watch.skipped_steps import skipping_finding

    f = skipping_finding(2, 4)
    assert f.id == "GRAD_NONFINITE" and f.ranks == [2] and f.id in CATALOG
    assert f.evidence["backwards_without_step"] == 4
    assert "rank 2's own gradients are non-finite" in f.title
