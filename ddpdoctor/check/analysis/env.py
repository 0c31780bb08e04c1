"""Environment facts of every rank -> version, env var, shm, limit and NCCL/gloo config findings."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, cast

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.core import redact
from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.oddrank import odd_ones_out, ranks_by_value
from ddpdoctor.core.report import Check
from ddpdoctor.distenv import judge as nccl_env
from ddpdoctor.distenv import table as nccl_vars

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.probes.records import EnvData

MiB = 1 << 20
GROUP = "Environment"
# Below this much free /dev/shm, DataLoader workers fail on the first large batch
# (Docker's default is 64 MiB) and NCCL's shared-memory transport cannot set up.
SHM_MIN_FREE = 512 * MiB
NOFILE_MIN = 4096  # DataLoader workers pass tensors as file descriptors
MEMLOCK_MIN = 64 * MiB  # InfiniBand/RDMA registration pins memory
# Variables that legitimately differ from rank to rank or node to node (NIC names differ
# between node types; the socket config check verifies each node's value instead).
PER_RANK_VARS = {"CUDA_VISIBLE_DEVICES", "OMP_PLACES", "GOMP_CPU_AFFINITY",
                 "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME"}


def _untyped(per_rank: Mapping[int, EnvData]) -> dict[int, dict[str, object]]:
    """The env data as ``ddpdoctor.distenv.judge`` takes it (records it reads untyped, as
    ``dict[str, Any]``): the same dicts, not copied."""
    return cast("dict[int, dict[str, object]]", per_rank)


def _mismatches(sections: Mapping[int, Mapping[str, object]], keys: list[str],
                finding_id: str, title: str, key_name: str) -> list[Finding]:
    """One finding per key of one section of the env data (by rank) whose value differs
    across ranks."""
    findings = []
    for key in keys:
        values = {r: section.get(key) for r, section in sections.items()}
        odd = odd_ones_out(values)
        if odd:
            secret = redact.is_secret_name(key)
            evidence: dict[str, object] = {key_name: key,
                                        "ranks_by_value": ranks_by_value(values, secret)}
            if secret:
                evidence["values"] = f"hidden ({key} looks like a secret)"
            findings.append(Finding(finding_id, title.format(key), ranks=odd,
                                    evidence=evidence))
    return findings


def _versions(per_rank: Mapping[int, EnvData]) -> tuple[Check, list[Finding]]:
    keys = sorted({k for d in per_rank.values() for k in d["versions"]})
    findings = _mismatches({r: d["versions"] for r, d in per_rank.items()}, keys,
                           "ENV_VERSION_MISMATCH", "{} version differs across ranks", "what")
    v = per_rank[min(per_rank)]["versions"]
    summary = (f"Python {v['python']}, torch {v['torch']}, CUDA {v['cuda'] or '-'}, "
               f"NCCL {v['nccl'] or '-'}" + ("" if not findings else "; differs across ranks"))
    return Check("versions", summary, group=GROUP), findings


def _known_bugs(per_rank: Mapping[int, EnvData]) -> tuple[Check, list[Finding]]:
    """The same known-bug table diagnose matches in logs, applied to the versions read."""
    from ddpdoctor.diagnose.known_bugs import findings_for_versions

    by_versions: dict[tuple[tuple[str, str], ...], list[int]] = {}
    for rank, d in per_rank.items():
        key = tuple(sorted((k, str(v)) for k, v in d["versions"].items() if v))
        by_versions.setdefault(key, []).append(rank)
    findings: dict[str, Finding] = {}
    for key, ranks in by_versions.items():
        wanted = {k: v for k, v in key if k in ("torch", "nccl", "python", "cuda")}
        for f in findings_for_versions(**wanted):
            bug = str(f.evidence["bug"])  # a known bug's id
            if bug in findings:
                findings[bug].ranks = sorted({*findings[bug].ranks, *ranks})
            else:
                f.ranks = sorted(ranks)
                findings[bug] = f
    summary = (f"{len(findings)} known upstream bug(s) affect these versions" if findings
               else "no known upstream bug affects these versions")
    return Check("known bugs", summary, group=GROUP), list(findings.values())


def _env_vars(per_rank: Mapping[int, EnvData]) -> tuple[Check, list[Finding]]:
    names = sorted({k for d in per_rank.values() for k in d["env"]} - PER_RANK_VARS)
    findings = _mismatches({r: d["env"] for r, d in per_rank.items()}, names, "ENV_VAR_MISMATCH",
                           "{} differs across ranks", "variable")
    summary = f"{len(names)} NCCL/GLOO/TORCH/MASTER/OMP variables compared across ranks"
    # Each name and value against what NCCL / torch / gloo really read (distenv/table.py).
    judged, named = nccl_env.name_findings(_untyped(per_rank))
    if judged:
        summary += (f"; {judged} NCCL/TORCH_NCCL/GLOO name(s) checked against NCCL "
                    f"{nccl_vars.NCCL_TABLE_VERSION} and torch {nccl_vars.TORCH_TABLE_VERSION}")
    return Check("env vars", summary, group=GROUP), findings + named


def _shm(per_rank: Mapping[int, EnvData], shm_min_free: int) -> tuple[Check, list[Finding]]:
    small = {r: d["shm"] for r, d in per_rank.items()
             if "error" in d["shm"] or d["shm"]["free"] < shm_min_free}
    findings = []
    if small:
        worst = min(small.items(), key=lambda kv: kv[1].get("free", 0))
        findings.append(Finding(
            "ENV_SHM_TOO_SMALL",
            f"/dev/shm has {worst[1].get('free', 0) / MiB:.1f} MiB free "
            f"(DataLoader workers and NCCL need at least {shm_min_free / MiB:.0f} MiB)",
            ranks=sorted(small),
            evidence={"shm_by_rank": small, "hosts": sorted({per_rank[r]["hostname"]
                                                             for r in small}),
                      "min_free_bytes": shm_min_free}))
    shm0 = per_rank[min(per_rank)]["shm"]
    summary = (f"/dev/shm {shm0.get('free', 0) / MiB:,.0f} MiB free of "
               f"{shm0.get('total', 0) / MiB:,.0f} MiB" if "free" in shm0
               else f"/dev/shm unreadable: {shm0.get('error')}")
    if small:
        summary += f"; too small on rank(s) {format_ranks(sorted(small))}"
    return Check("shm", summary, group=GROUP), findings


def _limits(per_rank: Mapping[int, EnvData], backend: str) -> tuple[Check, list[Finding]]:
    problems: dict[int, list[str]] = {}
    for r, d in per_rank.items():
        nofile = d["ulimit"]["nofile"][0]
        if nofile is not None and nofile < NOFILE_MIN:
            problems.setdefault(r, []).append(
                f"open files soft limit {nofile} < {NOFILE_MIN} (ulimit -n)")
        memlock = d["ulimit"]["memlock"][0]
        if backend == "nccl" and memlock is not None and memlock < MEMLOCK_MIN:
            problems.setdefault(r, []).append(
                f"locked memory limit {memlock // 1024} KiB: RDMA needs unlimited (ulimit -l)")
        threads = d["torch_threads"] * d["local_world_size"]
        cpus = len(d["affinity"])
        if threads > cpus:
            problems.setdefault(r, []).append(
                f"{d['local_world_size']} ranks x {d['torch_threads']} torch threads = "
                f"{threads} threads on {cpus} CPUs (set OMP_NUM_THREADS)")
    findings = []
    if problems:
        findings.append(Finding(
            "ENV_LIMITS", "resource limits or thread counts that hurt training",
            ranks=sorted(problems), evidence={"problems_by_rank": problems}))
    d0 = per_rank[min(per_rank)]
    summary = (f"nofile {d0['ulimit']['nofile'][0] or 'unlimited'}, "
               f"{len(d0['affinity'])} CPUs, {d0['torch_threads']} torch thread(s) per rank, "
               f"{len(d0['numa_nodes']) or 1} NUMA node(s)")
    return Check("limits", summary, group=GROUP), findings


def _missing_ifnames(spec: str, present: set[str], prefix_match: bool) -> list[str]:
    """Interfaces named in a NCCL/GLOO_SOCKET_IFNAME value that this host does not have.

    NCCL syntax: comma list, leading '^' excludes (never an error), leading '=' means an
    exact name; otherwise a prefix. NCCL uses whichever entries match, so only a list that
    matches nothing is broken. GLOO takes exact names and opens a device for each.
    """
    if not spec or spec.startswith("^"):
        return []
    exact = spec.startswith("=")
    names = [n.strip() for n in spec.lstrip("=").split(",") if n.strip()]
    missing = []
    for n in names:
        if exact or not prefix_match:
            found = n in present
        else:
            found = any(p.startswith(n) for p in present)
        if not found:
            missing.append(n)
    if prefix_match and len(missing) < len(names):
        return []
    return missing


def _socket_config(per_rank: Mapping[int, EnvData]) -> tuple[Check, list[Finding]]:
    findings = []
    for var, prefix in (("GLOO_SOCKET_IFNAME", False), ("NCCL_SOCKET_IFNAME", True)):
        bad: dict[int, list[str]] = {}
        for r, d in per_rank.items():
            missing = _missing_ifnames(d["env"].get(var, ""), set(d["interfaces"]), prefix)
            if missing:
                bad[r] = missing
        if bad:
            r0 = min(bad)
            findings.append(Finding(
                "ENV_NCCL_CONFIG",
                f"{var}={per_rank[r0]['env'][var]} names no interface of this host",
                ranks=sorted(bad),
                evidence={"variable": var, "missing_by_rank": bad,
                          "interfaces": sorted(per_rank[r0]["interfaces"]),
                          "host": per_rank[r0]["hostname"]}))
    for r, d in per_rank.items():
        env = d["env"]
        if nccl_env.ib_disabled(env) and env.get("NCCL_NET", "").upper() == "IB":
            findings.append(Finding(
                "ENV_NCCL_CONFIG", "NCCL_NET=IB while NCCL_IB_DISABLE=1", ranks=[r],
                evidence={"NCCL_NET": env["NCCL_NET"],
                          "NCCL_IB_DISABLE": env["NCCL_IB_DISABLE"]}))
    findings.extend(nccl_env.ib_findings(_untyped(per_rank)))
    d0 = per_rank[min(per_rank)]
    shown = {k: d0["env"][k] for k in ("GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME")
             if k in d0["env"]}
    summary = ("interfaces " + ", ".join(sorted(d0["interfaces"]))
               + ("; " + ", ".join(f"{k}={v}" for k, v in shown.items()) if shown else ""))
    if d0.get("infiniband"):
        summary += "; InfiniBand/RoCE " + ", ".join(dev["name"] for dev in d0["infiniband"])
    return Check("socket config", summary, group=GROUP), findings


def _p2p(per_rank: Mapping[int, EnvData]) -> list[tuple[Check, list[Finding]]]:
    """The "p2p level" line, only where some rank sets NCCL_P2P_LEVEL."""
    check, findings = nccl_env.p2p_check(_untyped(per_rank))
    if check is None:
        return []
    return [(replace(check, group=GROUP), findings)]


def analyze(per_rank: Mapping[int, EnvData], world_size: int,
            opts: CheckOptions | Mapping[str, object] | None = None
            ) -> tuple[list[Check], list[Finding]]:
    opts = CheckOptions.coerce(opts)
    checks: list[Check] = []
    findings: list[Finding] = []
    parts = [
        _versions(per_rank),
        _known_bugs(per_rank),
        _env_vars(per_rank),
        _socket_config(per_rank),
        *_p2p(per_rank),
        _shm(per_rank, opts.shm_min_free),
        _limits(per_rank, opts.backend or "gloo"),
    ]
    for check, fs in parts:
        checks.append(check)
        for f in fs:
            f.check = check.name
        findings.extend(fs)
    return checks, findings
