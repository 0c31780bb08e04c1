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

import json
import os
import socket
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from typing import TYPE_CHECKING, TypedDict, final

from ddpdoctor.core.contract import MESH_KEY

if TYPE_CHECKING:
    from torch.distributed import Store

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


class _Reach(TypedDict, total=False):
    """One connection to a peer's listener: whether it answered as that rank."""

    ok: bool
    ms: float
    error: str


class MeshRow(TypedDict):
    """One rank's row of the mesh (the reachability probe's data, ``run_mesh``)."""

    address: str  # where this rank listened, "host:port" ("[v6]:port")
    node: str
    tried: int
    failed: dict[str, str]  # peer rank -> why the connection to it failed
    slowest_ms: float
    unpublished: list[int]  # ranks whose address this rank never received
    cut: bool
    all_finished: bool
    connect_s: float
    seconds: float


@final
class MeshSkipped(TypedDict):
    """The reachability probe's data when no mesh ran (one rank, or no store)."""

    skipped: str


def _reach(me: str, peer: int, where: str, timeout_s: float) -> _Reach:
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


def _addresses(store: Store, rank: int, world: int, budget_s: float) -> dict[int, str]:
    """Every published ``address node``, read with O(1) store operations per rank: rank 0
    waits for them all (or the budget), then publishes the whole table under one key,
    which every other rank reads once (a store is one server: N reads of N keys each would
    be N^2 operations, 67 million at 4,096 ranks)."""
    table_key = _key("addresses")
    if rank == 0:
        keys = [_key(f"addr/{r}") for r in range(world)]
        try:
            store.wait(keys, timedelta(seconds=max(0.1, budget_s)))
            values = [v.decode() for v in store.multi_get(keys)]
            table = dict(enumerate(values))
        except Exception:  # some ranks never published: test the others
            table = {}
            for r, k in enumerate(keys):
                try:
                    if store.check([k]):
                        table[r] = store.get(k).decode()
                except Exception:
                    continue
        store.set(table_key, json.dumps(table))
    try:
        store.wait([table_key], timedelta(seconds=max(0.1, budget_s + 1.0)))
        return {int(r): str(v) for r, v in json.loads(store.get(table_key)).items()}
    except Exception:  # rank 0 never got this far: nobody to test against
        return {}


def _barrier(store: Store, world: int, budget_s: float) -> bool:
    """Wait (within ``budget_s``) until every rank has finished connecting, without
    polling: the last rank to arrive sets one key the others wait on."""
    if store.add(_key("done"), 1) >= world:
        store.set(_key("all_done"), "1")
    try:
        store.wait([_key("all_done")], timedelta(seconds=max(0.1, budget_s)))
        return True
    except Exception:
        return False


def run_mesh(store: Store, rank: int, world: int, backend: str, timeout_s: float,
             budget_s: float) -> MeshRow:
    """This rank's row of the mesh: its address, how many peers it tried, and only the
    connections that failed (a row stays small at any scale); ``cut`` says whether any
    rank of the job found a connection that failed.

    Waits (within ``budget_s``) for every rank to finish connecting before it stops
    listening, so a slow peer is not refused by a listener that already left.
    """
    started = time.monotonic()
    addr = local_address(backend)
    listener = _Listener(addr, rank, backlog=min(4096, max(16, world)))
    node = socket.gethostname()
    where = f"[{addr}]:{listener.port}" if ":" in addr else f"{addr}:{listener.port}"
    try:
        store.set(_key(f"addr/{rank}"), f"{where} {node}")
        published = _addresses(store, rank, world, budget_s / 2)
        peers = {r: v.split(" ", 1)[0] for r, v in published.items() if r != rank}
        with ThreadPoolExecutor(max_workers=max(1, min(MAX_CONNECTING, len(peers)))) as pool:
            futures = {r: pool.submit(_reach, addr, r, w, timeout_s) for r, w in peers.items()}
            results = {r: f.result() for r, f in futures.items()}
        failed = {str(r): res["error"] for r, res in results.items() if not res["ok"]}
        if failed:
            store.set(_key("failed"), str(rank))
        connect_s = round(time.monotonic() - started, 3)
        everyone = _barrier(store, world, budget_s - (time.monotonic() - started))
        cut = bool(store.check([_key("failed")]))
    finally:
        listener.close()
    return {"address": where, "node": node, "tried": len(peers), "failed": failed,
            "slowest_ms": max((res.get("ms", 0.0) for res in results.values()
                               if res["ok"]), default=0.0),
            "unpublished": sorted(r for r in range(world) if r not in published),
            "cut": cut, "all_finished": everyone,
            "connect_s": connect_s, "seconds": round(time.monotonic() - started, 3)}
