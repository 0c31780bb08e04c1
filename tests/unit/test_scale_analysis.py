"""Pure scaling analysis: recorded trainer / user-job outputs in, efficiency and cause out.

The fixtures under tests/fixtures/scale/ were recorded on this project's 2-core CPU machine
with `ddpdoctor scale ... --work-dir` (see tests/fixtures/scale/README.md); the planted
faults are the trainer's own injections (straggler@1, slow-data@1).
"""

from pathlib import Path

import pytest

from ddpdoctor.scale.analysis import analyze, findings
from ddpdoctor.scale.lines import format_line, parse_line, parse_lines
from ddpdoctor.scale.measure import (
    NoThroughput,
    RunMeasurement,
    StepSample,
    from_trainer_records,
    from_user_output,
)

FIX = Path(__file__).parents[1] / "fixtures" / "scale"


def trainer_runs(name: str, worlds: list[int], warmup: int = 3) -> list[RunMeasurement]:
    return [from_trainer_records((FIX / name / f"world{w}.jsonl").read_text().splitlines(),
                                 w, warmup) for w in worlds]


def user_runs(name: str, worlds: list[int], warmup: int = 2) -> list[RunMeasurement]:
    return [from_user_output((FIX / name / f"world{w}.log").read_text(), w, warmup)
            for w in worlds]


def test_planted_straggler_is_named_with_its_rank():
    results = analyze(trainer_runs("straggler", [1, 2]))
    two = results[1]
    assert two.cause == "straggler"
    assert two.breakdown.culprit.rank == 1 and not two.breakdown.culprit.by_data
    # the injection sleeps 0.3 s in rank 1's forward
    assert 0.25 < two.breakdown.straggler_s < 0.4
    [f] = findings(results, "weak")
    assert (f.id, f.ranks) == ("STRAGGLER", [1])
    assert f.evidence["per_world"]["2"]["efficiency"] < 0.3
    assert "rank 1" in f.title


def test_planted_slow_data_is_data_on_its_rank():
    results = analyze(trainer_runs("slow-data", [1, 2]))
    two = results[1]
    assert two.cause == "data"
    c = two.breakdown.culprit
    assert c.rank == 1 and c.by_data
    # 4 samples x 0.05 s per sample on rank 1
    assert 0.15 < c.data_excess_s < 0.3
    [f] = findings(results, "weak")
    assert (f.id, f.ranks) == ("DATALOADER_BOTTLENECK", [1])


def test_communication_bound_user_job():
    results = analyze(user_runs("comm-bound", [1, 2]))
    two = results[1]
    assert two.cause == "communication"
    assert two.comm_s > 0.5 * two.lost_s
    [f] = findings(results, "weak")
    assert (f.id, f.ranks) == ("SCALING_COMM_BOUND", [])


def test_oversubscribed_cpu_is_compute_bound_and_says_so():
    runs = trainer_runs("weak124", [1, 2, 4], warmup=5)
    four = analyze(runs)[2]
    assert four.efficiency < 0.8
    # what the split sees: the 4 ranks wait after the forward (the all-reduce needs all
    # four on a core at once; 2 cores)
    assert four.cause == "communication"
    results = analyze(runs, cpus=2, device="cpu")
    assert results[2].cause == "compute" and results[2].oversubscribed
    assert not results[1].oversubscribed
    found = {f.id: f for f in findings(results, "weak", cpus=2)}
    assert "4 ranks on 2 CPU cores" in found["SCALING_COMPUTE_BOUND"].evidence["oversubscribed"]
    assert found["SCALING_COMPUTE_BOUND"].evidence["per_world"].keys() == {"4"}
    # on GPUs (or with 4 cores) the same numbers stay communication
    assert analyze(runs, cpus=4, device="cpu")[2].cause == "communication"


def _run(world: int, rate: float, step_s: float = 0.1) -> RunMeasurement:
    return RunMeasurement(world, "samples/s", [rate] * 5, [StepSample(step_s)] * 5)


@pytest.mark.parametrize("rates,effs", [
    ({1: 100, 2: 180, 4: 200}, [1.0, 0.9, 0.5]),
    ({2: 100, 4: 150, 8: 400}, [1.0, 0.75, 1.0]),   # the baseline is the smallest world
])
def test_efficiency_is_throughput_over_linear(rates, effs):
    results = analyze([_run(w, r) for w, r in rates.items()])
    assert [round(r.efficiency, 3) for r in results] == effs
    assert results[0].world == min(rates)


def test_throughput_only_gives_an_unexplained_finding_without_cause():
    results = analyze([_run(1, 100), _run(2, 100)])
    assert results[1].cause is None
    [f] = findings(results, "weak")
    assert f.id == "SCALING_INEFFICIENT" and "no per-rank times" in f.title
    assert findings(analyze([_run(1, 100), _run(2, 190)]), "weak") == []


def test_jitter_names_no_culprit():
    # the slow rank alternates: noise, not a straggler
    steps = [StepSample(0.2, (0.0, 0.0), (0.1, 0.05) if i % 2 else (0.05, 0.1))
             for i in range(10)]
    base = RunMeasurement(1, "samples/s", [100] * 10, [StepSample(0.1, (0.0,), (0.05,))] * 10)
    m = RunMeasurement(2, "samples/s", [100] * 10, steps)
    two = analyze([base, m])[1]
    assert two.breakdown.culprit is None
    assert two.cause != "straggler"


def test_strong_scaling_ideal_step_shrinks():
    base = RunMeasurement(1, "samples/s", [100] * 3,
                          [StepSample(0.32, (0.01,), (0.1,))] * 3, rank_batch=32)
    two = RunMeasurement(2, "samples/s", [160] * 3,
                         [StepSample(0.2, (0.005, 0.005), (0.05, 0.05))] * 3, rank_batch=16)
    r = analyze([base, two])[1]
    assert r.efficiency == pytest.approx(0.8)
    assert r.ideal_step_s == pytest.approx(0.16)
    # forward halved with the batch (ideal), the rest of the loss is after it: communication
    assert r.cause == "communication"


def test_throughput_line_format_round_trips_and_refuses_garbage():
    line = format_line(1834.25, "samples/s", rank=1, step=7, step_s=0.139, data_s=0.002)
    p = parse_line("[rank1]: 2026-11-24 " + line)
    assert (p.value, p.unit, p.rank, p.step) == (1834.25, "samples/s", 1, 7)
    assert p.times == {"step_s": 0.139, "data_s": 0.002}
    for bad in ("ddpdoctor-throughput: nan samples/s", "ddpdoctor-throughput: inf tokens/s",
                "ddpdoctor-throughput: -3 samples/s", "ddpdoctor-throughput: 12 it/s",
                "ddpdoctor-throughput:", "throughput: 12 samples/s"):
        assert parse_line(bad) is None, bad
    assert parse_line("ddpdoctor-throughput: 5 tokens/s data_s=nan rank=x").times == {}


def test_lines_run_together_by_two_ranks_are_split():
    # recorded: rank 1's line and rank 0's ran together in torchrun's shared stdout
    text = (FIX / "comm-bound" / "world2.log").read_text()
    merged = next(line for line in text.splitlines() if line.count("ddpdoctor-throughput:") > 1)
    a, b = parse_lines(merged)
    assert (a.rank, a.step, b.rank, b.step) == (1, 2, 0, 2)
    assert "compute_s" in a.times and "compute_s" in b.times
    m = from_user_output(text, 2, 0)
    assert len(m.steps) == 12 and m.timed


def test_user_output_without_a_line_is_refused():
    with pytest.raises(NoThroughput, match="printed no"):
        from_user_output("epoch 1 loss 3.2\n", 2, 0)
    with pytest.raises(NoThroughput, match="mixes units"):
        from_user_output("ddpdoctor-throughput: 5 tokens/s\nddpdoctor-throughput: 5 samples/s",
                         1, 0)
    with pytest.raises(NoThroughput):
        from_trainer_records(['{"event": "summary"}', "not json"], 1, 0)


def test_html_report_draws_efficiency_and_breakdown():
    import json

    from ddpdoctor.core.report import Report
    from ddpdoctor.report.page import render_page

    report = Report.from_dict(json.loads((FIX / "straggler" / "report.json").read_text()))
    page = render_page(report)
    assert "scaling efficiency against the smallest world" in page
    assert "communication (est.)" in page and "STRAGGLER" in page
