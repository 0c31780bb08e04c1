"""The tables of docs/diagnose.md, generated: what diagnose knows (from the knowledge base)
and how it scores on the real-log corpus.

    python -m tools.kbdoc            print both tables
    python -m tools.kbdoc --write [docs/diagnose.md]   replace them between the markers

``tests/unit/test_logscan_kbdoc.py`` fails when the page's knowledge-base table is stale.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from ddpdoctor.diagnose.kb import SIGNATURES

# The page that holds both tables (README.md links it).
PAGE = Path(__file__).resolve().parents[1] / "docs" / "diagnose.md"
KB_BEGIN, KB_END = "<!-- kb-table:begin -->", "<!-- kb-table:end -->"
CORPUS_BEGIN, CORPUS_END = "<!-- corpus-table:begin -->", "<!-- corpus-table:end -->"


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def kb_table() -> str:
    """One row per signature, grouped by the finding it leads to."""
    rows = ["| finding | signature | fields | wording of | example from |",
            "|---|---|---|---|---|"]
    for sig in sorted(SIGNATURES, key=lambda s: (s.finding, s.name)):
        ex = sig.examples[0]
        src = ex.source
        where = (f"[{re.sub(r'^https://github.com/', '', src)}]({src})"
                 if src.startswith("https://") else f"`{src}` (recorded)")
        fields = ", ".join(f"`{f}`" for f in sig.fields) or "—"
        rows.append(f"| {sig.finding} | `{sig.name}` | {fields} | {_cell(sig.versions)} | "
                    f"{where} |")
    return "\n".join(rows)


def corpus_table() -> str:
    from tools import corpus

    return corpus.table([corpus.run(c) for c in corpus.load()])


def replace_between(text: str, begin: str, end: str, body: str) -> str:
    a, b = text.index(begin) + len(begin), text.index(end)
    return text[:a] + "\n" + body + "\n" + text[b:]


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args[:1] == ["--write"]:
        path = Path(args[1]) if len(args) > 1 else PAGE
        text = path.read_text()
        text = replace_between(text, KB_BEGIN, KB_END, kb_table())
        text = replace_between(text, CORPUS_BEGIN, CORPUS_END, corpus_table())
        path.write_text(text)
        return 0
    print(kb_table())
    print()
    print(corpus_table())
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
