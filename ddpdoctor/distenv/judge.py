"""NCCL_* / TORCH_NCCL_* / GLOO_* / TORCH_DISTRIBUTED_* settings judged against the table in
``ddpdoctor/distenv/table.py`` -> ENV_NCCL_CONFIG, naming the ranks whose environment has it.

Pure: every rank's env probe data in, findings out. Severity, decided once here:

- error: a value that makes the job fail (``TORCH_DISTRIBUTED_DEBUG=VERBOSE``: importing
  torch.distributed raises). Interfaces that do not exist stay in ``analysis/env.py``.
- warning: a setting that is silently ignored or misread, so the job does not get what the
  person who set it relied on: an obsolete or never-existing name, a renamed name, a typo
  with a close known name, a value the reader ignores (``NCCL_P2P_LEVEL=nvl``) or misreads
  (``NCCL_IB_DISABLE=true`` is read as 0: IB stays on), ``NCCL_IB_DISABLE=1`` on a host with
  InfiniBand/RoCE devices, an ``NCCL_P2P_LEVEL`` that turns P2P off between GPUs that have it.
- info: a deprecated name that still works; an unknown name with no close known one (a
  plugin's variable, or one newer than the table).

Obsolete and renamed names are judged against the rank's own NCCL/torch version when it is
known: ``NCCL_TREE_THRESHOLD`` is right on NCCL 2.4.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.core import redact
from ddpdoctor.core.findings import Finding, Severity, format_ranks
from ddpdoctor.core.report import Check
from ddpdoctor.distenv import table as nccl_vars
from ddpdoctor.distenv.table import NCCL_PATH_TYPES, Var

FINDING = "ENV_NCCL_CONFIG"
# A typo is one or two characters off a real name; a lower ratio suggests unrelated names.
CLOSE_MATCH = 0.88
# NCCL's old integer NCCL_P2P_LEVEL values -> path types (levelsOldToNew, src/graph/paths.cc).
_OLD_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS", "SYS")
# NVML's common-ancestor level of a GPU pair -> the NCCL path type it is.
# NODE (across host bridges inside one NUMA node) is what NCCL calls PHB.
_NVML_TO_NCCL = {"BOARD": "PIX", "PIX": "PIX", "PXB": "PXB", "PHB": "PHB", "NODE": "PHB",
                 "SYS": "SYS", "NVL": "NVL"}
_INT_RE = re.compile(r"\s*(?P<sign>[+-]?)(?:0[xX](?P<hex>[0-9a-fA-F]+)|0(?P<oct>[0-7]*)"
                     r"|(?P<dec>[1-9][0-9]*))")
_OWNER = {"nccl": "NCCL", "torch": "torch", "gloo": "gloo"}


@dataclass(frozen=True)
class Problem:
    """One rank's problem with one variable. Equal ``key`` on several ranks: one finding."""

    variable: str
    kind: str
    severity: Severity
    title: str
    evidence: dict[str, object] = field(default_factory=dict, compare=False)

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.variable, self.kind, self.title)


def _version(text: str | None) -> tuple[int, ...] | None:
    """``"2.27.7"`` / ``"2.13.0+cpu"`` -> (2, 27, 7); None when unknown."""
    if not text:
        return None
    nums = re.findall(r"\d+", str(text).split("+")[0])
    return tuple(int(n) for n in nums[:3]) if nums else None


def _before(rank_version: str | None, since: str) -> bool:
    """The rank runs a version older than ``since`` (unknown: judge by the table)."""
    have, want = _version(rank_version), _version(since)
    return have is not None and want is not None and have < want


def strtoll(value: str) -> int | None:
    """What C's ``strtoll(value, NULL, 0)`` gives, as NCCL_PARAM reads a value: leading
    blanks and a sign, then hex (0x), octal (0) or decimal digits, the rest ignored. None
    when no digit leads: strtoll then returns 0 without an error, so NCCL uses 0 (not its
    default)."""
    m = _INT_RE.match(value)
    if not m:
        return None
    sign = -1 if m.group("sign") == "-" else 1
    if m.group("hex"):
        return sign * int(m.group("hex"), 16)
    if m.group("oct") is not None:
        return sign * int(m.group("oct") or "0", 8)
    return sign * int(m.group("dec"))


def _known_names() -> list[str]:
    return sorted(n for n, v in nccl_vars.TABLE.items()
                  if v.status in ("valid", "deprecated"))


def _evidence(var: Var | None, **extra: object) -> dict[str, object]:
    ev: dict[str, object] = {}
    if var is not None:
        ev = {"owner": var.owner, "since": var.since,
              "replacement": var.replacement, "note": var.note, "source": var.source}
        ev = {k: v for k, v in ev.items() if v}
    ev.update({k: v for k, v in extra.items() if v not in (None, "", [], ())})
    return ev


def _unknown(name: str) -> Problem:
    """A name of a judged family that the table does not know."""
    if name.startswith("NCCL_"):
        torch_var = nccl_vars.lookup("TORCH_" + name)
        if torch_var is not None and torch_var.status == "valid":
            return Problem(name, "not_a_variable", "warning",
                           f"{name} is not a variable: torch reads TORCH_{name}",
                           _evidence(torch_var, replacement="TORCH_" + name))
    if name.startswith("TORCH_NCCL_"):
        nccl_var = nccl_vars.lookup(name[len("TORCH_"):])
        if nccl_var is not None and nccl_var.status == "valid":
            return Problem(name, "not_a_variable", "warning",
                           f"{name} is not a variable: NCCL reads {name[len('TORCH_'):]}",
                           _evidence(nccl_var, replacement=name[len("TORCH_"):]))
    close = difflib.get_close_matches(name, _known_names(), n=1, cutoff=CLOSE_MATCH)
    if close:
        return Problem(name, "unknown", "warning",
                       f"{name} is not a variable anything reads; did you mean {close[0]}?",
                       _evidence(nccl_vars.lookup(close[0]), suggestion=close[0]))
    return Problem(name, "unknown", "info",
                   f"{name} is not read by NCCL {nccl_vars.NCCL_TABLE_VERSION} or torch "
                   f"{nccl_vars.TORCH_TABLE_VERSION} (a plugin's, or a newer release's?)",
                   {"checked_against": f"NCCL {nccl_vars.NCCL_TABLE_VERSION}, torch "
                                       f"{nccl_vars.TORCH_TABLE_VERSION}"})


def _status(name: str, var: Var, env: dict[str, str], versions: dict[str, Any]
            ) -> Problem | None:
    """The name's own status: obsolete, renamed, deprecated, not a variable."""
    own = versions.get("nccl" if var.owner == "nccl" else "torch")
    if var.status in ("obsolete", "renamed", "deprecated") and var.since and \
            _before(own, var.since):
        return None  # this rank's NCCL/torch still reads it under this name
    if var.status == "obsolete":
        title = f"{name} is obsolete: {var.note}"
        if var.replacement:
            title += f" (use {var.replacement})"
        return Problem(name, "obsolete", "warning", title, _evidence(var))
    if var.status == "not_a_variable":
        title = f"{name} is not a variable: no {_OWNER[var.owner]} release reads it"
        if var.replacement:
            title += f"; use {var.replacement}"
        return Problem(name, "not_a_variable", "warning", title, _evidence(var))
    if var.status == "renamed":
        new, owner = var.replacement, _OWNER[var.owner]
        also = new in env
        old = f"the pre-{var.since} name" if var.since else "an old name"
        title = f"{name} is {old}: {owner} reads it only as a deprecated alias; use {new}"
        if also and env[new] != env[name]:
            title += f"; {new} is set too and wins, so {name} is ignored"
        return Problem(name, "renamed", "warning", title,
                       _evidence(var, replacement_also_set=also or None))
    if var.status == "deprecated":
        return Problem(name, "deprecated", "info",
                       f"{name} is deprecated since {_OWNER[var.owner]} {var.since}: "
                       f"use {var.replacement}", _evidence(var))
    return None


def _value(name: str, var: Var, value: str) -> Problem | None:
    """The value against what the reader accepts."""
    if redact.is_secret_name(name) or value.startswith("sha256:"):
        return None  # the probe sent a digest; nothing to judge
    if var.values:
        accepted = set(var.values)
        # Case-sensitive readers compare the raw value (strcmp): " NVL" is no level either.
        seen = value if var.case_sensitive else value.strip().upper()
        if seen in accepted or (var.legacy_integers and value[:1].isdigit()):
            return None
        fix = next((v for v in var.values if v.upper() == value.strip().upper()), "")
        severity: Severity = "error" if var.bad_value_breaks else "warning"
        if fix:
            title = (f"{name}={value} is ignored: the value is case-sensitive, write "
                     f"{name}={fix}")
        else:
            effect = "the job fails" if var.bad_value_breaks else "it is ignored"
            title = (f"{name}={value} is not a value {_OWNER[var.owner]} accepts "
                     f"({', '.join(var.values)}): {effect}")
        return Problem(name, "bad_value", severity, title,
                       _evidence(var, value=value, accepted=list(var.values),
                                 suggestion=f"{name}={fix}" if fix else ""))
    if var.integer and value.strip() and strtoll(value) is None:
        return Problem(name, "bad_value", "warning",
                       f"{name}={value} is read as 0: NCCL reads it as an integer "
                       "(strtoll), so a word does not mean 1",
                       _evidence(var, value=value, read_as=0,
                                 suggestion=f"{name}=1 (or 0)"))
    return None


def rank_problems(env: dict[str, str], versions: dict[str, Any]) -> list[Problem]:
    """Every problem of one rank's environment with a variable of a judged family."""
    out: list[Problem] = []
    for name in sorted(env):
        if not nccl_vars.judged(name):
            continue
        var = nccl_vars.lookup(name)
        if var is None:
            out.append(_unknown(name))
            continue
        status = _status(name, var, env, versions)
        if status is not None:
            out.append(status)
        value = _value(name, var, env[name])
        if value is not None:
            out.append(value)
    return out


def _group(per_rank: dict[int, dict], problems: dict[int, list[Problem]]) -> list[Finding]:
    """One finding per problem, naming every rank whose environment has it."""
    by_key: dict[tuple[str, str, str], tuple[Problem, list[int]]] = {}
    for rank in sorted(problems):
        for p in problems[rank]:
            by_key.setdefault(p.key, (p, []))[1].append(rank)
    findings = []
    for problem, ranks in by_key.values():
        values: dict[str, list[int]] = {}
        for r in ranks:
            v = per_rank[r]["env"].get(problem.variable, "")
            shown = redact.MASK if redact.is_secret_name(problem.variable) else v
            values.setdefault(shown, []).append(r)
        evidence = {"variable": problem.variable, "problem": problem.kind,
                    **problem.evidence,
                    "ranks_by_value": {v: format_ranks(rs) for v, rs in values.items()},
                    "hosts": sorted({per_rank[r].get("hostname", "?") for r in ranks})}
        findings.append(Finding(FINDING, problem.title, ranks=ranks, evidence=evidence,
                                severity=problem.severity))
    order = {"error": 0, "warning": 1, "info": 2}
    return sorted(findings, key=lambda f: (order[f.severity], f.ranks, f.title))


def import_breakers(env: dict[str, str]) -> list[Finding]:
    """Variables whose value makes ``import torch.distributed`` raise in every process that
    has this environment (``TORCH_DISTRIBUTED_DEBUG=VERBOSE``): found before any rank is
    started, since no rank (and no job) could start with it."""
    found = []
    for name in sorted(env):
        var = nccl_vars.lookup(name) if nccl_vars.judged(name) else None
        if var is None or not var.bad_value_breaks:
            continue
        problem = _value(name, var, env[name])
        if problem is not None and problem.severity == "error":
            findings = _group({0: {"env": env}}, {0: [problem]})
            for f in findings:
                f.ranks = []  # every process of this environment, not one rank
                f.evidence.pop("ranks_by_value", None)
                f.evidence.pop("hosts", None)
            found += findings
    return found


def name_findings(per_rank: dict[int, dict[str, Any]]) -> tuple[int, list[Finding]]:
    """(how many judged variables are set on some rank, their findings)."""
    problems = {r: rank_problems(d.get("env", {}), d.get("versions", {}))
                for r, d in per_rank.items()}
    judged = {n for d in per_rank.values() for n in d.get("env", {}) if nccl_vars.judged(n)}
    return len(judged), _group(per_rank, problems)


def ib_disabled(env: dict[str, str]) -> bool:
    """NCCL_IB_DISABLE as NCCL reads it: any non-zero integer disables IB."""
    return bool(strtoll(env.get("NCCL_IB_DISABLE", "") or "0"))


def ib_findings(per_rank: dict[int, dict[str, Any]]) -> list[Finding]:
    """NCCL_IB_DISABLE=1 on a host that has InfiniBand/RoCE devices: NCCL then moves every
    inter-node byte over TCP sockets. Works, slowly (COMM_BANDWIDTH_LOW later)."""
    by_host: dict[tuple[str, tuple[str, ...]], list[int]] = {}
    for r, d in per_rank.items():
        devices = tuple(sorted(dev["name"] for dev in d.get("infiniband") or []))
        if devices and ib_disabled(d.get("env", {})):
            by_host.setdefault((d.get("hostname", "?"), devices), []).append(r)
    findings = []
    for (host, devices), ranks in sorted(by_host.items()):
        d0 = per_rank[ranks[0]]
        findings.append(Finding(
            FINDING,
            f"NCCL_IB_DISABLE={d0['env']['NCCL_IB_DISABLE']} on {host}, which has "
            f"InfiniBand/RoCE device(s) {', '.join(devices)}: NCCL uses TCP sockets instead",
            ranks=ranks, severity="warning",
            evidence={"variable": "NCCL_IB_DISABLE", "problem": "ib_disabled_with_ib",
                      "host": host, "devices": d0["infiniband"],
                      "source": nccl_vars.DOCS + "#nccl-ib-disable",
                      "hint": "unset NCCL_IB_DISABLE unless IB is known broken here "
                              "(then fix IB: ibstat, ibv_devinfo)"}))
    return findings


def p2p_level(value: str) -> str | None:
    """The path type NCCL makes of an NCCL_P2P_LEVEL value (ncclGetLevel); None: ignored."""
    if value in NCCL_PATH_TYPES:
        return value
    if value[:1].isdigit():
        n = strtoll(value) or 0
        return _OLD_LEVELS[min(max(n, 0), len(_OLD_LEVELS) - 1)]
    return None


def _rank_p2p(d: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(kind, details) of one rank that sets NCCL_P2P_LEVEL; None when it does not."""
    env = d.get("env", {})
    if "NCCL_P2P_LEVEL" not in env:
        return None
    value = env["NCCL_P2P_LEVEL"]
    if strtoll(env.get("NCCL_P2P_DISABLE", "") or "0") == 1:
        return "overridden", {}
    level = p2p_level(value)
    if level is None:
        return "invalid", {}  # the value finding says so
    topo = d.get("p2p") or {}
    if "pairs" not in topo:
        return "skipped", {"reason": topo.get("skipped", "the probe read no GPU topology")}
    cut = NCCL_PATH_TYPES.index(level)
    off = []
    for p in topo["pairs"]:
        path = _NVML_TO_NCCL.get(p.get("path") or "")
        if path is None or p.get("p2p_read") not in ("OK", None):
            continue  # unknown path, or no P2P at all whatever the level says
        if NCCL_PATH_TYPES.index(path) > cut:
            off.append({"a": p["a"], "b": p["b"], "path": path})
    return ("contradicts" if off else "agrees"), {"level": level, "off": off,
                                                  "pairs": len(topo["pairs"])}


def p2p_check(per_rank: dict[int, dict[str, Any]]) -> tuple[Check | None, list[Finding]]:
    """NCCL_P2P_LEVEL against the GPU pairs NVML measured on each rank's host. No check line
    when no rank sets it; skipped (with NVML's reason) where no topology could be read."""
    seen = {r: res for r, d in per_rank.items() if (res := _rank_p2p(d)) is not None}
    if not seen:
        return None, []
    findings: list[Finding] = []
    groups: dict[tuple[str, str, str], list[int]] = {}
    for r, (kind, _) in seen.items():
        d = per_rank[r]
        groups.setdefault((kind, d.get("hostname", "?"), d["env"]["NCCL_P2P_LEVEL"]),
                          []).append(r)
    for (kind, host, value), ranks in sorted(groups.items()):
        details = seen[ranks[0]][1]
        if kind == "overridden":
            findings.append(Finding(
                FINDING, f"NCCL_P2P_LEVEL={value} is ignored: NCCL_P2P_DISABLE=1 is set too "
                "and wins", ranks=ranks, severity="warning",
                evidence={"variable": "NCCL_P2P_LEVEL", "problem": "contradiction",
                          "host": host, "source": nccl_vars.DOCS + "#nccl-p2p-disable"}))
        elif kind == "contradicts":
            off = details["off"]
            paths = sorted({p["path"] for p in off})
            findings.append(Finding(
                FINDING,
                f"NCCL_P2P_LEVEL={value} turns P2P off for {len(off)} of {details['pairs']} "
                f"GPU pair(s) on {host} that support it (their path: {', '.join(paths)}): "
                "NCCL copies through host memory there",
                ranks=ranks, severity="warning",
                evidence={"variable": "NCCL_P2P_LEVEL", "problem": "p2p_level_topology",
                          "host": host, "level": details["level"], "pairs_turned_off": off,
                          "source": nccl_vars.DOCS + "#nccl-p2p-level",
                          "hint": f"unset NCCL_P2P_LEVEL, or set it to {paths[-1]} or "
                                  "further if those pairs should use P2P"}))
    kinds = {k for k, _ in seen.values()}
    ranks_txt = format_ranks(sorted(seen))
    if kinds <= {"skipped", "invalid"} and "skipped" in kinds:
        reason = next(det["reason"] for k, det in seen.values() if k == "skipped")
        return Check("p2p level", f"skipped: NCCL_P2P_LEVEL set on rank(s) {ranks_txt}, not "
                     f"compared with the topology: {reason}", status="skipped"), findings
    summary = (f"NCCL_P2P_LEVEL set on rank(s) {ranks_txt}; " +
               ("it turns P2P off between GPUs that support it" if "contradicts" in kinds
                else "overridden by NCCL_P2P_DISABLE=1" if "overridden" in kinds
                else "agrees with the measured GPU topology"))
    return Check("p2p level", summary), findings
