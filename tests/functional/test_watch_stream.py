"""The watch's event stream and its sinks, without processes: fan-out, de-duplication, a
broken sink, the names findings and metrics are logged under, the Prometheus exposition
(names, labels, loopback), and imports that stay lazy."""

from __future__ import annotations

import subprocess
import sys
import time
import urllib.request

import pytest
from paths import REPO

from ddpdoctor.core.findings import Finding
from ddpdoctor.integrations.common import BufferSink, Emitted, finding_key, scalars
from ddpdoctor.watch.straggler import rank_metrics, scores
from ddpdoctor.watch.stream import EventStream, Sink, StepMetrics


class Recorder(Sink):
    def __init__(self) -> None:
        self.findings: list[tuple[str, int, int]] = []
        self.records: list[StepMetrics] = []

    def finding(self, finding: Finding, step: int, rank: int) -> None:
        self.findings.append((finding.id, step, rank))

    def metrics(self, records: list[StepMetrics]) -> None:
        self.records.extend(records)


class Broken(Sink):
    def finding(self, finding: Finding, step: int, rank: int) -> None:
        raise RuntimeError("a tracker that is down")


def test_stream_fans_out_once_and_survives_a_broken_sink(tmp_path):
    stream = EventStream(str(tmp_path / "ev-{rank}.jsonl"), rank=2, warn=False,
                         log_records=False)
    stream.add(Broken())
    rec = stream.add(Recorder())
    f = Finding("STRAGGLER", "rank 1 is slow", ranks=[1])
    assert stream.finding(f, 7)
    assert not stream.finding(Finding("STRAGGLER", "again", ranks=[1]), 9)  # same id+ranks
    assert stream.finding(Finding("STRAGGLER", "other rank", ranks=[0]), 9)
    assert rec.findings == [("STRAGGLER", 7, 2), ("STRAGGLER", 9, 2)]
    lines = (tmp_path / "ev-2.jsonl").read_text().splitlines()
    assert len(lines) == 2 and '"rank": 2' in lines[0] and '"id": "STRAGGLER"' in lines[0]
    stream.metrics([StepMetrics(1, 10, "check", 5, step_time_s=0.2, straggler_score_s=0.1)])
    assert rec.records[0].values() == {"step_time_s": 0.2, "straggler_score_s": 0.1}


def test_warning_sink_still_warns_with_rank_and_playbook():
    from ddpdoctor.watch.events import DDPDoctorWarning

    stream = EventStream(None, rank=0, log_records=False)
    with pytest.warns(DDPDoctorWarning, match=r"GRAD_NONFINITE \(error, rank 1, step 3\).*"
                                                r"ddpdoctor playbook GRAD_NONFINITE"):
        stream.finding(Finding("GRAD_NONFINITE", "nan", ranks=[1]), 3)


def test_scalar_names_carry_id_and_culprit_ranks():
    f = Finding("GRAD_NONFINITE", "nan", ranks=[1])
    assert finding_key(f) == "ddpdoctor/finding/GRAD_NONFINITE/rank1"
    two = Finding("STRAGGLER", "t", ranks=[0, 3])
    assert finding_key(two) == "ddpdoctor/finding/STRAGGLER/rank0_3"
    recs = [StepMetrics(0, 5, "interval", 5, step_time_s=0.1, loss=2.0),
            StepMetrics(1, 5, "check", 5, step_time_s=0.3)]
    assert scalars([Emitted(f, 5, 0)], recs) == {
        "ddpdoctor/rank0/step_time_s": 0.1, "ddpdoctor/rank0/loss": 2.0,
        "ddpdoctor/rank1/step_time_s": 0.3, "ddpdoctor/finding/GRAD_NONFINITE/rank1": 1.0}


def test_buffer_keeps_metrics_until_a_logging_step():
    buf = BufferSink()
    buf.metrics([StepMetrics(0, 1, "interval", step_time_s=0.1)])
    buf.finding(Finding("STRAGGLER", "slow", ranks=[1]), 4, 0)
    found, recs = buf.drain(with_metrics=False)
    assert [e.finding.id for e in found] == ["STRAGGLER"] and recs == []
    found, recs = buf.drain()
    assert found == [] and [r.step_time_s for r in recs] == [0.1]


def test_straggler_scores_name_the_slow_rank():
    times = {0: [(0.2, 0.0, 0.01)] * 4, 1: [(0.2, 0.0, 0.09)] * 4}
    s = scores(times)
    assert s[1] == pytest.approx(0.08) and s[0] == pytest.approx(-0.08)
    recs = rank_metrics(10, times, 4)
    assert [(r.rank, r.source, r.steps) for r in recs] == [(0, "check", 4), (1, "check", 4)]
    assert recs[1].compute_s == pytest.approx(0.09)
    assert scores({0: [(0.2, 0.0, 0.01)]}) == {}  # one rank: no peers to compare with


def test_prometheus_exposition_names_and_labels():
    from prometheus_client import CollectorRegistry, generate_latest
    from prometheus_client.parser import text_string_to_metric_families

    from ddpdoctor.watch.prometheus import PrometheusSink

    reg = CollectorRegistry()
    sink = PrometheusSink(reg, host="h1", job="j")
    sink.metrics([StepMetrics(0, 20, "interval", 10, step_time_s=0.5, memory_mb=2.0),
                  StepMetrics(1, 20, "check", 10, step_time_s=9.0, straggler_score_s=0.3)])
    sink.finding(Finding("STRAGGLER", "slow", ranks=[1]), 20, 0)
    fams = {f.name: f for f in text_string_to_metric_families(generate_latest(reg).decode())}
    step = {s.labels["rank"]: s.value for s in fams["ddpdoctor_step_time_seconds"].samples}
    assert step == {"0": 0.5}  # rank 1's own endpoint exports rank 1's step time
    [mem] = fams["ddpdoctor_memory_rss_bytes"].samples
    assert mem.value == 2 * 2**20 and mem.labels == {"rank": "0", "host": "h1", "job": "j"}
    [score] = fams["ddpdoctor_straggler_score_seconds"].samples
    assert score.labels["rank"] == "1" and score.value == 0.3
    assert fams["ddpdoctor_findings"].type == "counter"
    [found] = [s for s in fams["ddpdoctor_findings"].samples if s.name.endswith("_total")]
    assert found.labels == {"rank": "0", "host": "h1", "job": "j", "id": "STRAGGLER",
                            "severity": "warning", "culprit_ranks": "1"}
    assert [s.value for s in fams["ddpdoctor_steps"].samples if s.name.endswith("_total")] \
        == [10.0]


def test_watch_serves_metrics_on_loopback(tmp_path):
    import torch
    from torch import nn

    import ddpdoctor
    from ddpdoctor.watch import prometheus

    model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    h = ddpdoctor.watch(model, opt, every=5, metrics_port=0, heartbeat_interval_s=0.1,
                        events_path=str(tmp_path / "ev.jsonl"))
    try:
        for _ in range(12):
            model(torch.randn(4, 8)).sum().backward()
            opt.step()
            opt.zero_grad()
        time.sleep(0.4)
        assert prometheus._server["server"].server_address[0] == "127.0.0.1"
        text = urllib.request.urlopen(h.metrics_url, timeout=5).read().decode()
    finally:
        h.close()
    assert h.metrics_url.startswith("http://127.0.0.1:")
    assert 'ddpdoctor_step{host=' in text and 'rank="0"' in text
    assert "ddpdoctor_grad_norm{" in text and "ddpdoctor_heartbeat_age_seconds{" in text


def test_metrics_port_is_validated():
    from ddpdoctor.watch.config import from_env

    with pytest.raises(ValueError, match="DDPDOCTOR_METRICS_PORT"):
        from_env({"DDPDOCTOR_METRICS_PORT": "70000"})
    assert from_env({"DDPDOCTOR_METRICS_PORT": "9400"}).metrics_port == 9400
    assert from_env({}).metrics_host == "127.0.0.1"


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_importing_ddpdoctor_imports_no_framework():
    code = ("import sys, ddpdoctor, ddpdoctor.watch, ddpdoctor.integrations, "
            "ddpdoctor.integrations.common; "
            "bad = [m for m in ('lightning', 'transformers', 'accelerate', 'prometheus_client')"
            " if m in sys.modules]; print(bad); sys.exit(1 if bad else 0)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_grafana_dashboard_queries_only_exported_metrics():
    import json
    import re

    from ddpdoctor.watch.prometheus import GAUGES

    exported = {name for name, _, _ in GAUGES.values()} | {
        "ddpdoctor_step", "ddpdoctor_steps_total", "ddpdoctor_findings_total"}
    dash = json.loads((REPO / "docs" / "grafana-dashboard.json")
                      .read_text())
    exprs = [t["expr"] for p in dash["panels"] for t in p["targets"]]
    used = {m for e in exprs for m in re.findall(r"\bddpdoctor_[a-z_]+", e)}
    assert used and used <= exported, used - exported
    assert any(p["type"] == "heatmap" and "step_time" in p["targets"][0]["expr"]
               for p in dash["panels"])
    assert any("ddpdoctor_findings_total" in e for e in exprs)
