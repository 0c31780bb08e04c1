"""Where a report goes besides the terminal: the ``--json`` and ``--html`` targets.

One path for every command: a target is checked when the option is parsed, before any work
starts (an empty path, a directory, a missing or read-only folder: exit 2 with one line),
and written through :func:`write` (a write that fails, e.g. ``/dev/full``: exit 3 with one
line, never "written"). Standard library only: every command imports it, torch-free ones
included.

A regular file (or a new one) is written atomically: a temp file beside it renamed over it,
so a reader never sees half a report and a symlink planted at the path is replaced, not
followed. What is not a regular file (``/dev/stdout``, a FIFO, a terminal, ``/dev/full``) is
the user's own choice of stream and is written as given, and its errors are reported.
"""

from __future__ import annotations

import errno
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

from ddpdoctor.core.errors import DoctorError, ExitCode

STDOUT = "-"


@dataclass(frozen=True)
class Target:
    """A checked ``--json``/``--html`` destination; ``path`` is ``-`` for stdout."""

    option: str  # "--json" | "--html": how the user named it, for the messages
    path: str

    @property
    def kind(self) -> str:
        return self.option.lstrip("-").upper()

    @property
    def is_stdout(self) -> bool:
        return self.path == STDOUT


def check(option: str, path: str | None, stdout_ok: bool = True) -> Target | None:
    """The target ``path`` names, or None when the option was not given.

    Raises DoctorError (exit 2) for a path that cannot take a report, said in one line.
    """
    if path is None:
        return None
    if path == "" or path.isspace():
        raise DoctorError(f"{option}: the path is empty (give a file path"
                          + (", or '-' for stdout)" if stdout_ok else ")"), ExitCode.USAGE)
    if path == STDOUT:
        if not stdout_ok:
            raise DoctorError(f"{option} -: give a file path for the page", ExitCode.USAGE)
        return Target(option, path)
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except OSError as e:
        raise DoctorError(f"{option} {path}: {e.strerror or e}", ExitCode.USAGE) from None
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise DoctorError(f"{option} {path}: is a directory (give a file path)", ExitCode.USAGE)
    if st is not None and stat.S_ISSOCK(st.st_mode):
        raise DoctorError(f"{option} {path}: is a socket (give a file path)", ExitCode.USAGE)
    _check_links(option, path, ExitCode.USAGE)
    if st is None or stat.S_ISREG(st.st_mode):
        _check_folder(option, path)
    return Target(option, path)


def _check_links(option: str, path: str, code: ExitCode) -> None:
    """Refuse a path that goes through another user's symlink in a sticky world-writable
    folder (``/tmp/report.json -> /root/.bashrc`` planted by anyone): the kernel's
    ``protected_symlinks`` rule, applied by hand because the path is resolved with
    ``realpath`` (readlink), which that rule does not cover. Your own links keep working."""
    parts = Path(os.path.abspath(path)).parts
    for i in range(2, len(parts) + 1):
        link = Path(*parts[:i])
        try:
            lst = os.lstat(link)
            if not stat.S_ISLNK(lst.st_mode):
                continue
            folder = os.stat(link.parent)
        except OSError:
            return  # a missing component: nothing past it is followed
        shared = folder.st_mode & stat.S_ISVTX and folder.st_mode & stat.S_IWOTH
        if shared and lst.st_uid not in (os.geteuid(), folder.st_uid):
            raise DoctorError(f"{option} {path}: {link} is a symlink another user (uid "
                              f"{lst.st_uid}) planted in the shared folder {link.parent}; "
                              "not followed (give another path)", code)


def _check_folder(option: str, path: str) -> None:
    folder = Path(os.path.realpath(path)).parent
    if not folder.is_dir():
        raise DoctorError(f"{option} {path}: the folder {folder} does not exist",
                          ExitCode.USAGE)
    if not os.access(folder, os.W_OK | os.X_OK):
        raise DoctorError(f"{option} {path}: the folder {folder} is not writable",
                          ExitCode.USAGE)


def write(target: Target, data: bytes) -> None:
    """Write ``data`` to ``target`` in full; DoctorError (exit 3) with the reason if not."""
    try:
        if target.is_stdout:
            _write_stdout(data)
        else:
            _write_path(target.path, data)
    except OSError as e:
        reason = e.strerror or str(e)
        if e.errno == errno.ENXIO:
            reason = "nobody reads the FIFO"
        raise DoctorError(f"cannot write the {target.kind} report to {target.path}: {reason}",
                          ExitCode.DOCTOR_FAILED) from None


def _write_stdout(data: bytes) -> None:
    sys.stdout.flush()
    out = getattr(sys.stdout, "buffer", None)
    if out is None:  # a text-only stream (click's test runner): decode
        sys.stdout.write(data.decode("utf-8"))
    else:
        out.write(data)
    sys.stdout.flush()


def _write_path(path: str, data: bytes) -> None:
    from ddpdoctor.core.safefile import write_atomic

    _check_links("the report", path, ExitCode.DOCTOR_FAILED)  # planted since it was checked
    real = os.path.realpath(path)  # a symlink the user points at keeps pointing at the file
    try:
        st = os.stat(real)
    except FileNotFoundError:
        st = None
    if st is None or stat.S_ISREG(st.st_mode):
        write_atomic(real, data, mode=0o644)
        return
    # A stream the user chose: open as given, never block on a FIFO with no reader.
    fd = os.open(real, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            n = os.write(fd, view)
            view = view[n:]
    finally:
        os.close(fd)
