"""Triage rules for the environment: ports, GPUs, NCCL settings, the network path."""

from __future__ import annotations

import re
from collections import Counter

from ddpdoctor.core.findings import format_ranks
from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, cut, fmt, ranks_of, verdict
from ddpdoctor.diagnose.kb.nccl import IB_STATUS

_NCCL_FALLOUT = frozenset({K.NCCL_DETAIL, K.NCCL_SYSTEM, K.NCCL_WARN, K.NCCL_CUDA, K.ERROR_LINE,
                           K.CUDA_ERROR, K.EXCEPTION, K.NCCL_REMOTE, K.NCCL_PEER_LOST,
                           K.CPP_ABORT, K.PROCESS_EXIT})


def port_in_use(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    busy = ix.of(K.ADDR_IN_USE)
    if not busy:
        return []
    port = next((e.data["port"] for e in busy if e.data.get("port")), None)
    title = (f"port {port} is already in use: the rendezvous/store cannot listen on it"
             if port else "the rendezvous port is already in use (the log does not name it)")
    return [verdict(ix, "ENV_PORT_IN_USE", title, busy, {"port": port} if port else {},
                    ranks=[])]


# losses printed after a device-mapping failure: the job got past it
TRAINED_ON = 3


def device_mapping(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    dup = ix.of(K.DUPLICATE_GPU)
    if not dup:
        return []
    d = dup[0].data
    if "rank_a" in d:
        pairs = {(e.typed("device", str), e.typed("rank_a", int), e.typed("rank_b", int))
                 for e in dup if "rank_a" in e.data}
        ranks = sorted({r for _, a, b in pairs for r in (a, b)})
        more = len({device for device, _, _ in pairs}) - 1
        title = (f"rank {d['rank_a']} and rank {d['rank_b']} both use CUDA device "
                 f"{d['device']}" + (f" (and ranks share {more} more device(s))" if more else "")
                 + ": each rank needs its own GPU")
        ev = {"device": d["device"], "ranks_on_device": ranks}
    elif d.get("busy"):
        ranks = ranks_of(dup)
        title = ("a rank's CUDA device was busy or unavailable: the GPU is in exclusive-process "
                 "mode and another process holds it (two ranks given one GPU, or a process "
                 "left over from an earlier run)")
        ev = {"hint": "nvidia-smi shows which processes hold each GPU; map each rank to its "
                      "own GPU (LOCAL_RANK) and stop leftovers"}
    else:
        ranks = ranks_of(dup)
        title = ("a rank asked for a CUDA device that does not exist (invalid device ordinal): "
                 "more processes per node than visible GPUs, or LOCAL_RANK mapped wrongly")
        ev = {}
    trained = [e for e in ix.of(K.LOSS_VALUE) if ix.pos(e) > ix.pos(dup[-1])]
    past = len(trained) >= TRAINED_ON
    if past:
        # a communicator made while every process still sat on one GPU (a start-up probe)
        # failed; the job's own one, made after, trained: not the job's fault
        title += (f"; but the job trained on after it ({len(trained)} losses): a communicator "
                  "made before each rank took its own GPU (a start-up probe), not the one it "
                  "trained on")
    return [verdict(ix, "GPU_DEVICE_MAPPING", title, dup, ev, ranks=list(ranks or []),
                    severity="warning" if past else "")]


def device_held(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """The accelerator's runtime says a process of an earlier run still owns the device:
    the new one cannot start on it until that one is gone."""
    held = ix.of(K.DEVICE_HELD)
    if not held:
        return []
    return [verdict(ix, "GPU_MEMORY_OCCUPIED", "the device is still held by an earlier "
                    f"process ({cut(held[0].text, 140)}): stop it, wait, and start again",
                    held, {"family": "device_held",
                           "hint": "list the processes on the device (npu-smi info / "
                                   "nvidia-smi), kill the leftover training processes, wait "
                                   "~10 s for the driver to release it, then relaunch"},
                    severity="error")]


def gpu_health(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    # A device that faulted on its own (ROCm's "HW Exception ... GPU Hang") is the GPU's
    # health, unless a kernel's memory fault came first: then the hang is that crash's
    # consequence (cuda_crash names it)
    faults = [] if ix.of(K.GPU_MEMFAULT, K.CUDA_ILLEGAL) else ix.of(K.GPU_FAULT)
    bad = ix.of(K.GPU_ECC, K.GPU_XID) + faults
    fabric = ix.of(K.GPU_FABRIC)
    if not bad and not fabric:
        return []
    if not bad:
        who = f" on rank {fmt(fabric)}" if fmt(fabric) else ""
        return [verdict(ix, "GPU_HEALTH", f"the node's NVSwitch fabric is not ready{who} "
                        f"({fabric[0].data.get('what', '')}): the Fabric Manager is down or not "
                        "at the driver's version", fabric,
                        {"action": "check `systemctl status nvidia-fabricmanager` (its version "
                                   "must match the driver's), restart it or drain the node; "
                                   "NCCL_NVLS_ENABLE=0 only avoids NVLS"})]
    first = bad[0]
    if first.kind is K.GPU_XID:
        what = f"Xid {first.data['xid']} on {first.data['pci']}: {first.data['message']}"
    elif first.kind is K.GPU_FAULT:
        what = (f"the GPU runtime reported a hardware exception on GPU node-"
                f"{first.data['node']}: {first.data['reason']} (the other ranks' collective "
                "timeouts follow from it)")
    else:
        what = "uncorrectable ECC error"
    who = f" on rank {fmt(bad)}" if fmt(bad) else ""
    action = ("read the driver's account (`dmesg | grep -i amdgpu`: a reset, a page fault), "
              "reset the GPU or reboot the node before the next run, and drain the node if "
              "it recurs" if first.kind is K.GPU_FAULT else
              "drain the node and have the GPU checked (nvidia-smi -q -d ECC)")
    return [verdict(ix, "GPU_HEALTH", f"GPU hardware fault{who}: {what}; drain the node", bad,
                    {"action": action})]


def _loopback(e: Event) -> bool:
    addr = str(e.data.get("address", ""))
    if not addr.startswith("127."):
        return False
    # A gloo pair or NCCL socket to loopback is an interface choice; the store on
    # 127.0.0.1 with torchrun --standalone is normal.
    return e.kind is K.NCCL_SOCKET or "pair.cc" in e.text or addr == "127.0.1.1"


def nccl_config(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    xml = ix.of(K.NCCL_XML)
    configured = ix.of(K.NET_CONFIG)
    loop = [e for e in ix.of(K.NCCL_SOCKET, K.CONN_REFUSED) if _loopback(e)]
    out = []
    env = {e.data["var"]: e.data["value"] for e in ix.of(K.NCCL_ENV)}
    if xml:
        files = {k: v for k, v in env.items() if k in ("NCCL_GRAPH_FILE", "NCCL_TOPO_FILE")}
        var = ", ".join(f"{k}={v}" for k, v in files.items()) or "NCCL_GRAPH_FILE/NCCL_TOPO_FILE"
        out.append(verdict(ix, "ENV_NCCL_CONFIG",
                           f"NCCL's topology/graph file does not match this machine (device "
                           f"{xml[0].data['dev']} not found): {var}", xml + ix.of(K.NCCL_ENV),
                           {"variables": files}, ranks=[]))
    if configured:
        out.append(_node_local(ix, configured) or _configured(ix, configured, env))
    if loop:
        d = loop[0].data
        lib = "NCCL_SOCKET_IFNAME" if loop[0].kind is K.NCCL_SOCKET else "GLOO_SOCKET_IFNAME"
        out.append(verdict(ix, "ENV_NCCL_CONFIG",
                           f"a rank connected to the loopback address {d['address']}:"
                           f"{d.get('port', '?')} ({d.get('reason', 'refused')}): the peers "
                           f"advertise the wrong interface; set {lib}", loop,
                           {"address": d["address"], "setting": lib}, ranks=[]))
    return out


def _configured(ix: EventIndex, configured: list[Event], env: dict[object, object]) -> Verdict:
    """An interface or network setting NCCL or gloo cannot work with, named."""
    d = configured[0].data
    env_ifname = env.get("NCCL_SOCKET_IFNAME")
    if "local_size" in d:
        title = (f"NCCL ranks disagree on message sizes with peer {d['peer']} (local "
                 f"{d['local_size']} vs remote {d['remote_size']}): NCCL_* settings "
                 "differ between nodes")
    elif "interface" in d:
        title = (f"gloo found no interface named {d['interface']!r}: set "
                 "GLOO_SOCKET_IFNAME to one existing interface name (gloo does not take "
                 "NCCL's ^exclude lists)")
    elif configured[0].typed("config", str).startswith("GLOO"):
        title = ("gloo could not resolve this host's name to a local address and used "
                 "loopback, so other nodes cannot reach it: set GLOO_SOCKET_IFNAME")
    elif d.get("plugin_failed"):
        net = env.get("NCCL_NET")
        title = ("NCCL could not initialize any network plugin"
                 + (f" (NCCL_NET={net})" if net else "") + ": NCCL_NET names a transport "
                 "this NCCL cannot load (IB, Socket or a plugin's name; SHM is none), or "
                 "the installed plugin (libnccl-net.so) fails: unset NCCL_NET or fix it")
    elif env_ifname and d["config"] == "NCCL_SOCKET_IFNAME":
        title = (f"NCCL_SOCKET_IFNAME={env_ifname} matches no usable interface on this "
                 "host: set it to an existing interface (ip -br addr)")
    else:
        title = f"NCCL found no usable network interface: set {d['config']}"
    return verdict(ix, "ENV_NCCL_CONFIG", title, configured, {"setting": d["config"]},
                   ranks=[])


_SRUN_HOST = re.compile(r"srun: error: ([\w.-]+): tasks? ")  # a task's death, on its node


def _node_local(ix: EventIndex, failed: list[Event]) -> Verdict | None:
    """NCCL's network plugin failed on a few ranks while at least as many others printed
    on without that failure: one launch, one setting, so not the setting but the failing
    ranks' node (its plugin install, NIC or driver): COMM_CONNECTIVITY on those ranks."""
    failed = [e for e in failed if e.data.get("plugin_failed")]
    if any(e.rank is None or e.rank_from for e in failed):
        return None  # a failure whose rank its line does not say may be every rank's
    bad = sorted({e.rank for e in failed if e.rank is not None})
    others = ix.ranks_seen - set(bad)
    if not bad or len(others) < max(2, len(bad)):
        return None
    hosts = sorted({m.group(1) for e in ix.of(K.FLOOR) if e.rank in bad
                    and (m := _SRUN_HOST.match(e.text))})
    where = f" on {', '.join(hosts)}" if hosts else ""
    return verdict(ix, "COMM_CONNECTIVITY",
                   f"only ranks {format_ranks(bad)}{where} could not initialize NCCL's network "
                   f"plugin (\"Failed to initialize any NET plugin\"); {len(others)} other ranks "
                   "of the same launch did: their node's network (its NCCL plugin, NIC or "
                   "driver) is at fault, not a setting: drain that node and restart",
                   [e for e in failed if e.rank in bad],
                   {"family": "node_network", "other_ranks": len(others)}, ranks=bad)


# Interfaces a container runtime, VM bridge, overlay network or VPN makes on one host: no
# path to another node. NCCL takes every interface it finds unless NCCL_SOCKET_IFNAME says.
_VIRTUAL_IFACE = re.compile(
    r"^(?:docker\d*|br-[0-9a-f]+|veth\w*|virbr\d*|cni\d*|flannel[.\w]*|cali\w+|vxlan[.\w]*"
    r"|lxcbr\d*|lxdbr\d*|podman\d*|tun\d*|tap\w*|kube-\w+|weave|tailscale\d*|wg\d*|zt\w+"
    r"|CloudflareWARP)$")


def nccl_ifaces(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A connection NCCL could not make, from a host whose NCCL listed container or
    virtual interfaces beside a real one (the socket transport tried those), or loopback
    alone (which reaches no other host)."""
    failed = ix.of(K.NCCL_SYSTEM, K.NCCL_SOCKET)
    listed = ix.of(K.NCCL_IFACES)
    if not listed:
        return []
    names = list(dict.fromkeys(n for e in listed for n in e.typed("interfaces", list)))
    refused = ix.of(K.CONN_REFUSED)
    if names == ["lo"] and (failed or refused):
        return [verdict(ix, "ENV_NCCL_CONFIG",
                        "NCCL's sockets use the loopback interface alone (lo), and its "
                        "connections fail: loopback reaches no other node; set "
                        "NCCL_SOCKET_IFNAME to the interface the nodes share",
                        (failed or refused)[:3] + listed[:1],
                        {"interfaces": names, "setting": "NCCL_SOCKET_IFNAME"}, ranks=[])]
    if not failed:
        return []
    virtual = [n for n in names if _VIRTUAL_IFACE.match(n)]
    real = [n for n in names if n not in virtual and n != "lo"]
    if not virtual or not real:
        return []
    shown = ", ".join(virtual[:3]) + (f" and {len(virtual) - 3} more" if len(virtual) > 3 else "")
    title = (f"NCCL could not connect, and its sockets use {len(names)} interfaces, "
             f"{len(virtual)} of them container or virtual ({shown}) that reach no other node: "
             f"set NCCL_SOCKET_IFNAME={real[0]} (the interface the nodes share)")
    return [verdict(ix, "ENV_NCCL_CONFIG", title, failed + listed[:2],
                    {"interfaces": names, "virtual": virtual, "setting": "NCCL_SOCKET_IFNAME"},
                    ranks=[])]


def no_p2p(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A library refused to run: the GPUs of this node cannot talk peer-to-peer."""
    said = ix.of(K.NO_P2P)
    if not said:
        return []
    d = said[0].data
    return [verdict(ix, "TOPO_NO_P2P", str(d["what"]), said, {"fix": d["fix"]}, ranks=[],
                    severity="error")]


def ib_errors(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    ib = ix.of(K.IB_COMPLETION)
    if not ib:
        return _ib_async(ix)
    d = ib[0].data
    if "code" not in d:
        # libmlx5's own dump: the status is in its hex lines, not on the line
        return [verdict(ix, "COMM_CONNECTIVITY", "the InfiniBand adapter reported a completion "
                        f"with error (libmlx5, host {d.get('host', '?')}): a transfer on the "
                        "link failed, or its peer went away", ib,
                        {"hint": "check the link (ibstat, the port's error counters) and "
                                 "whether a peer process died first"})]
    peer = f" from peer {d['peer']}" if d.get("peer") else ""
    hca = f" on {d['hca']}" if d.get("hca") else ""
    name = IB_STATUS.get(ib[0].typed("code", int), f"status {d['code']}")
    ev: dict[str, object] = {k: d[k] for k in ("peer", "hca", "code", "vendor_err") if k in d}
    ev["status_name"] = name
    if d["code"] == 12:
        ev["meaning"] = ("the remote HCA never acknowledged (transport retry exceeded): link "
                         "down, wrong GID/RoCE routing, or the peer is gone")
    return [verdict(ix, "COMM_CONNECTIVITY",
                    f"InfiniBand completion error {d['code']} ({name}){peer}{hca}, vendor err "
                    f"{d['vendor_err']}", ib, ev)]


def _ib_async(ix: EventIndex) -> list[Verdict]:
    """The adapter itself reports trouble (port error, catastrophic error): the node's
    InfiniBand hardware, not the job."""
    events = ix.of(K.IB_ASYNC)
    if not events:
        return []
    kinds = sorted({e.get_str("event", "?") for e in events})
    return [verdict(ix, "COMM_CONNECTIVITY", f"the InfiniBand adapter reported {', '.join(kinds)} "
                    "(an async event of the HCA): the node's link or adapter failed", events,
                    {"ib_events": kinds})]


def families(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A failure whose message names its cause by errno and wording (kb/families.py): a host
    name that does not resolve, a process out of file descriptors."""
    out = []
    taken = {e.rank for v in earlier for e in v.events if v.finding.severity == "error"}
    for kind, fid, what in ((K.FAMILY_RESOLVE, "ENV_RENDEZVOUS_UNREACHABLE",
                             "a host name did not resolve"),
                            (K.FAMILY_SSH, "ENV_RENDEZVOUS_UNREACHABLE",
                             "the launcher could not reach a node of its hostfile over ssh "
                             "(DeepSpeed's multi-node launcher needs passwordless ssh from "
                             "this node to every host)"),
                            (K.FAMILY_LIMITS, "ENV_LIMITS",
                             "a process ran out of file descriptors (the open-file limit, "
                             "`ulimit -n`)"),
                            (K.FAMILY_START, "UNRECOGNIZED_FAILURE",
                             "the launcher could not start what it was told to run"),
                            (K.FAMILY_RDZV_ENV, "ENV_RENDEZVOUS_UNREACHABLE",
                             "init_process_group's env:// rendezvous lacks a variable a "
                             "launcher sets (torchrun sets MASTER_ADDR, MASTER_PORT, RANK, "
                             "WORLD_SIZE; a script run with plain python has none)"),
                            (K.FAMILY_BACKEND, "ENV_NCCL_CONFIG",
                             "init_process_group asked for a backend this torch build does "
                             "not have (Windows and macOS builds have no NCCL: use gloo there, "
                             "or run where the build has it)"),
                            (K.FAMILY_SAMPLER, "SAMPLER_MISSING",
                             "the loop calls set_epoch on a sampler that is not a "
                             "DistributedSampler: every rank reads the whole dataset")):
        evs = [e for e in ix.of(kind) if e.rank not in taken or e.rank is None]
        if evs and not earlier:
            if kind is K.FAMILY_START and all(_CANT_OPEN in e.text for e in evs):
                # the rank's own Python started and could not open its script: the rank's
                # process failed (as an import error would), not the launcher
                fid, what = "RANK_CRASHED", ("the rank's Python could not open the script it "
                                             "was told to run")
            # the job died of it: an error, whatever the id's default (ENV_LIMITS warns)
            # one space per run, and execve(): no empty slot in a title
            quoted = cut(" ".join(evs[0].text.replace("()", "").split()), 160)
            out.append(verdict(ix, fid, f"{what}: {quoted}", evs,
                               {"family": kind.value}, severity="error"))
    return out


# CPython's words for a script path it cannot open (python: can't open file 'x': [Errno 2])
_CANT_OPEN = "can't open file"
_STORE_WAITED = re.compile(r"clients joined|waiting for clients")


def _odd_endpoints(address: dict[int, str], waited: list[Event]
                   ) -> tuple[list[int], str, str] | None:
    """(the ranks whose endpoint is the odd one out, the usual endpoint, why), or None."""
    counts = Counter(address.values())
    top = max(counts.values())
    if len(counts) > 1 and list(counts.values()).count(top) == 1:
        usual = counts.most_common(1)[0][0]
        return (sorted(r for r, a in address.items() if a != usual), usual,
                f"the other ranks connect to {usual}")
    if {e.rank for e in waited} - set(address):
        return sorted(address), "", f"rank {fmt(waited)}'s store was up, waiting for its clients"
    return None


def rendezvous_split(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A rendezvous that never completed, and the ranks its lines show it starts from.

    A rank's own c10d connect lines name the store address it was given ("...while trying
    to connect to (host, port)"). The ranks that timed out connecting while another rank's
    store sat waiting for its clients ("1/2 clients joined": it was up) were given an
    endpoint that does not reach it; among several connecting ranks, those naming another
    address than most are. Needs the ranks of the lines (prefixes, per-rank logs); run
    adds each rank's environment (run/rendezvous.py)."""
    connects = [e for e in ix.of(K.CONNECT_TIMEOUT) if e.rank is not None
                and e.data.get("host") and e.data.get("port")]
    waited = [e for e in ix.events if e.rank is not None and e.kind is not K.CONNECT_TIMEOUT
              and _STORE_WAITED.search(e.text)]
    if not connects:
        return []
    address: dict[int, str] = {}
    for e in connects:
        if e.rank is not None:  # connects holds ranked events only
            address.setdefault(e.rank, f"{e.data['host']}:{e.data['port']}")
    split = _odd_endpoints(address, waited)
    if split is None:
        return []
    odd, usual, why = split
    evs = [e for e in connects if e.rank in odd] + waited
    named = ", ".join(sorted({address[r] for r in odd}))
    return [verdict(ix, "ENV_RENDEZVOUS_UNREACHABLE",
                    f"rank {', '.join(map(str, odd))} could not reach the rendezvous store at "
                    f"{named}: {why} (its endpoint differs or its path is blocked)", evs,
                    {"endpoints": {str(r): a for r, a in sorted(address.items())},
                     **({"expected": usual} if usual else {})}, ranks=odd)]


RULES = (
    Rule("rendezvous_split", rendezvous_split, frozenset({
        K.EXCEPTION, K.TRACEBACK, K.ERROR_LINE, K.CONNECT_TIMEOUT, K.CONN_REFUSED,
        K.STORE_TIMEOUT})),
    Rule("port_in_use", port_in_use, frozenset({K.EXCEPTION, K.ERROR_LINE, K.PROCESS_EXIT})),
    Rule("device_mapping", device_mapping, _NCCL_FALLOUT),
    Rule("device_held", device_held, _NCCL_FALLOUT | {K.TRACEBACK}),
    Rule("gpu_health", gpu_health, _NCCL_FALLOUT | {K.CUDA_ILLEGAL, K.NCCL_WATCHDOG}),
    Rule("nccl_config", nccl_config, _NCCL_FALLOUT | {K.CONN_REFUSED, K.NCCL_SOCKET,
                                                       K.CONNECT_TIMEOUT, K.GLOO_TIMEOUT}),
    Rule("no_p2p", no_p2p, _NCCL_FALLOUT),
    Rule("nccl_ifaces", nccl_ifaces, _NCCL_FALLOUT | {K.NCCL_SOCKET, K.NCCL_IFACES}),
    Rule("ib_errors", ib_errors, _NCCL_FALLOUT | {K.NCCL_WATCHDOG, K.IB_ASYNC}),
    Rule("families", families, frozenset({K.EXCEPTION, K.TRACEBACK, K.CPP_ABORT, K.ERROR_LINE,
                                          K.FLOOR, K.FAMILY_RESOLVE, K.FAMILY_LIMITS,
                                          K.FAMILY_START, K.FAMILY_RDZV_ENV,
                                          K.FAMILY_SAMPLER, K.FAMILY_SSH, K.FAMILY_BACKEND,
                                          K.AGENT_FAILED,
                                          K.TORCHRUN_FAILURE, K.DL_WORKER_EXCEPTION,
                                          K.SHM_ALLOC})),
)
