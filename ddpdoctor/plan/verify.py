"""Prediction against measurement: the trainer's per-rank bytes next to the plan's.

Pure: takes the ``rank_memory`` lists of the trainer's summary records (see
``ddpdoctor.plan.measure``) and the plan's RankMemory, and says how far apart they are.
"""

from __future__ import annotations

from dataclasses import dataclass

from ddpdoctor.plan.memory import RankMemory, Setup, estimate
from ddpdoctor.plan.model import ModelShape

STATES_TOLERANCE = 0.02   # model states: exact tensor sizes, so within 2%
TOTAL_TOLERANCE = 0.15    # the whole step's peak: activations and buffers modelled


@dataclass
class Comparison:
    strategy: str
    rank: int
    predicted_states: float
    measured_states: float
    predicted_activations: float
    measured_activations: float   # saved for backward (no transient)
    predicted_total: float        # RankMemory.subtotal: what the allocator hands out
    measured_peak: float

    @staticmethod
    def _err(pred: float, meas: float) -> float:
        return (pred - meas) / meas if meas else float("inf")

    @property
    def states_error(self) -> float:
        return self._err(self.predicted_states, self.measured_states)

    @property
    def total_error(self) -> float:
        return self._err(self.predicted_total, self.measured_peak)

    @property
    def ok(self) -> bool:
        return (abs(self.states_error) <= STATES_TOLERANCE
                and abs(self.total_error) <= TOTAL_TOLERANCE)


def rank_prediction(ranks: list[RankMemory], rank: int) -> RankMemory:
    for r in ranks:
        if rank in r.ranks:
            return r
    raise KeyError(f"rank {rank} is in no predicted group")


def compare(strategy: str, shape: ModelShape, setup: Setup,
            measured: list[dict[str, float]]) -> list[Comparison]:
    """One Comparison per measured rank."""
    predicted = estimate(strategy, shape, setup)
    out = []
    for rank, m in enumerate(measured):
        p = rank_prediction(predicted, rank)
        out.append(Comparison(
            strategy=strategy, rank=rank, predicted_states=p.model_states,
            measured_states=m["params_bytes"] + m["grads_bytes"] + m["optimizer_bytes"],
            predicted_activations=p.activations, measured_activations=m["activations_bytes"],
            predicted_total=p.subtotal, measured_peak=m["peak_bytes"]))
    return out


def table(rows: list[Comparison]) -> str:
    """Markdown: the measured table of docs/benchmarks.md."""
    def kib(x: float) -> str:
        return f"{x / 1024:,.0f}"

    lines = ["| strategy | rank | states pred / meas KiB | err | saved act. pred / meas KiB "
             "| peak pred / meas KiB | err |", "|---|---|---|---|---|---|---|"]
    for c in rows:
        lines.append(f"| {c.strategy} | {c.rank} | {kib(c.predicted_states)} / "
                     f"{kib(c.measured_states)} | {c.states_error:+.1%} | "
                     f"{kib(c.predicted_activations)} / {kib(c.measured_activations)} | "
                     f"{kib(c.predicted_total)} / {kib(c.measured_peak)} | "
                     f"{c.total_error:+.1%} |")
    return "\n".join(lines)
