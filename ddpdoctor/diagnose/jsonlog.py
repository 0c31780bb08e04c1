"""Docker's json-file log read as the text the container printed. Docker's default logging
driver stores each line a container writes as one JSON record,
``{"log":"Log line is here\\n","stream":"stdout","time":"2019-01-01T11:11:11.111111111Z"}``
(https://docs.docker.com/engine/logging/drivers/json-file/; fluent-bit and Loki's docker
stage keep the same ``log`` key), which is what a user copies from
``/var/lib/docker/containers/<id>/<id>-json.log``. Read raw, a traceback's quotes are
escaped (``File \\"train.py\\"``) and its wordings no longer match."""

from __future__ import annotations

import json
from typing import BinaryIO

_HEAD = b'{"log":'
# a record longer than this is not Docker's (it splits lines at 16 KiB): passed on as is
_MAX_RECORD = 1 << 20


def sniff(head: bytes) -> bool:
    """``head`` (an input's first bytes) starts with a json-file record."""
    first = head.lstrip(b"\r\n").split(b"\n", 1)[0]
    if not first.startswith(_HEAD):
        return False
    try:
        record = json.loads(first)
    except ValueError:
        return False
    return isinstance(record, dict) and isinstance(record.get("log"), str)


def _text(record: bytes) -> bytes:
    """A record's text; a line that is not a record passes on as it is."""
    if record.startswith(_HEAD):
        try:
            log = json.loads(record).get("log")
        except (ValueError, AttributeError):
            log = None
        if isinstance(log, str):
            # Docker keeps a line's "\n" in it; a line it split at 16 KiB has none, so the
            # next record continues it
            return log.encode("utf-8", errors="replace")
    return record + b"\n"


class DockerJson:
    """A json-file stream read as the container's own output, piece by piece."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        self._raw = raw
        self._pending = head
        self._carry = b""
        self._out = bytearray()
        self._done = False

    def read(self, n: int) -> bytes:
        while len(self._out) < n and not self._done:
            data = self._pending or self._raw.read(max(n, 1 << 16))
            self._pending = b""
            if not data:
                if self._carry:
                    self._out += _text(self._carry)
                self._carry, self._done = b"", True
                break
            records = (self._carry + data).split(b"\n")
            self._carry = records.pop()
            if len(self._carry) > _MAX_RECORD:
                records.append(self._carry)
                self._carry = b""
            for record in records:
                self._out += _text(record.rstrip(b"\r"))
        out = bytes(self._out[:n])
        del self._out[:n]
        return out

    def close(self) -> None:
        self._raw.close()
