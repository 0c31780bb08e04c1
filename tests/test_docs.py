"""The docs are part of the contract: they render, their links resolve, the catalog is current."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ddpdoctor.catalog import markdown_table

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _fences_balanced(text: str) -> bool:
    opened = None
    for line in text.splitlines():
        m = re.match(r"^\s*(`{3,}|~{3,})", line)
        if not m:
            continue
        fence = m.group(1)
        if opened is None:
            opened = fence
        elif fence[0] == opened[0] and len(fence) >= len(opened) and line.strip() == fence:
            opened = None
    return opened is None


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_markdown_renders_and_links_resolve(path: Path):
    text = path.read_text()
    assert _fences_balanced(text), f"{path.name}: an unclosed code fence"
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target) or target.startswith("#"):
            continue
        assert (path.parent / target.split("#")[0]).exists(), f"{path.name}: broken link {target}"


def test_design_catalog_table_is_generated_from_the_catalog():
    text = (ROOT / "docs" / "design.md").read_text()
    table = text.split("<!-- catalog:begin -->\n", 1)[1].split("\n<!-- catalog:end -->", 1)[0]
    assert table == markdown_table(), "docs/design.md is stale: python -m ddpdoctor.catalog"
