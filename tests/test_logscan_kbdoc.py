"""The README's table of what diagnose knows is generated from the knowledge base."""

from __future__ import annotations

from pathlib import Path

from ddpdoctor.logscan.kb import SIGNATURES
from ddpdoctor.logscan.kbdoc import KB_BEGIN, KB_END, kb_table

README = Path(__file__).resolve().parents[1] / "README.md"


def test_readme_kb_table_is_current():
    text = README.read_text()
    current = text[text.index(KB_BEGIN) + len(KB_BEGIN):text.index(KB_END)].strip()
    assert current == kb_table(), ("README's knowledge-base table is stale: run "
                                   "`python -m ddpdoctor.logscan.kbdoc --write README.md`")


def test_table_has_a_row_per_signature():
    assert kb_table().count("\n| ") == len(SIGNATURES)
