"""The odd rank out: where every rank reports a value, the ranks that differ.

Shared by ``check`` (each rank's environment and versions, gathered by its probes) and
``run`` (each rank's environment, read from ``/proc``): a finding about a value that one
rank got wrong names that rank, not all of them.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from ddpdoctor.core import redact
from ddpdoctor.core.findings import format_ranks

# The distributed set-up a launch passes to its ranks: the same on every rank of a node
# (a node's ranks share its network and its library builds). Variables that differ by
# design are left out below.
SHARED_PREFIXES = ("NCCL_", "GLOO_", "TORCH_NCCL_", "TORCH_DISTRIBUTED_", "TORCH_GLOO_",
                   "TORCH_FR_", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE")
# ... per rank by design (a device, a core set, a rank's own id) or per node (NIC names
# differ between node types: compared among a node's ranks only).
PER_RANK = frozenset({"CUDA_VISIBLE_DEVICES", "OMP_PLACES", "GOMP_CPU_AFFINITY",
                      "RANK", "LOCAL_RANK", "GROUP_RANK", "ROLE_RANK", "LOCAL_WORLD_SIZE"})
PER_NODE = frozenset({"GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "NCCL_IB_HCA"})


def shared_env(env: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """The part of a rank's environment every rank of its node should share."""
    return tuple(sorted((k, v) for k, v in env.items()
                        if k.startswith(SHARED_PREFIXES) and k not in PER_RANK))


def odd_ones_out(values: Mapping[int, object]) -> list[int]:
    """Ranks whose value differs from the majority (ties: from rank 0's)."""
    counts = Counter(repr(v) for v in values.values())
    if len(counts) <= 1:
        return []
    top = counts.most_common()
    majority = top[0][0]
    if len(top) > 1 and top[0][1] == top[1][1]:
        majority = repr(values[min(values)])
    return sorted(r for r, v in values.items() if repr(v) != majority)


def ranks_by_value(values: Mapping[int, object], secret: bool = False) -> dict[str, str]:
    """Value -> the ranks that have it. For a secret-looking name the values are never
    shown: each distinct value becomes ``*** (value N)``, so the report still says which
    ranks differ."""
    groups: dict[str, list[int]] = {}
    for r, v in sorted(values.items()):
        groups.setdefault("(unset)" if v is None else str(v), []).append(r)
    if secret:
        masked = {}
        for n, (v, rs) in enumerate(groups.items(), 1):
            masked[v if v == "(unset)" else f"{redact.MASK} (value {n})"] = rs
        groups = masked
    return {v: format_ranks(rs) for v, rs in groups.items()}


def env_differences(per_rank: Mapping[int, Mapping[str, str]],
                    exclude: frozenset[str] = PER_RANK) -> dict[str, list[int]]:
    """Variable -> the odd ranks out, over ranks of one node (unset counts as a value)."""
    names = sorted({k for env in per_rank.values() for k in env} - exclude)
    out = {}
    for name in names:
        odd = odd_ones_out({r: env.get(name) for r, env in per_rank.items()})
        if odd:
            out[name] = odd
    return out
