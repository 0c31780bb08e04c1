"""Probes: one module per probe, each a ``ddpdoctor.check.probe.Probe``.

Each module defines ``collect(ctx, opts) -> dict`` (plain, JSON-serialisable facts about
one rank; probes never decide severity) and declares ``PROBE``: its name, report group,
stage and its pure ``analyze`` from ``ddpdoctor.check.analysis``.
Every collective a probe issues runs under the process group's timeout (the check deadline).
"""

from __future__ import annotations

from typing import Any

from ddpdoctor.check.probe import Probe
from ddpdoctor.check.probes import (
    bandwidth,
    connectivity,
    dataloader,
    env,
    gpu,
    reachability,
    rendezvous,
    topology,
)

# In the order a full check runs and reports them. Each is a Probe of its own data type
# (check/probes/records.py); a registry of all of them can only say "some data type": Any.
PROBES: dict[str, Probe[Any]] = {
    m.PROBE.name: m.PROBE
    for m in (env, rendezvous, reachability, connectivity, bandwidth, dataloader, gpu, topology)
}

__all__ = ["PROBES", "Probe"]
