"""The docs are part of the contract: they render, their links resolve, the catalog is current,
and every file the docs or the code's comments cite is in the repository."""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from ddpdoctor.core.catalog import markdown_table

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
CODE_DIRS = ("ddpdoctor", "probes", "tests", "benchmarks")
# Pages the command table of README.md links to: one per command.
COMMAND_PAGES = ("check", "attach", "run", "diagnose", "watch", "train", "plan", "report",
                 "playbooks", "benchmarks")
README_MAX_LINES = 200

_LINK = re.compile(r"\]\(([^)\s]+)\)")
_FENCE = re.compile(r"^\s*(`{3,}|~{3,})(.*)$")
# A repository path as prose cites it: a top-level folder of this repository, then a path.
_REPO_PATH = re.compile(
    r"(?<![\w./-])((?:ddpdoctor|tests|benchmarks|probes|playbooks|docs)/[\w./*-]*[\w*/])"
    # a template such as a store key `ddpdoctor/progress/{rank}` or a metric name
    # `ddpdoctor/rank<R>/loss` is no path
    r"(?![\w/*{<-])")
# A bare Markdown file name, the platform notes that live outside the repository, or "the
# README" by section: README.md is a short front page now, its sections moved to docs/.
_BARE_DOC = re.compile(r"(?<![\w./-])([A-Za-z][\w-]*\.md|PLATFORM-NOTES|README)\b")


@dataclass(frozen=True)
class Fence:
    start: int            # 1-based line of the opening fence
    marker: str           # ``` or ~~~ (with its length)
    info: str             # the info string after the opening fence ("bash", "")
    body: tuple[str, ...]
    closed: bool


def fences(text: str) -> Iterator[Fence]:
    """The fenced code blocks of a CommonMark text, as a renderer pairs them."""
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        marker, info, start = m.group(1), m.group(2).strip(), i + 1
        body: list[str] = []
        i += 1
        while i < len(lines):
            line = lines[i].strip()
            if line.startswith(marker[0] * len(marker)) and line == line[0] * len(line):
                break
            body.append(lines[i])
            i += 1
        yield Fence(start, marker, info, tuple(body), closed=i < len(lines))
        i += 1


def rendering_problems(text: str) -> list[str]:
    """What would make the page render other than its author meant: a fence never closed,
    or one that swallowed prose (an opening fence with a language inside it means the
    previous fence was left open; a Markdown heading inside one means the same)."""
    problems = []
    for f in fences(text):
        if not f.closed:
            problems.append(f"line {f.start}: the code fence is never closed")
        for n, line in enumerate(f.body, start=f.start + 1):
            opener = _FENCE.match(line)
            if opener and opener.group(2).strip():
                problems.append(f"line {n}: a fence opens inside the fence of line {f.start}")
            if re.match(r"^#{2,6} \S", line):
                problems.append(f"line {n}: heading {line!r} is inside the fence of line "
                                f"{f.start}")
    return problems


def prose(text: str) -> str:
    """The text outside fenced code blocks."""
    inside = {n for f in fences(text) for n in range(f.start, f.start + len(f.body) + 2)}
    return "\n".join(line for n, line in enumerate(text.splitlines(), start=1)
                     if n not in inside)


def anchors(text: str) -> set[str]:
    """The anchors GitHub gives the headings of a page (lower case, punctuation dropped,
    spaces to hyphens; a repeated heading gets -1, -2...)."""
    seen: dict[str, int] = {}
    out = set()
    for line in prose(text).splitlines():
        m = re.match(r"^#{1,6} +(.*?) *#*$", line)
        if not m:
            continue
        slug = re.sub(r"[^\w\- ]", "", m.group(1).lower()).replace(" ", "-")
        n = seen.get(slug, 0)
        seen[slug] = n + 1
        out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def missing_paths(cited: set[str]) -> list[str]:
    """The cited repository paths that are not in the repository (globs allowed)."""
    missing = []
    for path in sorted(cited):
        if "*" in path:
            if not any(ROOT.glob(path.rstrip("/"))):
                missing.append(path)
        elif not (ROOT / path).exists():
            missing.append(path)
    return missing


def missing_bare_docs(cited: set[str]) -> list[str]:
    """Bare document names not found at the root, in docs/ or as any file of that name in
    the repository; a bare "README" (a section of it) is never found."""
    missing = []
    for name in sorted(cited):
        if name in ("PLATFORM-NOTES", "README"):
            missing.append(name)
            continue
        if not ((ROOT / name).exists() or name in _file_names()):
            missing.append(name)
    return missing


@functools.cache
def _file_names() -> frozenset[str]:
    """Every file name under the code, docs and playbooks folders: one walk, not one a
    citation (the fixtures hold thousands of files)."""
    return frozenset(p.name for d in (*CODE_DIRS, "docs", "playbooks")
                     for p in (ROOT / d).rglob("*"))


def code_citations(path: Path) -> tuple[set[str], set[str]]:
    """Repository paths and bare doc names cited in a module's comments and docstrings."""
    source = path.read_text()
    texts = [tok.string for tok in tokenize.generate_tokens(io.StringIO(source).readline)
             if tok.type == tokenize.COMMENT]
    texts += _docstrings(ast.parse(source))
    joined = "\n".join(texts)
    return set(_REPO_PATH.findall(joined)), set(_BARE_DOC.findall(joined))


def _docstrings(tree: ast.Module) -> list[str]:
    """Every module, class and function docstring: statements are walked, expressions
    (where no docstring can be) are not."""
    out, todo = [], [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            doc = ast.get_docstring(node, clean=False)
            if doc:
                out.append(doc)
        for name in ("body", "orelse", "finalbody", "handlers"):
            todo += [c for c in getattr(node, name, ())
                     if isinstance(c, ast.stmt | ast.excepthandler)]
    return out


def _code_files() -> list[Path]:
    # Not this file: it names the citations it refuses. Not the fixtures: recorded inputs.
    return sorted(p for d in CODE_DIRS for p in (ROOT / d).rglob("*.py")
                  if "fixtures" not in p.relative_to(ROOT).parts and p != Path(__file__))


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_markdown_renders_and_links_resolve(path: Path):
    text = path.read_text()
    assert rendering_problems(text) == [], f"{path.name} renders wrongly"
    for target in _LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue
        file, _, anchor = target.partition("#")
        linked = path.parent / file if file else path
        assert linked.exists(), f"{path.name}: broken link {target}"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked.read_text()), f"{path.name}: no heading for {target}"


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.name)
def test_every_path_a_page_cites_exists(path: Path):
    text = prose(path.read_text())
    spans = " ".join(re.findall(r"`([^`\n]+)`", text))
    cited = {p for p in _REPO_PATH.findall(spans) if "{" not in p}
    assert missing_paths(cited) == [], f"{path.name} cites paths that are not in the repository"


def test_every_path_the_code_cites_exists():
    problems = {}
    for path in _code_files():
        paths, docs = code_citations(path)
        gone = missing_paths({p for p in paths if "{" not in p}) + missing_bare_docs(docs)
        if gone:
            problems[str(path.relative_to(ROOT))] = gone
    assert problems == {}, f"comments or docstrings cite files not in the repository: {problems}"


def test_readme_is_short_and_links_every_command_page():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) < README_MAX_LINES
    for page in COMMAND_PAGES:
        assert f"](docs/{page}.md)" in text, f"README does not link docs/{page}.md"


def test_the_checker_finds_a_fence_that_swallows_prose():
    # The README's old failure: an unlabelled example fence left open swallowed the next
    # heading, and the next labelled fence then "closed" nothing.
    broken = "text\n\n```\nreport\n\n## Next section\n\n```bash\nls\n```\n"
    problems = rendering_problems(broken)
    assert any("heading '## Next section'" in p for p in problems)
    assert any("a fence opens inside" in p for p in problems)
    assert rendering_problems("```bash\n# a comment\nls\n```\n") == []
    assert rendering_problems("```\nnever closed\n") == ["line 1: the code fence is never closed"]


def test_anchors_are_githubs():
    text = "# A `run` page\n\n## What `run` stops, kills and cleans up\n\n## watch(): overhead\n"
    assert anchors(text) == {"a-run-page", "what-run-stops-kills-and-cleans-up",
                             "watch-overhead"}
    assert anchors("## Limits\n\n## Limits\n") == {"limits", "limits-1"}


def test_the_checker_finds_a_cited_file_that_is_not_there(tmp_path: Path):
    module = tmp_path / "m.py"
    module.write_text('"""See DESIGN.md and docs/nowhere.md."""\n'
                      "# measured in PLATFORM-NOTES; see docs/design.md and README.md\n"
                      'def f():\n    """As the README ("Overhead") says."""\n')
    paths, docs = code_citations(module)
    assert missing_paths(paths) == ["docs/nowhere.md"]
    assert missing_bare_docs(docs) == ["DESIGN.md", "PLATFORM-NOTES", "README"]


def test_design_catalog_table_is_generated_from_the_catalog():
    text = (ROOT / "docs" / "design.md").read_text()
    table = text.split("<!-- catalog:begin -->\n", 1)[1].split("\n<!-- catalog:end -->", 1)[0]
    assert table == markdown_table(), "docs/design.md is stale: python -m ddpdoctor.core.catalog"
