"""Files that ddpdoctor creates on a job's behalf, safe when it runs as root.

`attach` and `run` are documented to run as root next to a job owned by another user, in
directories that user can write (``$DDPDOCTOR_FR_DIR``, the heartbeat directory). A
predictable temp name or an ``open()`` that follows a symlink there lets that user make root
create or truncate any file. So: temp files get unpredictable names created with O_EXCL and
mode 0600, renames replace the link itself (``rename`` never follows the destination), and
every open of a fixed name uses O_NOFOLLOW and refuses anything but a regular file.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from pathlib import Path
from typing import TextIO

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


class UnsafePathError(OSError):
    """The path is a symlink, a FIFO, a device or a directory where a regular file belongs."""


def write_atomic(path: str | os.PathLike[str], data: str | bytes, mode: int = 0o600) -> None:
    """Write ``data`` to ``path`` all at once: readers see the old file or the new one.

    The temp file is created next to ``path`` with an unpredictable name (O_EXCL, ``mode``),
    then renamed over ``path``; a symlink at ``path`` is replaced, never followed.
    """
    path = Path(path)
    payload = data.encode() if isinstance(data, str) else data
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(payload)
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def open_regular(path: str | os.PathLike[str], flags: int, mode: int = 0o600) -> int:
    """``os.open`` that never follows a symlink and never blocks on a FIFO.

    Returns the fd of a regular file; raises UnsafePathError for anything else (the fd is
    closed first), OSError as ``os.open`` does.
    """
    fd = os.open(path, flags | _NOFOLLOW | _NONBLOCK | os.O_CLOEXEC, mode)
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise UnsafePathError(f"{path}: not a regular file")
        if _NONBLOCK:
            os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def touch(path: str | os.PathLike[str], mode: int = 0o600) -> None:
    """Create ``path`` or bump its mtime, refusing symlinks and non-regular files."""
    fd = open_regular(path, os.O_WRONLY | os.O_CREAT, mode)
    try:
        os.utime(fd)
    finally:
        os.close(fd)


def open_append(path: str | os.PathLike[str], mode: int = 0o644,
                buffering: int = 1) -> TextIO:
    """A text file opened for appending, line-buffered by default; never through a link."""
    fd = open_regular(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, mode)
    return os.fdopen(fd, "a", buffering=buffering, encoding="utf-8", errors="replace")
