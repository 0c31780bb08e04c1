"""The plan as a plain-text table: one row per strategy and rank group."""

from __future__ import annotations

from ddpdoctor.plan.fit import StrategyPlan, best
from ddpdoctor.plan.units import fmt_bytes

COLUMNS = ("strategy", "ranks", "weights", "grads", "optimizer", "activations", "buffers",
           "margin", "total", "fits")


def _ranks(ranks: list[int]) -> str:
    from ddpdoctor.core.findings import format_ranks

    return format_ranks(ranks)


def rows(plans: list[StrategyPlan], gpu_mem: int | None) -> list[list[str]]:
    out: list[list[str]] = []
    for sp in plans:
        if sp.unsupported:
            out.append([sp.strategy, "-", *["" for _ in range(7)], f"n/a: {sp.unsupported}"])
            continue
        for i, r in enumerate(sp.ranks):
            fits = "?" if gpu_mem is None else ("yes" if r.total <= gpu_mem else "NO")
            out.append([sp.strategy if i == 0 else "", _ranks(r.ranks),
                        *(fmt_bytes(v) for v in (r.weights, r.grads, r.optimizer,
                                                 r.activations, r.buffers, r.margin, r.total)),
                        fits])
    return out


def table(plans: list[StrategyPlan], gpu_mem: int | None) -> str:
    body = rows(plans, gpu_mem)
    grid = [list(COLUMNS), *body]
    widths = [max(len(row[i]) for row in grid if i < len(row)) for i in range(len(COLUMNS))]
    widths[-1] = 0  # the last column is never padded
    lines = ["  ".join(cell.rjust(w) if 1 < i < len(COLUMNS) - 1 else cell.ljust(w)
                       for i, (cell, w) in enumerate(zip(row, widths))).rstrip()
             for row in grid]
    lines.insert(1, "-" * len(lines[0]))
    good = best(plans)
    lines.append("total = weights + optimizer + buffers + max(activations, grads + step "
                 "temporaries) + margin: backward frees activations as gradients appear.")
    lines.append("")
    if gpu_mem is None:
        lines.append("GPU memory unknown (no NVML here): pass --gpu-mem 80G to decide what fits.")
    elif good is None:
        lines.append(f"Nothing fits in {fmt_bytes(gpu_mem)} per GPU: lower --batch-size, add "
                     "--checkpointing or --offload, or use more GPUs.")
    else:
        lines.append(f"Cheapest that fits in {fmt_bytes(gpu_mem)}: {good.strategy} "
                     f"({fmt_bytes(good.peak)} per rank)")
        lines.append(f"  {good.command}")
    return "\n".join(lines)
