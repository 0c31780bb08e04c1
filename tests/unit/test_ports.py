"""The test rig's port picker (tests/lib/ports.py): ports the kernel never hands out by itself,
free when picked, never the same twice in one worker."""

from __future__ import annotations

import socket

import ports


def test_ports_are_below_the_ephemeral_range_and_free():
    low = ports._ephemeral_low()
    picked = [ports.free_port() for _ in range(20)]
    assert len(set(picked)) == 20
    for port in picked:
        assert 1024 <= port < low
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))


def test_a_span_is_free_as_a_whole():
    port = ports.free_port(2)
    for p in (port, port + 1):
        with socket.socket() as s:
            s.bind(("127.0.0.1", p))


def test_the_next_pick_skips_the_whole_span(monkeypatch):
    # a job given port P with span 2 also uses P + 1 (its odd task's store): a CI run beside
    # a job saw the next job of the worker handed P + 1, and the two jobs' ranks met
    monkeypatch.setattr(ports, "_NEXT", iter(range(10, 20)))
    first = ports.free_port(2)
    assert ports.free_port(2) >= first + 2


def test_a_taken_port_is_skipped(monkeypatch):
    held = socket.socket()
    try:
        held.bind(("127.0.0.1", ports._START + 10))
        monkeypatch.setattr(ports, "_NEXT", iter([10, 11]))
        assert ports.free_port() == ports._START + 11
    finally:
        held.close()
