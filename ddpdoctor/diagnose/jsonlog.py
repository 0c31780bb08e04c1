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

from ddpdoctor.diagnose.transformed import Transformed

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


class DockerJson(Transformed):
    """A json-file stream read as the container's own output."""

    def __init__(self, head: bytes, raw: BinaryIO) -> None:
        super().__init__(head, raw)
        self._carry = b""

    def convert(self, data: bytes, final: bool) -> bytes:
        records = (self._carry + data).split(b"\n")
        self._carry = b"" if final else records.pop()
        if len(self._carry) > _MAX_RECORD:
            records.append(self._carry)
            self._carry = b""
        return b"".join(_text(r.rstrip(b"\r")) for r in records if r or not final)
