"""Rendezvous endpoint facts -> ENV_PORT_IN_USE, ENV_RENDEZVOUS_UNREACHABLE."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Check

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.probes.records import RendezvousData


def analyze(per_rank: Mapping[int, RendezvousData], world_size: int,
            opts: CheckOptions | Mapping[str, object] | None = None) -> tuple[Check, list[Finding]]:
    d = next(iter(per_rank.values()))
    endpoint = f"{d['master_addr']}:{d['master_port']}"
    findings = []
    if "resolve_error" in d:
        findings.append(Finding(
            "ENV_RENDEZVOUS_UNREACHABLE", f"MASTER_ADDR {d['master_addr']} does not resolve",
            evidence={"endpoint": endpoint, "error": d["resolve_error"]}))
        summary = f"{endpoint}: cannot resolve ({d['resolve_error']})"
    elif d.get("local"):
        if d.get("port_free"):
            summary = f"{endpoint} is this host; port {d['master_port']} is free"
        else:
            owner = d.get("owner") or {}
            who = f" by pid {owner['pid']}" if owner.get("pid") else ""
            findings.append(Finding(
                "ENV_PORT_IN_USE", f"rendezvous port {d['master_port']} is already in use{who}",
                evidence={"endpoint": endpoint, "error": d.get("bind_error"),
                          "owner": owner or "unknown (not visible to this user)"}))
            summary = f"{endpoint}: port in use{who}"
    elif d.get("reachable"):
        state = "listening" if d.get("listening") else "reachable, nothing listening yet"
        summary = f"{endpoint} ({d['resolved']}): {state}"
    else:
        findings.append(Finding(
            "ENV_RENDEZVOUS_UNREACHABLE", f"MASTER_ADDR {d['master_addr']} cannot be reached",
            evidence={"endpoint": endpoint, "resolved": d.get("resolved"),
                      "error": d.get("connect_error")}))
        summary = f"{endpoint}: unreachable ({d.get('connect_error')})"
    return Check("rendezvous", summary, group="Communication"), findings
