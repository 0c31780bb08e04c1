"""Ports for the jobs a test starts, that nothing else can take between the pick and the
job's own bind.

A port picked with ``bind(("127.0.0.1", 0))`` is released before the job binds it, and in
between the kernel may hand the same port to another pytest-xdist worker's pick or to any
socket's outgoing connection (both come from the ephemeral range): a CI run failed with
EADDRINUSE on one port that two workers had picked. These ports come from below the
ephemeral range, which the kernel never hands out by itself, in a block of their own per
worker, each checked free when picked.
"""

from __future__ import annotations

import itertools
import os
import random
import socket
from pathlib import Path

_BLOCK = 1200
_WORKERS = 8


def _ephemeral_low() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def _worker() -> int:
    name = os.environ.get("PYTEST_XDIST_WORKER", "")  # gw0, gw1, ...; unset: one process
    return int(name[2:]) % _WORKERS if name[2:].isdigit() else _WORKERS - 1


_LOW = _ephemeral_low() - _BLOCK * _WORKERS
_START = _LOW + _worker() * _BLOCK
# a random start in the block: two suites on one machine rarely walk the same ports
_NEXT = itertools.count(random.randrange(_BLOCK))


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def _ephemeral() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def free_port(span: int = 1) -> int:
    """A free port (with the ``span - 1`` ports after it free too) for this worker's next job."""
    for _ in range(_BLOCK):
        offset = next(_NEXT)
        for _ in range(span - 1):
            next(_NEXT)  # the span's other ports are this job's too: the next pick skips them
        # an unusual ephemeral range leaves no room below it: the kernel's pick, as before
        port = _START + offset % (_BLOCK - span) if _LOW >= 1024 else _ephemeral()
        if port + span <= 65536 and all(_bindable(port + k) for k in range(span)):
            return port
    raise RuntimeError(f"no {span} free port(s) near {_START}")
