"""Checks that a rank may plant a fault touching its host (network queueing, overcommit).

No torch: the CLI runs them for every rank before torchrun starts.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import Protocol


class PlantedFault(Protocol):
    """What these checks read of an ``injections.Injection``. A protocol rather than an
    import: injections re-exports check_host, and the two files must not import each other
    (tests/unit/test_layers.py)."""

    @property
    def name(self) -> str: ...

    def on(self, rank: int) -> bool: ...


def check_host(injections: Sequence[PlantedFault], rank: int, device_type: str = "cpu",
               env: Mapping[str, str] | None = None) -> None:
    """Raise ValueError when this rank cannot plant a fault that touches the host.

    ``slow-link`` rewrites a network interface's queueing: only allowed inside a named
    network namespace (``ip netns add``, as tests make), never in the host's. ``oom`` on
    CPU needs the kernel to refuse a huge allocation, which it does unless overcommit is
    "always" (vm.overcommit_memory=1): then the memory would really be used.
    """
    oom = next((i for i in injections if i.name == "oom" and i.on(rank)), None)
    if oom is not None and device_type == "cpu" and _overcommit_mode() == 1:
        raise ValueError(f"--inject {oom}: vm.overcommit_memory is 1 (always), so the "
                         "kernel would grant the allocation instead of failing it")
    inj = next((i for i in injections if i.name == "slow-link" and i.on(rank)), None)
    if inj is None:
        return
    dev = (os.environ if env is None else env).get("GLOO_SOCKET_IFNAME", "")
    if not dev or "," in dev or dev == "lo":
        raise ValueError(f"--inject {inj}: set GLOO_SOCKET_IFNAME to the one interface "
                         "(not lo) whose egress to throttle")
    if os.geteuid() != 0:
        raise ValueError(f"--inject {inj}: needs root (tc qdisc)")
    if named_netns() is None:
        raise ValueError(f"--inject {inj}: refusing to throttle the host's network; run "
                         "this rank in a network namespace of its own (ip netns exec)")


def _overcommit_mode() -> int | None:
    try:
        with open("/proc/sys/vm/overcommit_memory") as f:
            return int(f.read().strip())
    except (OSError, ValueError):
        return None


def named_netns() -> str | None:
    """The ``ip netns`` name of this process's network namespace; None for the host's
    (even when ``ip netns attach`` named it) or when it cannot be told."""
    try:
        mine = os.stat("/proc/self/ns/net")
        try:
            host = os.stat("/proc/1/ns/net")  # unreadable in some sandboxes
            if (host.st_dev, host.st_ino) == (mine.st_dev, mine.st_ino):
                return None  # `ip netns attach NAME 1` names the host's own namespace
        except OSError:
            pass
        for name in os.listdir("/run/netns"):
            st = os.stat(os.path.join("/run/netns", name))
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                return name
    except OSError:
        pass
    return None


def check_checkpoint_dir(path: str) -> None:
    """Raise ValueError when the ranks could not save checkpoints under ``path``.

    Otherwise every rank dies at its first save with a PermissionError traceback, after the
    launch and the first steps. Writing is tried for real (a file made and removed in the
    directory, or a directory in its nearest existing parent when it does not exist yet):
    permission bits do not tell, as root passes them, and ACLs, read-only mounts and
    pseudo-filesystems such as /proc refuse whatever the bits say. The directory itself is
    not created here: the first save does that, as before.
    """
    import tempfile

    flag = f"--checkpoint-dir {path}"
    target = os.path.abspath(path)
    existing = target  # the directory itself, or its nearest parent that exists
    while not os.path.lexists(existing):
        existing = os.path.dirname(existing)
    if not os.path.exists(existing):
        raise ValueError(f"{flag}: {existing} is a dangling symlink")
    if not os.path.isdir(existing):
        if existing == target:
            raise ValueError(f"{flag}: is a file, not a directory")
        raise ValueError(f"{flag}: cannot be created: {existing} is a file")
    try:
        if existing == target:
            fd, probe = tempfile.mkstemp(prefix=".ddpdoctor-write-test-", dir=target)
            os.close(fd)
            os.unlink(probe)
        else:
            os.rmdir(tempfile.mkdtemp(prefix=".ddpdoctor-write-test-", dir=existing))
    except OSError as e:
        why = e.strerror or str(e)
        if existing == target:
            raise ValueError(f"{flag}: cannot write there ({why}); the ranks could not "
                             "save a checkpoint") from None
        raise ValueError(f"{flag}: cannot be created in {existing} ({why}); the ranks "
                         "could not save a checkpoint") from None
