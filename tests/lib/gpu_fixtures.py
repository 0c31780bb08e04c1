"""Loads the recorded NVML fixtures (tests/fixtures/nvml/*.json) as probe data per rank."""

from __future__ import annotations

import copy
import json
from typing import Any

import paths

FIXTURES = paths.FIXTURES / "nvml"
NAMES = sorted(p.stem for p in FIXTURES.glob("*.json"))

CPU_HOST = {"numa": [{"node": 0, "cpus": "0-95", "mem_total_kib": 1056466536},
                     {"node": 1, "cpus": "96-191", "mem_total_kib": 1056903628}],
            "nics": [{"name": "ens108np0", "operstate": "up", "speed_mbps": 400000,
                      "driver": "mlx5_core", "physical": True, "mtu": 4200, "numa_node": 0}]}


def load(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / f"{name}.json").read_text())


def per_rank(name: str) -> dict[int, dict[str, Any]]:
    """What the gpu and topology probes of each rank would have returned on that node."""
    fx = load(name)
    out = {}
    for rec in fx["ranks"]:
        out[rec["rank"]] = {**copy.deepcopy(rec), "nvml": copy.deepcopy(fx["snapshot"]),
                            "process_names": dict(fx["process_names"]),
                            **copy.deepcopy(CPU_HOST)}
    return out
