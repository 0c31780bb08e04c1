"""The scaling table (terminal) and the per-world data that goes into the JSON report."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from ddpdoctor.scale.analysis import WorldResult


def _ms(x: float | None) -> str:
    return "-" if x is None else f"{x * 1000:,.1f}"


def table(results: list[WorldResult], unit: str, mode: str,
          batches: dict[int, int | None], min_eff: float) -> Table:
    fixed = "fixed per-rank batch" if mode == "weak" else "fixed global batch"
    t = Table(title=f"{mode} scaling ({fixed}); times in ms per step, medians",
              title_justify="left")
    for name in ("ranks", "batch/rank", unit, "speedup", "efficiency", "step", "data",
                 "forward", "straggler", "bwd+opt*", "comm*"):
        t.add_column(name, justify="right", no_wrap=True)
    t.add_column("cause", no_wrap=True)
    base = results[0] if results else None
    for r in results:
        b = r.breakdown
        style = "" if r is base or r.efficiency >= min_eff else "yellow"
        speed = r.throughput / base.throughput if base and base.throughput else 0.0
        cause = r.cause or ("" if r is base or r.efficiency >= min_eff else "unclear")
        if b.culprit and r.cause in ("straggler", "data"):
            cause += f" (rank {b.culprit.rank})"
        t.add_row(str(r.world), str(batches.get(r.world) or "-"), f"{r.throughput:,.0f}",
                  f"{speed:.2f}x", f"{r.efficiency:.0%}", _ms(b.step_s), _ms(b.data_s),
                  _ms(b.compute_s), _ms(b.straggler_s), _ms(r.backward_s), _ms(r.comm_s),
                  "baseline" if r is base else cause, style=style)
    return t


def print_table(results: list[WorldResult], unit: str, mode: str,
                batches: dict[int, int | None], min_eff: float) -> None:
    console = Console(highlight=False)
    if not console.is_terminal:  # piped into a log: the whole table, not 80 columns of it
        console = Console(highlight=False, width=160)
    console.print()
    console.print(table(results, unit, mode, batches, min_eff))
    console.print("data, forward: the typical rank's; straggler: the slowest rank's extra "
                  "data + forward time; * estimated: backward + optimizer, and the "
                  "communication beyond them (docs/scale.md).", style="dim")
