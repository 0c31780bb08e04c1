"""What run records about the job never carries its secrets.

redact.py decides what looks secret by name (``HF_TOKEN``, ``--token X``). run knows more:
the job's actual secret values (those of secret-named variables in its environment and of
secret-named flags on its command line). Any of those values that turns up anywhere in
run's report (a command line read from /proc, a log line quoted as evidence, a process
name) is masked too, not only where a name announces it.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ddpdoctor import redact

_MIN_LEN = 4  # shorter values ("1", "yes") would mask ordinary words


def secret_values(env: Mapping[str, str], argv: list[str]) -> list[str]:
    values = {v for k, v in env.items() if redact.is_secret_name(k) and v}
    masked = redact.argv(argv)
    for raw, shown in zip(argv, masked):
        if raw != shown:
            values.add(raw.partition("=")[2] if "=" in shown else raw)
    return sorted((v for v in values if len(v) >= _MIN_LEN), key=len, reverse=True)


def scrub(obj: Any, secrets: list[str]) -> Any:
    """``redact.deep(obj)`` with every literal secret value masked as well."""
    obj = redact.deep(obj)
    if not secrets:
        return obj
    return _replace(obj, secrets)


def _replace(obj: Any, secrets: list[str]) -> Any:
    if isinstance(obj, str):
        for s in secrets:
            if s in obj:
                obj = obj.replace(s, redact.MASK)
        return obj
    if isinstance(obj, dict):
        return {_replace(k, secrets) if isinstance(k, str) else k: _replace(v, secrets)
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_replace(v, secrets) for v in obj]
    return obj


def scrub_report(report: Any, secrets: list[str]) -> None:
    """In place: every check's summary and data, every finding's title and evidence, the
    world block."""
    report.world = scrub(report.world, secrets)
    for c in report.checks:
        c.summary = scrub(c.summary, secrets)
        c.data = scrub(c.data, secrets)
    for f in report.findings:
        f.title = scrub(f.title, secrets)
        f.evidence = scrub(f.evidence, secrets)
