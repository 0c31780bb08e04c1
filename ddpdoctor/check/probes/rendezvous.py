"""Rendezvous endpoint: does MASTER_ADDR resolve, and is MASTER_PORT free or reachable?

Runs once in the doctor's own process (not in a rank): it checks the endpoint the user's
job will use, which is not the one the doctor's own ranks rendezvous on.
"""

from __future__ import annotations

import errno
import os
import socket
from typing import TYPE_CHECKING

from ddpdoctor.check.analysis.rendezvous import analyze
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe
from ddpdoctor.check.probes.records import PortOwner, RendezvousData
from ddpdoctor.core import redact

if TYPE_CHECKING:
    from ddpdoctor.check.launcher.outcome import RankContext

NAME = "rendezvous"
CONNECT_TIMEOUT_S = 3.0


def _local_addresses() -> set[str]:
    import psutil

    addrs = {"0.0.0.0", "::"}
    for entries in psutil.net_if_addrs().values():
        addrs.update(a.address.split("%")[0] for a in entries
                     if a.family in (socket.AF_INET, socket.AF_INET6))
    return addrs


def _port_owner(port: int) -> PortOwner | None:
    import psutil

    try:
        for c in psutil.net_connections(kind="inet"):
            if c.laddr and c.laddr.port == port and c.status == psutil.CONN_LISTEN:
                owner: PortOwner = {"pid": c.pid}
                if c.pid:
                    try:
                        p = psutil.Process(c.pid)
                        # Its --token/--password values never reach the report.
                        owner["cmdline"] = " ".join(redact.argv(p.cmdline()))[:300]
                    except psutil.Error:
                        pass
                return owner
    except (psutil.AccessDenied, PermissionError):
        return None
    return None


def bind_like_the_store(port: int) -> OSError | None:
    """None when torch's TCPStore could bind ``port`` on this host; else the bind's error.

    The store (libuv and legacy backends alike, torch 2.4 to 2.13) binds the wildcard
    address, IPv6 dual-stack (``::``; ``0.0.0.0`` where there is no IPv6), with
    SO_REUSEADDR; so does this probe, then closes the socket at once. A plain bind of
    MASTER_ADDR got both cases wrong: it called a port whose only sockets are in TIME-WAIT
    (for a minute after any job on it ended) "in use", though the store binds over them;
    and it missed a listener on another address of this host, which the store's wildcard
    bind collides with. A LISTEN socket on the port fails the bind whatever SO_REUSEADDR
    says (Linux), which is the real conflict.
    """
    last: OSError | None = None
    for family, addr in ((socket.AF_INET6, "::"), (socket.AF_INET, "0.0.0.0")):
        try:
            s = socket.socket(family, socket.SOCK_STREAM)
        except OSError as e:  # no IPv6 on this host: the store falls back to IPv4 too
            last = e
            continue
        with s:
            try:
                s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                if family == socket.AF_INET6:
                    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 0)
                s.bind((addr, port))
                return None
            except OSError as e:
                if e.errno == errno.EADDRINUSE:
                    return e
                last = e
    return last


def collect(ctx: RankContext | None, opts: CheckOptions) -> RendezvousData:
    host = opts.master_addr or os.environ.get("MASTER_ADDR") or "127.0.0.1"
    port = int(opts.master_port or os.environ.get("MASTER_PORT") or 29500)
    out: RendezvousData = {"master_addr": host, "master_port": port}
    try:
        infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    except socket.gaierror as e:
        out["resolve_error"] = e.strerror or str(e)
        return out
    family, _, _, _, sockaddr = infos[0]
    resolved = str(sockaddr[0])  # an address string for the AF_INET(6) of a host name
    out["resolved"] = resolved
    out["local"] = resolved in _local_addresses() or resolved.startswith("127.")
    if out["local"]:
        # The job's rank 0 will listen here: its store must be able to bind the port.
        err = bind_like_the_store(port)
        out["port_free"] = err is None
        if err is not None:
            out["bind_error"] = f"[Errno {err.errno}] {err.strerror}"
            if err.errno == errno.EADDRINUSE:
                out["owner"] = _port_owner(port)
        return out
    # A remote master: nothing may listen yet (the job has not started), so "refused" is
    # fine; what matters is that the host answers at all.
    with socket.socket(family, socket.SOCK_STREAM) as s:
        s.settimeout(CONNECT_TIMEOUT_S)
        try:
            s.connect(sockaddr)
            out["reachable"], out["listening"] = True, True
        except ConnectionRefusedError:
            out["reachable"], out["listening"] = True, False
        except OSError as e:
            out["reachable"] = False
            out["connect_error"] = (f"timed out after {CONNECT_TIMEOUT_S:g} s"
                                    if isinstance(e, TimeoutError) else
                                    f"[Errno {e.errno}] {e.strerror}")
    return out


PROBE = Probe(NAME, "Communication", "parent", collect, analyze)
