"""``ddpdoctor train --vs-plain``: which run is the plain one, and what is printed (pure).
The 2-rank run is in tests/functional/test_train_features.py."""

from __future__ import annotations

import pytest

from ddpdoctor.train.options import configs, worker_parser
from ddpdoctor.train.vs_plain import RunNumbers, comparison, options_text, plain_of


def _rcfg(*argv: str):
    return configs(vars(worker_parser().parse_args(list(argv))))[1]


def test_the_plain_run_drops_every_option_that_trades_memory_or_time():
    rcfg = _rcfg("--strategy", "hsdp", "--vs-plain", "--precision", "fp16",
                 "--activation-checkpointing", "--grad-accum", "2", "--profile", "1")
    name, plain = plain_of("hsdp", rcfg)
    assert name == "fsdp"  # HYBRID_SHARD's plain counterpart: full sharding
    assert (plain.precision, plain.grad_accum, plain.activation_checkpointing,
            plain.cpu_offload, plain.profile) == ("fp32", 1, False, False, 0)
    assert plain.vs_plain  # the baseline measures its last step too
    assert options_text("hsdp", rcfg, plain) == ("hsdp --grad-accum 2 --precision fp16 "
                                                 "--activation-checkpointing")


def test_nothing_to_compare_is_none():
    assert plain_of("ddp", _rcfg("--vs-plain")) is None
    assert plain_of("ddp", _rcfg("--vs-plain", "--comm-hook", "fp16")) is not None


@pytest.mark.parametrize("extra", [["--inject", "crash@1:2"], ["--save-every", "2",
                                                                "--checkpoint-dir", "x"]])
def test_refused_where_the_two_runs_would_differ_in_more_than_the_options(extra):
    with pytest.raises(ValueError, match="--vs-plain trains twice"):
        _rcfg("--vs-plain", "--comm-hook", "fp16", *extra)


def test_the_line_says_each_change_against_the_plain_run():
    mem = {"params_bytes": 2**20, "grads_bytes": 2**20, "optimizer_bytes": 2 * 2**20,
           "activations_bytes": 0.4 * 2**20, "peak_bytes": 3 * 2**20}
    base = dict(mem, activations_bytes=2.4 * 2**20, peak_bytes=4 * 2**20)
    line, rec = comparison("fsdp --activation-checkpointing",
                           RunNumbers("fsdp", 0.15, 3.9273, 10.0, mem),
                           RunNumbers("fsdp", 0.10, 3.9273, 10.0, base))
    assert line == ("[fsdp] fsdp --activation-checkpointing vs plain fsdp: step 150.0 ms vs "
                    "100.0 ms (+50%); peak 3.00 MB vs 4.00 MB (-25%); saved activations "
                    "0.40 MB vs 2.40 MB; params+grads+optimizer 4.00 MB vs 4.00 MB; final "
                    "loss 3.9273 vs 3.9273")
    assert rec["event"] == "vs_plain" and rec["memory"] == [mem, base]
    # unmeasured memory (no meter): time and loss only
    line, _ = comparison("ddp --comm-hook fp16", RunNumbers("ddp", 0.1, 1.0, 5.0, {}),
                         RunNumbers("ddp", 0.1, 1.0, 5.0, {}))
    assert "peak" not in line and "(+0%)" in line
