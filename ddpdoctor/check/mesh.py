"""The socket mesh: every rank opens a TCP connection to every other rank, all at once.

One round proves every rank pair, hence every node pair, reachable in both directions
over the path the job's bootstrap uses, before any process group exists (a pair that
cannot connect makes gloo's full-mesh init fail, naming neither side). Each rank listens
on the address it reaches the rendezvous host from (or its ``*_SOCKET_IFNAME``
interface), publishes it in the store, then connects to every peer concurrently, each
connection with its own deadline. A listener answers a connection with its rank, so a
connection that lands on some other process is not counted as reaching the peer.

The rank side is here; the pure analysis is ``ddpdoctor/check/analysis/reachability.py``.
"""

from __future__ import annotations

import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import Any

from ddpdoctor.contract import MESH_KEY

HELLO = b"ddpdoctor-mesh "
# Concurrent outgoing connections per rank: bounded so 4,096 ranks stay under a default
# 1,024-descriptor limit, while a few dead peers (each holding a worker for its whole
# deadline) do not serialise the rest.
MAX_CONNECTING = 32


def _key(what: str) -> str:
    return MESH_KEY.format(run=os.environ.get("TORCHELASTIC_RUN_ID", "local"),
                           attempt=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"),
                           what=what)


def _ifname_address(backend: str) -> str | None:
    """IPv4 address of the interface ``GLOO_SOCKET_IFNAME`` / ``NCCL_SOCKET_IFNAME`` names
    (its first exact name; prefixes and exclusions ``^``/``=`` are left to the route)."""
    import psutil

    var = "NCCL_SOCKET_IFNAME" if backend == "nccl" else "GLOO_SOCKET_IFNAME"
    name = os.environ.get(var, "").split(",")[0].strip()
    if not name or name[0] in "^=":
        return None
    for a in psutil.net_if_addrs().get(name, []):
        if a.family == socket.AF_INET:
            return str(a.address)
    return None


def route_address(towards: str) -> str | None:
    """The local address this host sends from to reach ``towards`` (nothing is sent)."""
    try:
        family = socket.AF_INET6 if ":" in towards else socket.AF_INET
        with socket.socket(family, socket.SOCK_DGRAM) as s:
            s.connect((towards, 9))
            return str(s.getsockname()[0])
    except OSError:
        return None


def local_address(backend: str) -> str:
    master = os.environ.get("MASTER_ADDR", "127.0.0.1")
    return _ifname_address(backend) or route_address(master) or "127.0.0.1"


class _Listener:
    """Accepts connections and answers each with this rank's hello, until stopped."""

    def __init__(self, addr: str, rank: int, backlog: int) -> None:
        family = socket.AF_INET6 if ":" in addr else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        self.sock.bind((addr, 0))
        self.sock.listen(backlog)
        self.sock.settimeout(0.1)
        self.port = int(self.sock.getsockname()[1])
        self.hello = HELLO + str(rank).encode() + b"\n"
        self._stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, name="ddpdoctor-mesh", daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            try:
                conn.settimeout(1.0)
                conn.sendall(self.hello)
            except OSError:
                pass
            finally:
                conn.close()

    def close(self) -> None:
        self._stop.set()
        self.thread.join(timeout=2)
        self.sock.close()


def _reach(me: str, peer: int, where: str, timeout_s: float) -> dict[str, Any]:
    host, _, port = where.rpartition(":")
    start = time.perf_counter()
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s,
                                      source_address=(me, 0)) as s:
            got = b""
            while not got.endswith(b"\n") and len(got) < 64:
                chunk = s.recv(64)
                if not chunk:
                    break
                got += chunk
    except OSError as e:
        return {"ok": False, "error": f"{type(e).__name__}: {e}"[:200]}
    ms = round((time.perf_counter() - start) * 1e3, 3)
    if got != HELLO + str(peer).encode() + b"\n":
        return {"ok": False, "ms": ms,
                "error": f"the listener at {where} is not rank {peer}: {got[:40]!r}"}
    return {"ok": True, "ms": ms}


def _addresses(store: Any, world: int, budget_s: float) -> dict[int, str]:
    keys = [_key(f"addr/{r}") for r in range(world)]
    try:
        store.wait(keys, timedelta(seconds=max(0.1, budget_s)))
    except Exception:  # some ranks never published: test the others
        pass
    out: dict[int, str] = {}
    for r, k in enumerate(keys):
        try:
            if store.check([k]):
                out[r] = store.get(k).decode()
        except Exception:
            continue
    return out


def run_mesh(store: Any, rank: int, world: int, backend: str, timeout_s: float,
             budget_s: float) -> dict[str, Any]:
    """This rank's row of the mesh: its address and, per peer, whether it connected.

    Waits (within ``budget_s``) for every rank to finish connecting before it stops
    listening, so a slow peer is not refused by a listener that already left.
    """
    started = time.monotonic()
    addr = local_address(backend)
    listener = _Listener(addr, rank, backlog=min(4096, max(16, world)))
    node = socket.gethostname()
    try:
        where = f"[{addr}]:{listener.port}" if ":" in addr else f"{addr}:{listener.port}"
        store.set(_key(f"addr/{rank}"), f"{where} {node}")
        published = _addresses(store, world, budget_s / 2)
        peers = {r: v.split(" ", 1) for r, v in published.items() if r != rank}
        with ThreadPoolExecutor(max_workers=max(1, min(MAX_CONNECTING, len(peers)))) as pool:
            futures = {r: pool.submit(_reach, addr, r, w, timeout_s)
                       for r, (w, _) in peers.items()}
            results = {str(r): f.result() for r, f in futures.items()}
        for r, (_, peer_node) in peers.items():
            results[str(r)]["node"] = peer_node
        connect_s = round(time.monotonic() - started, 3)
        done = store.add(_key("done"), 1)
        while done < world and time.monotonic() - started < budget_s:
            time.sleep(0.05)
            done = store.add(_key("done"), 0)
    finally:
        listener.close()
    return {"address": where, "node": node, "peers": results,
            "unpublished": sorted(r for r in range(world) if r not in published),
            "connect_s": connect_s, "seconds": round(time.monotonic() - started, 3)}
