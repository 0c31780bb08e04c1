"""Run a Python function on N local ranks under a hard deadline (see ``launch``).

The public API: ``launch`` and what it returns (``LaunchResult``, ``RankOutcome``, the
``STATUS_*`` values), the ``RankContext`` a launched function receives, and
``read_progress``, how anyone holding the store reads a rank's progress marks, and
``prestart``, which starts the process ranks are forked from early (see ``zygote``).
"""

from ddpdoctor.check.launcher.launch import default_backend, launch
from ddpdoctor.check.launcher.outcome import (
    STATUS_DIED,
    STATUS_ERROR,
    STATUS_OK,
    STATUS_TIMEOUT,
    STATUS_TORN_DOWN,
    LaunchResult,
    RankContext,
    RankOutcome,
    read_progress,
)
from ddpdoctor.check.launcher.zygote import prestart

__all__ = [
    "STATUS_DIED", "STATUS_ERROR", "STATUS_OK", "STATUS_TIMEOUT", "STATUS_TORN_DOWN",
    "LaunchResult", "RankContext", "RankOutcome", "default_backend", "launch",
    "prestart", "read_progress",
]
