"""Score diagnose on the corpus of real public logs (``tests/fixtures/reallogs``).

    python -m tools.corpus [DIR]     prints the score table (markdown)

docs/diagnose.md shows the table (``python -m tools.kbdoc --write`` puts it there).

Each ``NAME.log`` has a sidecar ``NAME.json`` written from the public thread, not from this
tool: {"source": URL, "expect": {"id": ID, "ranks": [...] or null}, "failed": true,
"action": "fix_config" | ... | null, ...}. ``expect.id`` ``NONE`` labels a healthy run whose
log only looks scary. A case is right when the first finding has the expected id (and the
expected ranks, when the label names ranks); for ``NONE``, when no finding is an error. A
failed job reported without an error finding is "called healthy"; a ``NONE`` run with one
is "called failed".

``DEFAULT_DIR`` is the development set (rules are tuned on it); ``LOCKED_DIR`` holds logs
collected and labelled before the rules they score were written, and is never tuned on
(docs/diagnose.md, "The corpus").
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from ddpdoctor.core.findings import Finding

DEFAULT_DIR = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "reallogs"
LOCKED_DIR = DEFAULT_DIR / "locked"
HEALTHY = "NONE"  # the label of a healthy run


@dataclass(frozen=True)
class Case:
    name: str
    log: Path
    source: str
    expect_id: str
    expect_ranks: tuple[int, ...] | None
    failed: bool
    action: str | None = None  # the next step the thread says fixed it

    @property
    def healthy(self) -> bool:
        return self.expect_id == HEALTHY


@dataclass(frozen=True)
class Result:
    case: Case
    got_id: str
    got_ranks: tuple[int, ...]
    healthy: bool  # no error finding: diagnose would exit 0
    got_action: str = ""
    titles: tuple[str, ...] = ()  # every finding's title, in order
    rule_errors: tuple[str, ...] = ()  # a triage rule that raised (a bug in ddpdoctor)

    @property
    def called_healthy(self) -> bool:
        """A job that failed (or whose thread names an error) reported with no error."""
        return self.healthy and not self.case.healthy and (
            self.case.failed or _is_error(self.case.expect_id))

    @property
    def called_failed(self) -> bool:
        return self.case.healthy and not self.healthy

    @property
    def right(self) -> bool:
        if self.case.healthy:
            return self.healthy
        if self.got_id != self.case.expect_id:
            return False
        return self.case.expect_ranks is None or self.got_ranks == self.case.expect_ranks


# The collectors' prompt names the actions in words; the labels of earlier batches use
# core/next_step.Action's values. Both are read as the value.
_ACTION_WORDS = {"fix the code": "fix_code", "fix the config": "fix_config",
                 "drain the node and restart": "drain_node", "restart as is": "restart",
                 "raise a timeout": "raise_timeout"}


def action_of(label: str | None) -> str | None:
    """A label's action as core/next_step.Action's value (None: the thread does not say)."""
    return None if label is None else _ACTION_WORDS.get(label, label)


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
                          bool(label.get("failed", True)), action_of(label.get("action"))))
    return cases


def run(case: Case) -> Result:
    from ddpdoctor.diagnose import LogInput, diagnose_logs

    # The corpus' file names describe the case ("..._rank0_..."): not per-rank log names.
    findings, _ = diagnose_logs([LogInput(str(case.log), rank_from_path=False)])
    from ddpdoctor.core.next_step import decide

    first: Finding | None = findings[0] if findings else None
    return Result(case, first.id if first else "(none)",
                  tuple(first.ranks) if first else (),
                  healthy=not any(f.severity == "error" for f in findings),
                  got_action=decide(findings).action.value,
                  titles=tuple(f.title for f in findings),
                  rule_errors=tuple(str(err) for f in findings
                                    for err in f.evidence.get("rule_errors", ())))


def _is_error(fid: str) -> bool:
    from ddpdoctor.core.catalog import CATALOG

    return fid in CATALOG and CATALOG[fid].severity == "error"


def table(results: list[Result]) -> str:
    """Markdown: the score per expected id, then the total."""
    per: dict[str, list[Result]] = defaultdict(list)
    for r in results:
        per[r.case.expect_id].append(r)
    lines = ["| expected finding | logs | right | failed job called healthy | healthy run called "
             "failed |", "|---|---:|---:|---:|---:|"]
    for fid in sorted(per):
        rs = per[fid]
        lines.append(f"| {fid} | {len(rs)} | {sum(r.right for r in rs)} | "
                     f"{sum(r.called_healthy for r in rs)} | {sum(r.called_failed for r in rs)} |")
    right = sum(r.right for r in results)
    healthy = sum(r.called_healthy for r in results)
    failed = sum(r.called_failed for r in results)
    pct = 100 * right / len(results) if results else 0.0
    lines.append(f"| **total** | {len(results)} | {right} ({pct:.0f}%) | {healthy} | {failed} |")
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
