"""The ranks' environments, compared and judged: the rank a launch set up differently,
and the variables NCCL / torch / gloo do not read as the launch meant.

run reads each rank's distributed set-up from ``/proc/PID/environ`` as it samples the
job (run/progress.py). A launch script that gives one rank another network interface,
another NCCL setting or another rendezvous address makes that rank fail, or the whole job
hang, with a log line that often carries no rank. Here every variable is compared over
the node's ranks (ddpdoctor/core/oddrank.py): a finding about a setting that no rank was
named for gets the odd rank(s) out, and a difference no finding explains is a warning of
its own. Then every name and value goes through the same table ``check`` uses
(ddpdoctor/distenv/): ``NCCL_TIMEOUT`` (nothing reads it), ``NCCL_BLOCKING_WAIT`` (renamed
``TORCH_NCCL_BLOCKING_WAIT``), ``NCCL_P2P_LEVEL=nvl`` (ignored), each with what to set.
"""

from __future__ import annotations

from ddpdoctor.core import redact
from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.oddrank import env_differences, ranks_by_value
from ddpdoctor.core.report import Check, Report
from ddpdoctor.distenv import judge

CHECK = "env"


def _shown(name: str, per_rank: dict[int, dict[str, str]]) -> dict[str, str]:
    values = {r: env.get(name) for r, env in per_rank.items()}
    return ranks_by_value(values, secret=redact.is_secret_name(name))


def _named_setting(f: Finding, diffs: dict[str, list[int]]) -> str | None:
    """The differing variable a finding is about: its ``setting``, else one it names."""
    setting = f.evidence.get("setting")
    if isinstance(setting, str) and setting in diffs:
        return setting
    return next((name for name in diffs if name in f.title), None)


def name_odd_ranks(report: Report, rank_env: dict[int, dict[str, str]], group: str) -> None:
    """Give rank-less findings about a differing variable its odd ranks; add one
    ENV_VAR_MISMATCH per difference left unexplained; one check line either way."""
    if not rank_env:
        return
    diffs = env_differences(rank_env) if len(rank_env) > 1 else {}
    explained: set[str] = set()
    for f in report.findings:
        name = None if f.ranks else _named_setting(f, diffs)
        if name is None:
            continue
        f.ranks = list(diffs[name])
        f.evidence["odd_rank_out"] = {"variable": name,
                                      "ranks_by_value": _shown(name, rank_env)}
        explained.add(name)
    for name in sorted(set(diffs) - explained):
        # a finding that already blames exactly these ranks (a rendezvous endpoint that
        # differs: ENV_RENDEZVOUS_UNREACHABLE) carries the difference, not a second finding
        same = next((f for f in report.findings if f.ranks and set(f.ranks) == set(diffs[name])),
                    None)
        if same is not None:
            same.evidence.setdefault("env_differs", {})[name] = _shown(name, rank_env)
            continue
        report.add(Finding(
            "ENV_VAR_MISMATCH",
            f"{name} differs across this node's ranks: rank {format_ranks(diffs[name])} "
            "set up differently from the others",
            ranks=list(diffs[name]),
            evidence={"variable": name, "ranks_by_value": _shown(name, rank_env),
                      "why": "a node's ranks share its network and libraries: a launch "
                             "that sets this per rank is the usual cause"}), check=CHECK)
    summary = (f"{len({k for env in rank_env.values() for k in env})} NCCL/GLOO/TORCH/"
               f"MASTER variables compared across ranks {format_ranks(sorted(rank_env))}")
    judged, named = judge.name_findings({r: {"env": env} for r, env in rank_env.items()})
    for f in named:
        report.add(f, check=CHECK)
    if judged:
        summary += f"; {judged} checked against what NCCL, torch and gloo read"
    if diffs:
        summary += "; differs: " + ", ".join(
            f"{n} (rank {format_ranks(r)})" for n, r in sorted(diffs.items()))
    report.checks.append(Check(CHECK, summary, group=group))
