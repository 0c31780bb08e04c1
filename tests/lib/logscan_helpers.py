"""Diagnose one log for the family tests: from a text written to a file, or a fixture."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.core.findings import Finding
from ddpdoctor.diagnose import LogInput, diagnose_logs


def findings_in(tmp_path: Path, text: str) -> list[Finding]:
    """``text`` as one job's log (``job.log``: no rank in its name)."""
    log = tmp_path / "job.log"
    log.write_text(text)
    return diagnose_logs([LogInput(str(log))])[0]


def first_in(tmp_path: Path, text: str) -> Finding:
    return findings_in(tmp_path, text)[0]


def findings_of(path: Path) -> list[Finding]:
    """A fixture log, its name not read for a rank (collected names are free text)."""
    return diagnose_logs([LogInput(str(path), rank_from_path=False)])[0]


def lines_of(path: Path, first: int, last: int) -> str:
    """Lines ``first`` to ``last`` (1-based, inclusive) of a fixture: a variant cut from it."""
    return "".join(path.read_text().splitlines(keepends=True)[first - 1:last])


def errors_of(found: list[Finding]) -> list[tuple[str, list[int]]]:
    """The error findings as (id, ranks), in report order: what a family test asserts."""
    return [(f.id, f.ranks) for f in found if f.severity == "error"]
