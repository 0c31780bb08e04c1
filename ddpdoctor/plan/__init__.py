"""`ddpdoctor plan`: will a model fit, and with which strategy, per rank.

Torch-free (except ``model.from_module`` and ``measure``, which the trainer uses).
``advice_for_oom`` is the entry point for the OOM findings.
"""

from __future__ import annotations

from ddpdoctor.plan.fit import StrategyPlan, advice_for_oom, best, plan
from ddpdoctor.plan.memory import PRECISIONS, RankMemory, Setup, estimate
from ddpdoctor.plan.model import ModelShape, from_module, from_params, from_preset

__all__ = ["PRECISIONS", "ModelShape", "RankMemory", "Setup", "StrategyPlan",
           "advice_for_oom", "best", "estimate", "from_module", "from_params",
           "from_preset", "plan"]
