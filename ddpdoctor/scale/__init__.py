"""`ddpdoctor scale`: throughput and scaling efficiency at 1, 2, 4 ... ranks, and why not linear.

    lines      the throughput line a user command prints, and the env vars it gets (defined once)
    measure    trainer JSON records / user lines -> RunMeasurement (per-step, per-rank times)
    analysis   pure: measurements -> per-world breakdown, efficiency, cause -> Findings
    runner     launches one run per world size (torchrun), with a deadline; no torch here
    view       the terminal table and the JSON data

Nothing in this package imports torch: the ranks do, in their own processes.
"""
