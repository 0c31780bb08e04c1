"""Source evidence: is a line of user code inside a rank-guarded block?

``if rank == 0:``, ``if dist.get_rank() == 0:``, ``if accelerator.is_main_process:``,
``if self.trainer.is_global_zero:``, ``if local_rank != 0:`` ... A collective called only
under such a guard runs on some ranks and not on the others: the classic one-sided hang.
The file is parsed with ``ast`` (never imported: user code is not run), once per file.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from functools import lru_cache

from ddpdoctor.attach.stacks import Frame

# Names that hold a rank number, and flags that are true on one rank only, as the
# frameworks spell them (torch, Lightning, accelerate, DeepSpeed, HF Trainer, Fabric).
_RANK_NAMES = re.compile(
    r"^(_?(global_|local_|node_|dp_|world_)?rank|get_(global_|local_|node_)?rank|rank_id"
    r"|process_index|local_process_index|global_rank|local_rank|node_rank)$")
_RANK_FLAGS = re.compile(
    r"^(is_main_process|is_local_main_process|is_global_zero|is_local_zero"
    r"|is_world_process_zero|is_local_process_zero|is_rank_zero|is_master|is_main|is_chief"
    r"|rank_zero_only)$")
_MAX_SOURCE_BYTES = 2_000_000


@dataclass(frozen=True)
class RankGuard:
    """A frame of user code inside a block that only some ranks enter."""

    filename: str
    line: int  # the guard's line (the ``if``)
    text: str  # the guard's condition as written
    frame: Frame  # the frame inside the block

    def describe(self) -> str:
        from os.path import basename

        return (f"{self.frame.name} ({basename(self.frame.filename)}:{self.frame.line}) "
                f"runs under `if {self.text}` at {basename(self.filename)}:{self.line}")


def _leaf_name(node: ast.AST) -> str:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    if isinstance(node, ast.Call):
        return _leaf_name(node.func)
    return ""


def _mentions_rank(test: ast.AST, derived: frozenset[str] = frozenset()) -> bool:
    """The condition reads a rank (``x.rank == 0``, ``get_rank() != 0``), a main flag, or
    a flag the file computed from one (``is_master = rank == 0``)."""
    for node in ast.walk(test):
        name = _leaf_name(node)
        if name and (_RANK_FLAGS.match(name) or _RANK_NAMES.match(name) or name in derived):
            return True
    return False


def _is_sentinel(test: ast.AST) -> bool:
    """``local_rank != -1``, ``rank is not None``, ``rank >= 0``: "running distributed",
    true on every rank alike, so a block under it is no one-sided guard."""
    if not (isinstance(test, ast.Compare) and len(test.ops) == 1):
        return False
    left, op, right = test.left, test.ops[0], test.comparators[0]
    if _RANK_NAMES.match(_leaf_name(right)) and not _RANK_NAMES.match(_leaf_name(left)):
        left, right = right, left
        op = {ast.Lt: ast.Gt(), ast.LtE: ast.GtE()}.get(type(op), op)
    if not _RANK_NAMES.match(_leaf_name(left)):
        return False
    try:
        value = ast.literal_eval(right)  # -1 is UnaryOp(USub, 1) in the tree
    except (ValueError, TypeError, SyntaxError, RecursionError):
        return False
    if value is None:
        return isinstance(op, (ast.Is, ast.IsNot, ast.Eq, ast.NotEq))
    if isinstance(value, int) and not isinstance(value, bool):
        return (value == -1 and isinstance(op, (ast.Eq, ast.NotEq, ast.Gt))) or \
            (value == 0 and isinstance(op, ast.GtE))
    return False


def _derived_flags(tree: ast.AST) -> frozenset[str]:
    """Names assigned a comparison of a rank: ``is_master = rank == 0``. Comparisons
    only: ``device = torch.device(f"cuda:{local_rank}")`` is no rank flag."""
    names = set()
    for node in ast.walk(tree):
        if (isinstance(node, ast.Assign) and len(node.targets) == 1
                and isinstance(node.targets[0], (ast.Name, ast.Attribute))
                and isinstance(node.value, (ast.Compare, ast.BoolOp, ast.UnaryOp))
                and _mentions_rank(node.value)):
            names.add(_leaf_name(node.targets[0]))
    return frozenset(names)


def _decorated_rank_zero_only(fn: ast.AST) -> bool:
    decorators = getattr(fn, "decorator_list", [])
    return any(_RANK_FLAGS.match(_leaf_name(d)) for d in decorators)


@dataclass(frozen=True)
class _Block:
    first: int
    last: int
    guard_line: int
    text: str


class _GuardFinder(ast.NodeVisitor):
    def __init__(self, source: str, derived: frozenset[str]) -> None:
        self.source = source
        self.derived = derived
        self.blocks: list[_Block] = []

    def _add(self, body: list[ast.stmt], line: int, text: str) -> None:
        if body:
            self.blocks.append(_Block(body[0].lineno, max(getattr(s, "end_lineno", s.lineno)
                                                          for s in body), line, text))

    def visit_If(self, node: ast.If) -> None:  # ast's spelling
        if _mentions_rank(node.test, self.derived) and not _is_sentinel(node.test):
            text = ast.get_source_segment(self.source, node.test) or "rank guard"
            self._add(node.body, node.lineno, text)
            self._add(node.orelse, node.lineno, f"not ({text})")
        self.generic_visit(node)

    def _visit_function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        if _decorated_rank_zero_only(node):
            self._add(node.body, node.lineno, "@rank_zero_only")
        self.generic_visit(node)

    visit_FunctionDef = _visit_function
    visit_AsyncFunctionDef = _visit_function


@lru_cache(maxsize=256)
def _blocks_of(source: str) -> tuple[_Block, ...]:
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    finder = _GuardFinder(source, _derived_flags(tree))
    finder.visit(tree)
    return tuple(finder.blocks)


def guard_at(source: str, line: int) -> tuple[int, str] | None:
    """Pure: the innermost rank guard around ``line`` of ``source`` -> (guard line, text)."""
    around = [b for b in _blocks_of(source) if b.first <= line <= b.last]
    if not around:
        return None
    inner = max(around, key=lambda b: b.first)
    return inner.guard_line, inner.text


@lru_cache(maxsize=256)
def _read_source(filename: str) -> str:
    """The file's text, read once per file (thousands of ranks share a few files)."""
    import os

    from ddpdoctor.core import safefile

    try:
        # realpath: a script reached through a symlink is still the user's source; the
        # open itself refuses FIFOs and devices (a read must never block the doctor)
        fd = safefile.open_regular(os.path.realpath(filename), os.O_RDONLY)
    except (OSError, ValueError):
        return ""
    with os.fdopen(fd, "rb") as f:
        data = f.read(_MAX_SOURCE_BYTES)
    return data.decode("utf-8", "replace")


def find_guard(frames: tuple[Frame, ...] | list[Frame],
               is_library: object = None) -> RankGuard | None:
    """The innermost user frame of a stack that runs under a rank guard (reads the files)."""
    from ddpdoctor.attach.classify import is_library as default_is_library

    lib = is_library if callable(is_library) else default_is_library
    for frame in frames:
        if lib(frame.filename) or frame.line <= 0:
            continue
        source = _read_source(frame.filename)
        hit = guard_at(source, frame.line) if source else None
        if hit is not None:
            return RankGuard(frame.filename, hit[0], hit[1], frame)
    return None
