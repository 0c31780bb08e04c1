"""The edge: torch.distributed.TCPStore as a client of the job's own store.

torch is imported here only, when a job view is wanted (it costs ~2 s). Every call has a
deadline (the store's timeout); any failure is a StoreLost with a one-line reason.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from datetime import timedelta
from typing import Protocol, TypeVar

from ddpdoctor.jobview.keys import Endpoint

T = TypeVar("T")


# how long past TCPStore's own timeout a connect may take before it is given up: its
# handshake with a server that accepts and never answers outlasts that timeout
HANDSHAKE_GRACE_S = 5.0


class StoreClient(Protocol):
    """What is used of a torch.distributed Store (a TCPStore client; a fake in tests)."""

    def set(self, key: str, value: str, /) -> None: ...
    def get(self, key: str, /) -> bytes: ...
    def add(self, key: str, value: int, /) -> int: ...
    def check(self, keys: list[str], /) -> bool: ...
    def compare_set(self, key: str, expected_value: str, desired_value: str, /) -> bytes: ...
    def multi_get(self, keys: list[str], /) -> list[bytes]: ...


class StoreLost(Exception):
    """The store cannot be reached (not up yet, gone with the job, network)."""


class JobStore:
    def __init__(self, store: StoreClient, endpoint: Endpoint) -> None:
        self._store = store
        self.endpoint = endpoint

    @classmethod
    def connect(cls, endpoint: Endpoint, timeout: float) -> JobStore:
        # c10d logs every failed connect try with a C++ stack on stderr, where run's own
        # lines and the job's output go: quiet it in this process (read when torch loads;
        # the job's environment was copied before, so the ranks keep their own setting)
        os.environ.setdefault("TORCH_CPP_LOG_LEVEL", "FATAL")
        from torch.distributed import TCPStore

        # A server that accepts the connection and never answers holds TCPStore's
        # handshake past its own timeout: the connect runs under a deadline of our own.
        got: dict[str, TCPStore] = {}
        failed: dict[str, Exception] = {}

        def make() -> None:
            try:
                got["store"] = TCPStore(endpoint.host, endpoint.port, is_master=False,
                                        timeout=timedelta(seconds=timeout),
                                        wait_for_workers=False)
            except Exception as e:  # RuntimeError, DistNetworkError, OSError
                failed["error"] = e

        t = threading.Thread(target=make, name="ddpdoctor-store-connect", daemon=True)
        t.start()
        t.join(timeout + HANDSHAKE_GRACE_S)
        if "store" in got:
            return cls(got["store"], endpoint)
        if "error" in failed:
            e = failed["error"]
            raise StoreLost(f"cannot reach the job's store at {endpoint}: "
                            f"{_first_line(e)}") from e
        raise StoreLost(f"cannot reach the job's store at {endpoint}: no answer within "
                        f"{timeout + HANDSHAKE_GRACE_S:.0f} s (is it a TCPStore?)")

    @classmethod
    def wrap(cls, store: StoreClient, endpoint: Endpoint) -> JobStore:
        """An existing store object (tests, benchmarks: a server in the same process)."""
        return cls(store, endpoint)

    def _call(self, what: str, fn: Callable[..., T], *args: object) -> T:
        try:
            return fn(*args)
        except Exception as e:
            raise StoreLost(f"the job's store at {self.endpoint} failed ({what}): "
                            f"{_first_line(e)}") from e

    def set(self, key: str, value: str) -> None:
        self._call("set", self._store.set, key, value)

    def add(self, key: str, n: int) -> int:
        return int(self._call("add", self._store.add, key, n))

    def claim(self, key: str, value: str) -> bool:
        """Set ``key`` to ``value`` unless it is set; True when ours is the value."""
        got = self._call("compare_set", self._store.compare_set, key, "", value)
        return bytes(got).decode(errors="replace") == value

    def get_if_set(self, key: str) -> bytes | None:
        """The value, or None when the key does not exist (never waits for it)."""
        if not self._call("check", self._store.check, [key]):
            return None
        return bytes(self._call("get", self._store.get, key))

    def multi_get(self, keys: list[str]) -> list[bytes]:
        """Keys known to exist, in one round trip."""
        if not keys:
            return []
        return [bytes(v) for v in self._call("multi_get", self._store.multi_get, keys)]

    def records(self, keys: list[str], parse: Callable[[bytes], T]) -> list[T]:
        """``multi_get`` of keys known to exist, each parsed; a malformed record (``parse``
        raises ValueError) is dropped: another node's bad write must not stop this one."""
        out = []
        for raw in self.multi_get(keys):
            try:
                out.append(parse(raw))
            except ValueError:
                continue
        return out

    def existing(self, keys: list[str]) -> list[str]:
        return [k for k in keys if self._call("check", self._store.check, [k])]


def _first_line(e: BaseException) -> str:
    text = str(e).strip().splitlines()
    return text[0][:200] if text else type(e).__name__
