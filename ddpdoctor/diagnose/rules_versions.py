"""Facts that only show when two parts of a log are compared: the versions each node prints.

NCCL prints its version once per process (``host:pid:tid [dev] NCCL INFO NCCL version
2.19.3+cuda12.3``), torch's ProcessGroupNCCL once per rank (``[Rank 1] ProcessGroupNCCL
environments: NCCL version: 2.25.1``). One job whose processes print different NCCL versions
mixes builds across nodes: bootstrap messages then mean different things on each side
(garbage addresses, internal errors). Pure: events in, verdicts out.
"""

from __future__ import annotations

import re
from collections import defaultdict

from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, verdict

_HOST = re.compile(r"^(?P<host>[A-Za-z0-9][\w.\-]*):\d+:\d+ \[\d+\]")


def _who(e: Event) -> str:
    m = _HOST.match(e.text)
    if m:
        return m["host"]
    return f"rank {e.rank}" if e.rank is not None else ""


def nccl_versions_differ(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    said = [e for e in ix.of(K.VERSION) if e.data.get("nccl") and _who(e)]
    # a process that prints two versions (two libraries loaded, or a misprint) says nothing
    # about the others: only whoever prints one version is compared
    versions_of: dict[str, set[str]] = defaultdict(set)
    for e in said:
        versions_of[_who(e)].add(str(e.data["nccl"]))
    by_version: dict[str, list[Event]] = defaultdict(list)
    for e in said:
        if len(versions_of[_who(e)]) == 1:
            by_version[str(e.data["nccl"])].append(e)
    if len(by_version) < 2:
        return []
    # The smaller group is the odd one out; with a tie, every side is named.
    sizes = sorted(by_version.items(), key=lambda kv: len({_who(e) for e in kv[1]}))
    odd = [] if len({len({_who(e) for e in evs}) for _, evs in sizes}) == 1 else sizes[0][1]
    where = {v: sorted({_who(e) for e in evs}) for v, evs in by_version.items()}
    which = "; ".join(f"NCCL {v} on {', '.join(w)}" for v, w in sorted(where.items()))
    evs = [e for group in by_version.values() for e in group]
    return [verdict(ix, "ENV_VERSION_MISMATCH", f"the job's processes run different NCCL "
                    f"versions ({which}): install one NCCL (one torch build) on every node",
                    evs, {"nccl_versions": where},
                    ranks=sorted({e.rank for e in odd if e.rank is not None}))]


def nccl_plugins_differ(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """Nodes that load different NCCL network plugins (HPC-X's on some, NCCL's internal one
    on others) do not speak the same transport: the job hangs with no error.

    One node describes its plugin in several lines (its name, "Loaded net plugin NCCL RDMA
    Plugin v6"; its file, "Plugin Path : /opt/hpcx/.../libnccl-net.so"): nodes are compared
    by what they loaded, an external plugin or NCCL's internal one, and by the plugin's
    file where two nodes name one."""
    by_host: dict[str, list[Event]] = defaultdict(list)
    for e in ix.of(K.NCCL_NET):
        if e.data.get("plugin") and _HOST.match(e.text):
            by_host[_who(e)].append(e)
    loaded = {h: _loaded(evs) for h, evs in by_host.items()}
    if not _differ(loaded):
        return []
    said = "; ".join(f"{h}: {', '.join(sorted(ps))}" for h, ps in sorted(loaded.items()))
    evs = sorted((e for group in by_host.values() for e in group), key=ix.pos)
    hosts: dict[str, list[str]] = defaultdict(list)
    for h, ps in sorted(loaded.items()):
        for p in sorted(ps):
            hosts[p].append(h)
    return [verdict(ix, "ENV_VERSION_MISMATCH", f"the nodes load different NCCL network "
                    f"plugins ({said}): install the same NCCL network plugin on every node, "
                    "or none", evs, {"nccl_net_plugins": dict(hosts)}, ranks=[])]


def _differ(loaded: dict[str, set[str]]) -> bool:
    """Whether some node loaded NCCL's internal plugin and another an external one, or two
    nodes name different plugin files."""
    kinds = {"internal" if ps == {"internal"} else "external" for ps in loaded.values()}
    files = {frozenset(f) for ps in loaded.values() if (f := {p for p in ps
                                                             if p.startswith("/")})}
    return len(kinds) > 1 or len(files) > 1


def _loaded(evs: list[Event]) -> set[str]:
    """What one node's lines say it loaded: the internal plugin only where no line names
    an external one (a node may look for a plugin in several places before it finds one)."""
    named = {str(e.data["plugin"]) for e in evs}
    return named - {"internal"} or named


def driver_mismatch(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """NVML says the loaded NVIDIA kernel driver is not its library's version."""
    bad = ix.of(K.DRIVER_MISMATCH)
    if not bad:
        return []
    hosts = sorted({m["host"] for e in bad if (m := _HOST.match(e.text))})
    ranks = sorted({e.rank for e in bad if e.rank is not None})
    who = (", ".join(hosts) if hosts else
           f"the node of rank {', '.join(map(str, ranks))}" if ranks else "a node")
    return [verdict(ix, "ENV_VERSION_MISMATCH", f"the NVIDIA kernel driver on {who} is not "
                    "the version of its user-space library (Driver/library version mismatch: "
                    "a driver upgraded without a reboot): NVML and NCCL cannot start there",
                    bad, {"fix": "reboot the node (or unload and reload the nvidia kernel "
                                 "modules); `nvidia-smi` says the same until then"})]


RULE = Rule("nccl_versions_differ", nccl_versions_differ, frozenset({K.VERSION}))
PLUGIN_RULE = Rule("nccl_plugins_differ", nccl_plugins_differ, frozenset({K.NCCL_NET}))
DRIVER_RULE = Rule("driver_mismatch", driver_mismatch, frozenset({
    K.NCCL_SYSTEM, K.NCCL_DETAIL, K.NCCL_WARN, K.EXCEPTION, K.ERROR_LINE, K.PROCESS_EXIT,
    K.NCCL_REMOTE, K.CPP_ABORT}))
