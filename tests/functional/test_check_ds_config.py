"""`check --ds-config`: every rule of the DeepSpeed config table, without processes."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from ddpdoctor.check.dsconfig.analyze import analyze
from ddpdoctor.check.dsconfig.load import facts_of, read
from ddpdoctor.check.dsconfig.rules import RULES, JobFacts
from ddpdoctor.core.errors import DoctorError, ExitCode

GOOD = {"train_micro_batch_size_per_gpu": 4, "gradient_accumulation_steps": 2,
        "train_batch_size": 16, "bf16": {"enabled": True},
        "zero_optimization": {"stage": 2, "offload_optimizer": {"device": "cpu"}}}


def rules_broken(cfg: dict, job: JobFacts = JobFacts(world_size=2)) -> dict[str, str]:
    return {f.evidence["rule"]: f.severity for f in analyze(facts_of(cfg), job)}


def test_a_consistent_config_passes_every_rule():
    assert rules_broken(GOOD) == {}


def test_every_rule_names_its_deepspeed_source():
    names = [r.name for r in RULES]
    assert len(names) == len(set(names))
    for r in RULES:
        assert r.source.startswith(("https://github.com/deepspeedai/DeepSpeed/",
                                    "https://www.deepspeed.ai/", "https://huggingface.co/"))
        assert r.severity in ("error", "warning")


@pytest.mark.parametrize("change,rule,severity", [
    ({"fp16": {"enabled": True}}, "fp16_and_bf16", "error"),
    ({"fp16": {"enabled": "true"}}, "fp16_and_bf16", "error"),  # pydantic reads "true"
    ({"zero_optimization": {"stage": 0, "offload_optimizer": {"device": "cpu"}}},
     "offload_optimizer_stage0", "error"),
    ({"zero_optimization": {"stage": 2, "offload_param": {"device": "nvme"}}},
     "offload_param_below_stage3", "error"),
    ({"zero_optimization": {"stage": 1, "offload_optimizer": {"device": "cpu", "ratio": 0.3}}},
     "partial_offload_below_stage3", "error"),
    ({"zero_optimization": {"stage": 4}}, "zero_stage_range", "error"),
    ({"train_batch_size": 32}, "batch_arithmetic", "error"),
    ({"gradient_accumulation_steps": 0}, "positive_sizes", "error"),
    ({"gradient_clipping": "auto"}, "auto_outside_hf", "error"),
])
def test_each_contradiction_is_named(change, rule, severity):
    assert rules_broken({**GOOD, **change}).get(rule) == severity


@pytest.mark.parametrize("fp16,rule,severity", [
    ({"enabled": True, "loss_scale": 128}, "fixed_fp16_loss_scale", "warning"),
    ({"enabled": True, "initial_scale_power": 32}, "initial_scale_power_extreme", "warning"),
    ({"enabled": True, "initial_scale_power": 4}, "initial_scale_power_extreme", "warning"),
    ({"enabled": True, "min_loss_scale": 0}, "dynamic_scaler_floor", "error"),
    ({"enabled": True, "loss_scale_window": 0}, "dynamic_scaler_floor", "error"),
    ({"enabled": True, "fp16_master_weights_and_grads": True}, None, None),  # stage 2: fine
])
def test_fp16_loss_scaling(fp16, rule, severity):
    cfg = {**GOOD, "bf16": {"enabled": False}, "fp16": fp16}
    broken = rules_broken(cfg)
    assert (broken.get(rule) if rule else broken) == (severity if rule else {})


def test_the_default_dynamic_scale_and_a_static_bf16_run_are_fine():
    assert rules_broken({**GOOD, "bf16": {"enabled": False}, "fp16": {"enabled": True,
                                                                     "loss_scale": 0}}) == {}


def test_auto_values_are_fine_for_the_hf_trainer():
    cfg = {**GOOD, "train_batch_size": "auto", "gradient_clipping": "auto"}
    assert "auto_outside_hf" in rules_broken(cfg)
    assert rules_broken(cfg, JobFacts(world_size=2, auto_filled=True)) == {}


def test_batch_without_a_world_size_is_checked_against_itself():
    job = JobFacts()
    assert rules_broken({**GOOD, "train_batch_size": 24}, job) == {}  # 24 = 4 x 2 x 3 ranks
    assert rules_broken({**GOOD, "train_batch_size": 20}, job) == {"batch_arithmetic": "error"}


def test_buckets_against_the_device_memory():
    """HF's guide: 5e8 x 2 B x 2 x 4.5 = 9 GB with overlap_comm, too much for an 8 GB GPU."""
    cfg = {**GOOD, "zero_optimization": {"stage": 2, "overlap_comm": True,
                                         "reduce_bucket_size": 5e8,
                                         "allgather_bucket_size": 5e8}}
    small = JobFacts(world_size=2, device_mem=8 << 30)
    assert rules_broken(cfg, small) == {"buckets_vs_memory": "warning"}
    assert rules_broken(cfg, JobFacts(world_size=2, device_mem=80 << 30)) == {}
    cfg["zero_optimization"].update(reduce_bucket_size=2e8, allgather_bucket_size=2e8,
                                    overlap_comm=False)
    assert rules_broken(cfg, small) == {}


def test_bad_files_are_one_line_usage_errors(tmp_path):
    cases = {"missing.json": None, "broken.json": '{"a": 1,', "list.json": "[1, 2]",
             "nan.json": '{"train_batch_size": NaN}'}
    for name, text in cases.items():
        path = tmp_path / name
        if text is not None:
            path.write_text(text)
        with pytest.raises(DoctorError) as e:
            read(str(path))
        assert e.value.exit_code == ExitCode.USAGE and "\n" not in str(e.value), name


def test_duplicate_keys_are_refused_as_deepspeed_does(tmp_path):
    path = tmp_path / "dup.json"
    path.write_text('{"train_batch_size": 8, "train_batch_size": 16}')
    f = read(str(path))
    assert f.duplicates == ("train_batch_size",)
    assert "duplicate_keys" in {x.evidence["rule"] for x in analyze(f, JobFacts())}


def _cli(*args: str) -> subprocess.CompletedProcess:
    code = ("import sys, runpy; sys.argv = ['ddpdoctor', *sys.argv[1:]]\n"
            "try:\n    runpy.run_module('ddpdoctor', run_name='__main__')\n"
            "finally:\n    print('TORCH' if 'torch' in sys.modules else 'NOTORCH', "
            "file=sys.stderr)")
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True,
                          text=True, timeout=60)


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_cli_checks_the_config_alone_without_torch(tmp_path):
    cfg = tmp_path / "ds.json"
    cfg.write_text(json.dumps({**GOOD, "fp16": {"enabled": True}}))
    out = tmp_path / "r.json"
    res = _cli("check", "--ds-config", str(cfg), "--world-size", "2", "--json", str(out))
    assert res.returncode == 1, res.stdout + res.stderr
    assert res.stderr.strip().endswith("NOTORCH")
    report = json.loads(out.read_text())
    assert [(f["id"], f["evidence"]["rule"]) for f in report["findings"]] == [
        ("DS_CONFIG_INVALID", "fp16_and_bf16")]
    bad = _cli("check", "--ds-config", str(tmp_path / "nope.json"))
    assert bad.returncode == 2
    assert bad.stderr.splitlines()[0] == (f"ddpdoctor check: --ds-config {tmp_path}/nope.json: "
                                          "no such file")
