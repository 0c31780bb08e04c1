"""The rendezvous probe binds MASTER_PORT the way torch's TCPStore does (wildcard, IPv6
dual-stack, SO_REUSEADDR): a port whose only sockets are in TIME-WAIT, as after any job on
it ended, is free; a real listener, on any local address, is ENV_PORT_IN_USE.

Sockets only, in this process: no ranks, no torch.
"""

from __future__ import annotations

import errno
import os
import socket
import time

import psutil
import pytest

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probes import rendezvous


def _probe(port: int, addr: str = "127.0.0.1"):
    data = rendezvous.collect(None, CheckOptions(master_addr=addr, master_port=port))
    check, findings = rendezvous.analyze({0: data}, 1)
    return data, check, [(f.id, f.ranks) for f in findings], findings


def _states(port: int) -> set[str]:
    return {c.status for c in psutil.net_connections(kind="tcp")
            if c.laddr and c.laddr.port == port}


def _port_in_time_wait() -> int:
    """A port whose only socket is in TIME-WAIT: the server side closes first (the side
    that closes first keeps TIME-WAIT, on the listening port), then its listener ends."""
    with socket.socket() as listener:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        port = listener.getsockname()[1]
        client = socket.create_connection(("127.0.0.1", port), timeout=10)
        conn, _ = listener.accept()
        conn.close()  # the server's close goes first: TIME-WAIT on 127.0.0.1:port
        client.recv(1)  # its FIN has arrived
        client.close()
    for _ in range(100):  # the last ACK is local, but let the kernel finish the handshake
        if _states(port) == {psutil.CONN_TIME_WAIT}:
            return port
        time.sleep(0.05)
    pytest.fail(f"could not plant a TIME-WAIT-only port: {_states(port)}")


def test_a_port_in_time_wait_only_is_free():
    port = _port_in_time_wait()
    with socket.socket() as plain, pytest.raises(OSError) as e:
        plain.bind(("127.0.0.1", port))  # the old probe's bind: a false "in use"
    assert e.value.errno == errno.EADDRINUSE
    data, check, ids, _ = _probe(port)
    assert ids == []
    assert data["port_free"] is True and check.status == "ok"
    assert _states(port) == {psutil.CONN_TIME_WAIT}  # the planted state held throughout


def test_a_listening_port_is_in_use_and_names_its_owner():
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # reuse does not hide it
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        data, _, ids, findings = _probe(port)
    assert ids == [("ENV_PORT_IN_USE", [])]
    assert findings[0].evidence["owner"]["pid"] == os.getpid()
    assert data["bind_error"].startswith(f"[Errno {errno.EADDRINUSE}]")


def test_a_listener_on_another_local_address_is_in_use():
    """The store binds every address: a listener on 127.0.0.2 takes the port from a job
    whose MASTER_ADDR is 127.0.0.1 (the old probe bound 127.0.0.1 only and said free)."""
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.2", 0))
        except OSError as e:
            pytest.skip(f"no 127.0.0.2 here ({e.strerror})")
        s.listen()
        port = s.getsockname()[1]
        _, _, ids, findings = _probe(port, "127.0.0.1")
    assert ids == [("ENV_PORT_IN_USE", [])]
    assert findings[0].evidence["owner"]["pid"] == os.getpid()


def test_bind_like_the_store_leaves_the_port_free():
    port = _port_in_time_wait()
    assert rendezvous.bind_like_the_store(port) is None
    assert rendezvous.bind_like_the_store(port) is None  # it closed its socket again
