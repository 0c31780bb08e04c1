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


def enclosing_loop(source: str, lines: Iterable[int],
                   function: str = "") -> tuple[Loop, int] | None:
    """The innermost loop of ``source`` whose lines include every one of ``lines``, in the
    function the frame runs (``function``: its name as a stack shows it, ``Probe.forward``,
    ``<lambda>``; "" for the innermost function holding the lines), and the line the loop
    starts on; None when no loop holds them or the source does not parse. A comprehension
    in a ``while`` loop's condition is that loop's (``while not [p for p in ps if
    os.path.exists(p)]: pass`` polls)."""
    want = set(lines)
    if not want:
        return None
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError, RecursionError, MemoryError):  # not parseable here
        return None
    best: tuple[int, int, Loop, int] | None = None  # (span, -depth, kind, first line)
    for node, depth, in_test in _own_nodes(_function_of(tree, want, function)):
        if not isinstance(node, (*_FOR, ast.While)) or not _holds(node, want):
            continue
        first = node.lineno
        kind = Loop.WHILE if isinstance(node, ast.While) or in_test else Loop.FOR
        # the tightest wins; of two on the same lines, the inner one
        key = ((node.end_lineno or first) - first, -depth, kind, first)
        if best is None or key[:2] < best[:2]:
            best = key
    return (best[2], best[3]) if best is not None else None


_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)


def _holds(node: ast.AST, lines: set[int]) -> bool:
    first = getattr(node, "lineno", None)
    last = getattr(node, "end_lineno", None) or first
    return first is not None and all(first <= n <= last for n in lines)  # type: ignore[operator]


def _runs(node: ast.AST, function: str) -> bool:
    """Is ``node`` the scope a frame named ``function`` runs? A comprehension's own frame
    (``<listcomp>``, Python < 3.12) is its function's."""
    leaf = function.rsplit(".", 1)[-1]
    if isinstance(node, ast.Lambda):
        return leaf == "<lambda>"
    if not leaf or leaf.startswith("<"):
        return leaf != "<module>"
    return node.name == leaf  # type: ignore[attr-defined]


def _function_of(tree: ast.Module, lines: set[int], function: str) -> ast.AST:
    """The innermost function run by the frame whose body holds the lines (the module
    when none): only its own loops repeat those lines."""
    best: ast.AST = tree
    for node in ast.walk(tree):  # outside in: a later holder is nested in an earlier one
        if isinstance(node, _SCOPES) and _holds(node, lines) and _runs(node, function):
            best = node
    return best


def _own_nodes(scope: ast.AST) -> list[tuple[ast.AST, int, bool]]:
    """The nodes of ``scope`` outside the functions defined in it, with their depth and
    whether they sit in a ``while`` loop's condition."""
    out: list[tuple[ast.AST, int, bool]] = []
    todo = [(child, 1, False) for child in ast.iter_child_nodes(scope)]
    while todo:
        node, depth, in_test = todo.pop()
        out.append((node, depth, in_test))
        if isinstance(node, _SCOPES):
            continue
        for child in ast.iter_child_nodes(node):
            test = in_test or (isinstance(node, ast.While) and child is node.test)
            todo.append((child, depth + 1, test))
    return out
