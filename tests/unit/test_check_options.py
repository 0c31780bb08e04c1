"""CheckOptions (issue #17): one validated dataclass that travels to the ranks as JSON."""

import math

import pytest

from ddpdoctor.check.multinode import torchrun_command
from ddpdoctor.check.options import CheckOptions, OptionsError
from ddpdoctor.check.probes import PROBES


def test_options_travel_as_json_and_come_back_equal():
    opts = CheckOptions(max_bytes=64 << 20, expect_busbw=180.0, master_port=29501,
                        collectives=("all_reduce",))
    assert CheckOptions.from_json(opts.to_json()) == opts
    cmd = torchrun_command(8, 2, 0, "node0:29400", None, ["bandwidth"], None, 60.0, opts)
    assert CheckOptions.from_json(cmd[cmd.index("--opts") + 1]) == opts
    assert cmd[cmd.index("-m", cmd.index("torch.distributed.run")) + 1] == \
        "ddpdoctor.check.worker"


@pytest.mark.parametrize("bad", [{"max_bytes": 10}, {"expect_busbw": math.nan},
                                 {"dl_timeout_s": math.inf}, {"master_port": 70000},
                                 {"iters": 1.5}, {"warmup": True}, {"no_such": 1},
                                 {"collectives": ["all_to_all"]}, {"backend": "mpi"}])
def test_invalid_options_are_refused_with_the_name(bad):
    with pytest.raises(OptionsError, match=next(iter(bad)).split("_")[0]):
        CheckOptions.from_dict(bad)


def test_not_json_is_refused():
    with pytest.raises(OptionsError):
        CheckOptions.from_json("{max_bytes: 1}")
    with pytest.raises(OptionsError):
        CheckOptions.from_json("[1]")


def test_derived_defaults_follow_the_backend():
    assert CheckOptions().bandwidth_max_bytes("gloo") == 16 << 20
    assert CheckOptions().bandwidth_max_bytes("nccl") == 256 << 20
    assert CheckOptions(max_bytes=1 << 30).bandwidth_max_bytes("gloo") == 1 << 30
    assert CheckOptions.coerce({"dl_batches": 2}).dl_batches == 2


def test_every_probe_declares_a_stage_and_its_pure_analysis():
    assert list(PROBES) == ["env", "rendezvous", "reachability", "connectivity", "bandwidth",
                            "dataloader",
                            "gpu", "topology"]
    assert {p.stage for p in PROBES.values()} == {"pre_init", "rank", "parent"}
    for name, probe in PROBES.items():
        assert probe.name == name and probe.group
        assert probe.analyze.__module__ == f"ddpdoctor.check.analysis.{name}"
    check, findings = PROBES["rendezvous"].analyze(
        {0: {"master_addr": "127.0.0.1", "master_port": 1, "resolved": "127.0.0.1",
             "local": True, "port_free": True}}, 2, CheckOptions())
    assert findings == [] and check.status == "ok"
