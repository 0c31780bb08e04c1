"""Probes: one module per probe, run inside every rank of a process group.

Each module defines ``NAME`` and ``collect(ctx, opts) -> dict``: plain, JSON-serialisable
data about this rank. Probes never decide severity; ``ddpdoctor/analysis`` does. Every
collective a probe issues runs under the process group's timeout (the check deadline).
"""
