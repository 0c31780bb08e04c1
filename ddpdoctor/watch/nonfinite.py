"""GRAD_NONFINITE: NaN/Inf in the loss, the model output or the gradients.

Every step costs one tiny reduction with no synchronisation; the flags are read only on
check steps, together with one norm of the final gradients, and the all_gather then tells
which rank went non-finite first: after the all-reduce every rank's gradients are NaN,
but only the culprit's own backward made them.

Where a parameter's gradient arrives before DDP's all-reduce (DDP, plain modules, ZeRO),
the step's signal is the sum of the first gradient of the backward (a persistent hook on
the parameter nearest the loss, found in the first backward; the smallest of the first
three, so an LLM's head is not summed): a NaN loss or a NaN output shows there first.
Where it does not (FSDP reduce-scatters before a sharded parameter sees its gradient;
tensor parallel), or when ``nonfinite_output`` asks for it, a tensor hook on the model
output sums the gradient flowing into the output and, while the loop still holds the
output, the output itself, so a NaN made by the forward is told from one made by the loss;
that costs a hook registration and a reduction over the output every step. An iteration
whose optimizer step was skipped and whose gradients were then cleared (fp16 GradScaler
overflow, routine while the scale grows) is forgotten.

The per-step sums wait for the check step in one preallocated buffer, not as a list of
small tensors: a hundred small allocations kept alive between a step's large activation
buffers pinned the top of the heap, and a clean job's RSS rose by 50-190 MB between check
steps (benchmarks/bench_run_overhead.py, 200 ms steps), which read as MEMORY_GROWTH.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Sequence
from functools import partial
from typing import TYPE_CHECKING

from ddpdoctor.core.findings import Finding
from ddpdoctor.watch.base import WatchCheck, first_tensor, local

if TYPE_CHECKING:
    import torch

    from ddpdoctor.watch.context import CheckContext


class StepValues:
    """``(step, source, value)`` rows kept until the check step: the values in one
    float64 tensor allocated once (on the values' device), the labels in a list.

    float64, so a finite float64 sum above float32's range stays finite; the buffer
    doubles when a long stretch between check steps outgrows it (rare: it starts with
    room for two values a step)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = max(4, capacity)
        self.labels: list[tuple[int, int]] = []
        self.values: torch.Tensor | None = None

    def __len__(self) -> int:
        return len(self.labels)

    def append(self, step: int, source: int, value: torch.Tensor) -> None:
        import torch

        n = len(self.labels)
        if self.values is None:
            self.values = torch.empty(self.capacity, dtype=torch.float64, device=value.device)
        elif n == self.values.numel():
            grown = torch.empty(2 * n, dtype=torch.float64, device=self.values.device)
            grown[:n].copy_(self.values)
            self.values = grown
        # an in-place copy: the temporary sum is freed at once, nothing small stays alive
        self.values[n].copy_(value.reshape(()), non_blocking=True)
        self.labels.append((step, source))

    def drop_step(self, step: int) -> None:
        """Forget the last rows of ``step`` (they are always the newest)."""
        while self.labels and self.labels[-1][0] == step:
            self.labels.pop()

    def last_step(self) -> int | None:
        return self.labels[-1][0] if self.labels else None

    def first_nonfinite(self) -> tuple[int, int] | None:
        """The (step, source) of the first non-finite row, and empty the rows."""
        import torch

        n, labels = len(self.labels), self.labels
        self.labels = []
        if not n or self.values is None:  # (rows always have their values)
            return None
        hit = torch.nonzero(~torch.isfinite(self.values[:n].cpu())).flatten()
        return labels[int(hit[0])] if hit.numel() else None

OUTPUT, LOSS, GRADIENT = 1, 2, 3  # causal order: forward output, then loss grad, then grads
SOURCE_NAMES = {OUTPUT: "model output (forward)", LOSS: "loss (gradient of the model output)",
                GRADIENT: "parameter gradients"}


def first_nonfinite(rows: list[tuple[int, int, int]]) -> tuple[int, int, list[int]] | None:
    """``rows[rank] = (first_step or 0, source, param_index)`` -> (step, source, ranks).

    The earliest step wins; at that step the earliest source in causal order; the ranks
    that share both are the culprits.
    """
    hits = [(s, src, r) for r, (s, src, _) in enumerate(rows) if s > 0]
    if not hits:
        return None
    step, source = min((s, src) for s, src, _ in hits)
    ranks = [r for s, src, r in hits if (s, src) == (step, source)]
    return step, source, ranks


class NonfiniteCheck(WatchCheck):
    name = "nonfinite"
    width = 3

    def attach(self, w: CheckContext) -> None:
        import torch

        self.sum, self.f32, self.f16 = torch.sum, torch.float32, torch.float16
        self.flags = StepValues(2 * w.cfg.every + 8)
        # (check step, per gradient: its norm is non-finite, the gradients' param indices)
        self.grad_bad: tuple[int, torch.Tensor, list[int]] | None = None
        self.done = False
        self.skipped = 0  # iterations whose optimizer step never ran (GradScaler overflow)
        self.in_a_row = 0  # ... since the last optimizer step
        first = w.first_grad
        self.by_grad = first is not None and not w.cfg.nonfinite_output
        self.cleared: Callable[[], bool]  # zero_grad() ran since the last backward
        if first is not None and self.by_grad:
            self.skip = frozenset({"forward_out"})
            self.cleared = first.grads_cleared
            return
        self.skip = frozenset({"first_grad"})
        params = [p for _, p in w.named_params if p.requires_grad]
        # three witnesses of "zero_grad() ran": one could be an unused parameter
        witnesses = list({id(p): p for p in (params[:1] + params[len(params) // 2:][:1]
                                             + params[-1:])}.values())
        self.cleared = lambda: bool(witnesses) and all(p.grad is None for p in witnesses)

    def source_name(self, w: CheckContext, source: int) -> str:
        if source == LOSS and self.by_grad and w.first_grad is not None:  # (by_grad: it is)
            return (f"loss or model output (the first gradient of the backward, "
                    f"{w.first_grad.name})")
        return SOURCE_NAMES[source]

    # -- by the first gradient of the backward (DDP, plain modules)

    def first_grad(self, w: CheckContext, grad: torch.Tensor) -> None:
        if self.done:
            return
        step = w.step + 1
        self._new_backward(w, step)
        # A sum, read on check steps only: a NaN or Inf anywhere makes it non-finite
        # (isfinite().all() would be three kernels per tensor on the hot path).
        if grad.requires_grad:  # create_graph=True
            grad = grad.detach()
        # fp16 sums in float32 (a finite fp16 sum can overflow); others as they are: the
        # dtype argument alone costs a few us here
        self.flags.append(step, LOSS, self.sum(grad, dtype=self.f32)
                          if grad.dtype is self.f16 else grad.sum())

    # -- by the model output (FSDP, tensor parallel, or nonfinite_output=True)

    def forward_out(self, w: CheckContext, output: object) -> None:
        if self.done:
            return
        t = first_tensor(output, floating=True)
        if t is None or not t.requires_grad:
            return
        step = w.step + 1
        self._new_backward(w, step)
        # A weak reference: holding the output until backward could raise peak memory by
        # one output (an LLM's logits); the loop's own variable keeps it alive instead.
        t.register_hook(partial(self._output_hook, step, weakref.ref(t)))

    def _output_hook(self, step: int, output_ref: weakref.ref[torch.Tensor],
                     grad: torch.Tensor) -> None:
        output = output_ref()
        if output is not None:
            self.flags.append(step, OUTPUT, self.sum(output.detach(), dtype=self.f32))
        self.flags.append(step, LOSS, self.sum(grad.detach(), dtype=self.f32))

    # -- both

    def _new_backward(self, w: CheckContext, step: int) -> None:
        if self.flags.last_step() != step:
            self.in_a_row = 0  # an optimizer step ran since the last backward
        elif self.cleared():
            self._forget_skipped(w, step)

    def _forget_skipped(self, w: CheckContext, step: int) -> None:
        # The last iteration backpropagated, its optimizer step never ran, and its
        # gradients were cleared: a skipped step (a GradScaler that found inf in fp16
        # gradients and lowered its scale). Its flags say nothing about the model.
        # Gradient accumulation keeps its gradients between backwards: not this.
        self.flags.drop_step(step)
        self.skipped += 1
        self.in_a_row += 1
        if self.in_a_row == w.cfg.nonfinite_skips:
            # A few skips while the scale settles are routine; a streak means the loss or
            # the gradients stay non-finite whatever the scale. No optimizer step, so no
            # check step and no gather: every rank says it for the whole job.
            w.emit(Finding(
                "GRAD_NONFINITE",
                f"{self.in_a_row} iterations in a row skipped their optimizer step after "
                f"step {step - 1} (GradScaler found inf/NaN gradients each time): the loss "
                "or the gradients stay non-finite",
                ranks=[], evidence={"step": step, "skipped_in_a_row": self.in_a_row,
                                    "last_completed_step": step - 1,
                                    "source": "skipped optimizer steps (GradScaler)"}), step)

    def before_check(self, w: CheckContext, step: int) -> None:
        if self.done:
            return
        import torch

        index = [i for i, (_, p) in enumerate(w.named_params) if p.grad is not None]
        grads = [local(g).detach() for g in (w.named_params[i][1].grad for i in index)
                 if g is not None]  # (all are: index holds the parameters with one)
        if not grads:
            return
        # The 2-norm has a fast kernel (the inf-norm is 20x slower on CPU); a NaN or Inf
        # makes it non-finite, and so can a finite gradient above ~1e19, which pack()
        # checks element-wise before it is called non-finite.
        norms: Sequence[torch.Tensor]
        try:
            norms = torch._foreach_norm(grads, 2, dtype=torch.float32)
        except (AttributeError, RuntimeError, TypeError):
            norms = [torch.linalg.vector_norm(g, dtype=torch.float32) for g in grads]
        stacked = torch.stack([n.reshape(()) for n in norms])
        bad = ~torch.isfinite(stacked)
        self.grad_bad = (step, bad, index)
        # the total norm, a metric (watch/stream.py): one more reduction, check steps only
        w.note("grad_norm", float(stacked.norm()))

    def pack(self, w: CheckContext, step: int) -> torch.Tensor:
        import torch

        first, source, pidx = 0, 0, -1
        hit = self.flags.first_nonfinite()
        if hit is not None and not self.done:
            first, source = hit
        if self.grad_bad is not None:
            gstep, bad, index = self.grad_bad
            for i in torch.nonzero(bad.cpu()).flatten().tolist():
                grad = w.named_params[index[i]][1].grad
                if grad is None or not bool(torch.isfinite(local(grad)).all()):
                    pidx = index[i]
                    break
            if pidx >= 0 and not first:
                first, source = gstep, GRADIENT
        self.grad_bad = None
        return torch.tensor([first, source, pidx], dtype=torch.float64)

    def final_local(self, w: CheckContext) -> None:
        """A non-finite value after the last check step: this rank's own first one
        (``run`` keeps the earliest step over the ranks that say so)."""
        # a backward whose optimizer step never ran (the loop ended, or a GradScaler
        # skipped it) is no completed step
        last = self.flags.last_step()
        if last is not None and last > w.step:
            self.flags.drop_step(last)
        hit = self.flags.first_nonfinite()
        if hit is None or self.done:
            return
        self.done = True
        first, source = hit
        w.emit(Finding(
            "GRAD_NONFINITE",
            f"non-finite {self.source_name(w, source)} on rank {w.rank} at step {first} "
            "(after the last check step; seen as the watch ended)",
            ranks=[w.rank],
            evidence={"step": first, "source": self.source_name(w, source),
                      "scope": "rank", "detected_at_step": "end of training",
                      "why": "found after the last check step, so not compared across "
                             "ranks: the rank with the earliest step is the first"}),
            first)

    def analyze(self, w: CheckContext, step: int, rows: torch.Tensor) -> list[Finding]:
        data = [(int(r[0]), int(r[1]), int(r[2])) for r in rows.tolist()]
        hit = first_nonfinite(data)
        if hit is None or self.done:
            return []
        self.done = True
        first, source, ranks = hit
        pidx = next((p for _, _, p in (data[r] for r in ranks) if p >= 0),
                    next((p for _, _, p in data if p >= 0), -1))
        names = [n for n, _ in w.named_params]
        param = names[pidx] if 0 <= pidx < len(names) else None
        return [Finding(
            "GRAD_NONFINITE",
            f"non-finite {self.source_name(w, source)} first on rank "
            f"{','.join(map(str, ranks))} at step {first}"
            + (f"; first non-finite gradient: {param}" if param else ""),
            ranks=ranks,
            evidence={"step": first, "source": self.source_name(w, source), "parameter": param,
                      "ranks_nonfinite": [r for r, d in enumerate(data) if d[0] > 0],
                      "detected_at_step": step})]
