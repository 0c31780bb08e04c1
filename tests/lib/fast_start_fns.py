"""Functions tests/functional/test_check_fast_start.py runs on ranks (module level: pickled
by name)."""

import multiprocessing
import os


def start_facts(ctx):
    """How this rank was started, and what a DataLoader of this rank would use."""
    import psutil

    parent = psutil.Process(os.getppid())
    return {"start_method": multiprocessing.get_start_method(),
            "parent_cmdline": " ".join(parent.cmdline()),
            "planted": os.environ.get("DDPDOCTOR_TEST_PLANTED")}


def sweep_iters(ctx):
    """The iterations per trial the sweep chose, for three trial budgets."""
    from ddpdoctor.check.probes.bandwidth import sweep

    out = {}
    for name, budget in (("zero", 0.0), ("huge", 1e9), ("none", None)):
        rows = sweep(ctx, {"collectives": ["all_reduce", "broadcast"], "max_bytes": 4096,
                           "iters": 4, "trials": 2, "trial_budget_s": budget})
        out[name] = sorted({row["iters"] for row in rows})
    return out
