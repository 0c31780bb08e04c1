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
    best: tuple[int, Loop, int] | None = None  # (span, kind, first line)
    for node in ast.walk(tree):
        if not isinstance(node, (*_FOR, ast.While)):
            continue
        first, last = node.lineno, node.end_lineno or node.lineno
        if not all(first <= n <= last for n in want):
            continue
        span = last - first
        # the tightest wins; of two on the same lines, the inner one (walk goes outside in)
        if best is None or span <= best[0]:
            best = (span, Loop.WHILE if isinstance(node, ast.While) else Loop.FOR, first)
    return (best[1], best[2]) if best is not None else None
