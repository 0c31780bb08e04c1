"""docs/diagnose.md's table of what diagnose knows is generated from the knowledge base."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.diagnose.kb import SIGNATURES
from tools.kbdoc import KB_BEGIN, KB_END, PAGE, kb_table


def test_the_page_is_docs_diagnose_md():
    assert PAGE == Path(__file__).resolve().parents[2] / "docs" / "diagnose.md"


def test_diagnose_page_kb_table_is_current():
    text = PAGE.read_text()
    current = text[text.index(KB_BEGIN) + len(KB_BEGIN):text.index(KB_END)].strip()
    assert current == kb_table(), ("docs/diagnose.md's knowledge-base table is stale: "
                                   "run `python -m tools.kbdoc --write`")


def test_table_has_a_row_per_signature():
    assert kb_table().count("\n| ") == len(SIGNATURES)
