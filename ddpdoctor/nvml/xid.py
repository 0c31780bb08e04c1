"""XIDs from the kernel log: NVML has no XID history API."""

from __future__ import annotations

import os
import re
import time

from ddpdoctor.nvml.model import XidEvent

_XID_RE = re.compile(r"NVRM: Xid \(PCI:([0-9a-fA-F:.]+)\): (\d+),\s*(.*)")
_KMSG_BUDGET_S = 0.3
_KMSG_MAX_RECORDS = 100_000


def parse_xid_line(line: str) -> XidEvent | None:
    """An XidEvent from a kernel log line like
    ``NVRM: Xid (PCI:0000:18:00): 79, pid=1234, name=python, GPU has fallen off the bus.``"""
    m = _XID_RE.search(line)
    if not m:
        return None
    return XidEvent(pci=m.group(1), xid=int(m.group(2)), text=m.group(3).strip()[:300])


def read_kernel_xids(path: str = "/dev/kmsg") -> tuple[list[XidEvent] | None, str]:
    """XIDs logged since boot, from /dev/kmsg, within a small time budget.

    Returns (events, source); events is None when the log cannot be read (not root with
    dmesg_restrict, no /dev/kmsg in the container), with the reason in source.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except OSError as e:
        return None, f"unavailable: {path} not readable ({e.strerror})"
    events: list[XidEvent] = []
    deadline = time.monotonic() + _KMSG_BUDGET_S
    complete = False
    try:
        for _ in range(_KMSG_MAX_RECORDS):
            if time.monotonic() > deadline:
                break
            try:
                record = os.read(fd, 8192)  # /dev/kmsg returns one record per read
            except BlockingIOError:
                complete = True
                break
            except OSError as e:
                if e.errno == 32:  # EPIPE: the record was overwritten while reading; go on
                    continue
                return None, f"unavailable: reading {path} failed ({e.strerror})"
            if not record:
                complete = True
                break
            text = record.decode("utf-8", "replace")
            if "Xid" in text:
                event = parse_xid_line(text.partition(";")[2] or text)
                if event is not None:
                    events.append(event)
    finally:
        os.close(fd)
    return events, "kmsg" if complete else "kmsg (partial: time budget reached)"

