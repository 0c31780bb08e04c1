"""The directory ``ddpdoctor run`` prepends to PYTHONPATH (its ``sitecustomize``)."""

import os

BOOTSTRAP_DIR = os.path.dirname(os.path.abspath(__file__))


def pythonpath(existing: str | None = None) -> str:
    """``PYTHONPATH`` with the bootstrap directory first."""
    return os.pathsep.join([BOOTSTRAP_DIR, *([existing] if existing else [])])
