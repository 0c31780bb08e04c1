"""Pure: which loop of a source file holds some of its lines, a ``for`` or a ``while``.

A rank that stays on one or two lines while its peers wait (run/spinning.py) is either
polling a condition that never comes true (``while not os.path.exists(flag): pass``,
``while time.time() < deadline: pass``, ``while True: n += 1``) or going through data in a
tight loop (``for w in words: counts[w] = counts.get(w, 0) + 1``: rank 0 building a
vocabulary or scoring predictions while the others wait in a barrier). Its stacks cannot
tell the two apart: the same lines every read, the GIL held, no Python call below. Its
source can: a ``for`` loop (or a comprehension) steps through an iterable and ends with
it; a ``while`` loop re-tests a condition. So the innermost loop around the lines the
reads found decides; the file is read at the edge (run/stack_reads.py).
"""

from __future__ import annotations

import ast
import enum
from collections.abc import Iterable

_FOR = (ast.For, ast.AsyncFor, ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)


class Loop(enum.Enum):
    FOR = "for"  # steps through an iterable: data
    WHILE = "while"  # re-tests a condition: may poll for ever


def enclosing_loop(source: str, lines: Iterable[int]) -> tuple[Loop, int] | None:
    """The innermost loop of ``source`` whose lines include every one of ``lines``, and
    the line it starts on; None when no loop holds them or the source does not parse."""
    want = set(lines)
    if not want:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):  # not this Python's source, or a NUL byte
        return None
    best: tuple[int, int, Loop, int] | None = None  # (span, -depth, kind, first line)
    for node, depth in _own_nodes(_function_of(tree, want)):
        if not isinstance(node, (*_FOR, ast.While)) or not _holds(node, want):
            continue
        first = node.lineno
        # the tightest wins; of two on the same lines, the inner one
        key = ((node.end_lineno or first) - first, -depth,
               Loop.WHILE if isinstance(node, ast.While) else Loop.FOR, first)
        if best is None or key[:2] < best[:2]:
            best = key
    return (best[2], best[3]) if best is not None else None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _holds(node: ast.AST, lines: set[int]) -> bool:
    first = getattr(node, "lineno", None)
    last = getattr(node, "end_lineno", None) or first
    return first is not None and all(first <= n <= last for n in lines)  # type: ignore[operator]


def _function_of(tree: ast.Module, lines: set[int]) -> ast.AST:
    """The innermost function whose body holds the lines (the module when none): the
    frame the reads found runs it, and only its own loops repeat those lines."""
    best: ast.AST = tree
    for node in ast.walk(tree):  # outside in: a later holder is nested in an earlier one
        if isinstance(node, _SCOPES) and _holds(node, lines):
            best = node
    return best


def _own_nodes(scope: ast.AST) -> list[tuple[ast.AST, int]]:
    """The nodes of ``scope`` outside the functions defined in it, with their depth."""
    out: list[tuple[ast.AST, int]] = []
    todo = [(child, 1) for child in ast.iter_child_nodes(scope)]
    while todo:
        node, depth = todo.pop()
        out.append((node, depth))
        if not isinstance(node, _SCOPES):
            todo.extend((child, depth + 1) for child in ast.iter_child_nodes(node))
    return out
