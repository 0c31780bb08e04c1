"""Score diagnose on the corpus of real public logs (``tests/fixtures/reallogs``).

    python -m ddpdoctor.logscan.corpus [DIR]     prints the score table (markdown)

docs/diagnose.md shows the table (``python -m ddpdoctor.logscan.kbdoc --write`` puts it there).

Each ``NAME.log`` has a sidecar ``NAME.json`` written from the public thread, not from this
tool: {"source": URL, "expect": {"id": ID, "ranks": [...] or null}, "failed": true, ...}.
A case is right when the first finding has the expected id (and the expected ranks, when
the label names ranks); a failed job reported without an error finding is "healthy".
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ddpdoctor.findings import Finding

DEFAULT_DIR = Path(__file__).resolve().parents[2] / "tests" / "fixtures" / "reallogs"


@dataclass(frozen=True)
class Case:
    name: str
    log: Path
    source: str
    expect_id: str
    expect_ranks: tuple[int, ...] | None
    failed: bool


@dataclass(frozen=True)
class Result:
    case: Case
    got_id: str
    got_ranks: tuple[int, ...]
    healthy: bool  # no error finding: diagnose would exit 0

    @property
    def right(self) -> bool:
        if self.got_id != self.case.expect_id:
            return False
        return self.case.expect_ranks is None or self.got_ranks == self.case.expect_ranks


def load(directory: Path = DEFAULT_DIR) -> list[Case]:
    cases = []
    for side in sorted(directory.glob("*.json")):
        log = side.with_suffix(".log")
        if not log.exists():
            continue
        label = json.loads(side.read_text())
        ranks = label["expect"].get("ranks")
        cases.append(Case(side.stem, log, label.get("source", ""), label["expect"]["id"],
                          tuple(sorted(ranks)) if ranks is not None else None,
                          bool(label.get("failed", True))))
    return cases


def run(case: Case) -> Result:
    from ddpdoctor.logscan import LogInput, diagnose_logs

    # The corpus' file names describe the case ("..._rank0_..."): not per-rank log names.
    findings, _ = diagnose_logs([LogInput(str(case.log), rank_from_path=False)])
    first: Finding | None = findings[0] if findings else None
    return Result(case, first.id if first else "(none)",
                  tuple(first.ranks) if first else (),
                  healthy=not any(f.severity == "error" for f in findings))


def table(results: list[Result]) -> str:
    """Markdown: the score per expected id, then the total."""
    per: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        per[r.case.expect_id].append(r)
    lines = ["| expected finding | logs | right | called healthy |", "|---|---:|---:|---:|"]
    for fid in sorted(per):
        rs = per[fid]
        lines.append(f"| {fid} | {len(rs)} | {sum(r.right for r in rs)} | "
                     f"{sum(r.healthy and r.case.failed for r in rs)} |")
    right = sum(r.right for r in results)
    healthy = sum(r.healthy and r.case.failed for r in results)
    pct = 100 * right / len(results) if results else 0.0
    lines.append(f"| **total** | {len(results)} | {right} ({pct:.0f}%) | {healthy} |")
    return "\n".join(lines)


def misses(results: list[Result]) -> str:
    return "\n".join(f"- {r.case.name}: expected {r.case.expect_id} "
                     f"{list(r.case.expect_ranks) if r.case.expect_ranks is not None else ''}"
                     f", got {r.got_id} {list(r.got_ranks)} ({r.case.source})"
                     for r in results if not r.right)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    results = [run(c) for c in load(Path(args[0]) if args else DEFAULT_DIR)]
    print(table(results))
    wrong = misses(results)
    if wrong:
        print("\nNot right:\n" + wrong)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
