"""Give the calling thread an OS-level name (Linux ``prctl(PR_SET_NAME)``).

Python 3.11 names threads for Python only; ``/proc/PID/task/TID/comm`` still says
``python``. The watch's threads inside a rank name themselves with
``contract.OWN_THREAD_PREFIX`` so that ``run`` can leave their CPU out when it asks whether
a rank is still working (run/background_threads.py).
"""

from __future__ import annotations

import sys

_PR_SET_NAME = 15
_COMM_MAX = 15  # bytes, without the NUL


def name_this_thread(name: str) -> bool:
    """True when the kernel took the name; anything else (not Linux, no libc) is a no-op."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(_PR_SET_NAME, name.encode()[:_COMM_MAX], 0, 0, 0) == 0)
    except (OSError, AttributeError):
        return False
