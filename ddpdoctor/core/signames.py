"""Signal numbers to names, decoded in one place (a negative exit code is a signal)."""

from __future__ import annotations

import signal


def signal_name(signum: int) -> str | None:
    """``9`` -> ``"SIGKILL"``; None for a number this platform has no name for."""
    try:
        return signal.Signals(signum).name
    except ValueError:
        return None


def killed_by(exitcode: int) -> str | None:
    """The signal named by a negative exit code (``-9`` -> ``"SIGKILL"``, an unnamed one as
    ``"signal N"``); None for a plain exit."""
    if exitcode >= 0:
        return None
    return signal_name(-exitcode) or f"signal {-exitcode}"
