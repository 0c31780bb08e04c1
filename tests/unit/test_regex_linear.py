"""No pattern the doctor runs over a log's lines starts with an unanchored wildcard.

``re.search`` tries a pattern at every offset of the line; one that starts with ``.*``
(or ``.*?``, ``[^x]*``) scans to the line's end from each of them and backtracks: the work
grows with the square of the line's length. fairseq prints 4,000-character stats lines,
each with ``loss_scale``: the floor's loss-scale pattern (``(?i:.*(?:reducing to|loss
scale...))``) took 119 s on 5 MB of them, and 1.3 s anchored with ``^``; a leading
``\\S+`` does the same on a long run with no blank (Lightning's few-workers warning: 5.8 s
on one 16,000-character line), and ``(?<!\\S)`` before it starts it only where a word
starts, with the same leftmost match. Every compiled
pattern reachable from the text-reading packages' modules is checked here, not one by one:
a new rule with the same shape fails this test, not a user's diagnose.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
import re
import sys
from re import _constants as C  # type: ignore[attr-defined]
from re import _parser as P  # type: ignore[attr-defined]

import pytest

# the packages that read a job's text (logs, stacks, output); the rest import torch
READERS = ("core", "diagnose", "attach", "hang", "run", "jobview", "watch", "report",
           "distenv", "nvml")
# modules with an effect on import: the CLI's entry, the watch's injected sitecustomize
SKIP = ("__main__", "sitecustomize")
# only ever .match()ed at a position, never searched: no offsets retried
MATCHED_ONLY = {"ddpdoctor.core.redact._VALUE"}


_NOT = {C.CATEGORY_NOT_SPACE, C.CATEGORY_NOT_DIGIT, C.CATEGORY_NOT_WORD}


def _wide(item: tuple) -> bool:
    """Matches nearly any character: ``.``, ``[^...]``, a negated literal, ``\\S`` (a run of
    them is as long as a path, a URL, a line with no blank: thousands of characters)."""
    op, av = item
    if op is C.ANY or op is C.NOT_LITERAL:
        return True
    return op is C.IN and bool(av) and (av[0][0] is C.NEGATE or any(
        o is C.CATEGORY and a in _NOT for o, a in av))


def _anchor(op: object, av: object) -> bool:
    """``^`` (the line's start), or ``(?<!\\S)`` (a word's start): the search starts
    there, not at every offset."""
    if op is C.AT:
        return av in (C.AT_BEGINNING, C.AT_BEGINNING_STRING)
    if op is C.ASSERT_NOT:
        direction, sub = av  # type: ignore[misc]
        return direction == -1 and list(sub) == [(C.IN, [(C.CATEGORY, C.CATEGORY_NOT_SPACE)])]
    return False


def leads_with_wildcard(items: list) -> bool:
    """Does this parsed pattern start (through its groups, each branch, and past anything
    that may match nothing: ``\\b``, a lookahead, an optional group) with an unbounded
    repeat of a wide item, not anchored at the line's or a word's start?"""
    for i, (op, av) in enumerate(items):
        if _anchor(op, av):
            return False
        if op is C.SUBPATTERN:
            return leads_with_wildcard(list(av[-1]) + items[i + 1:])
        if op is C.BRANCH:
            return any(leads_with_wildcard(list(b) + items[i + 1:]) for b in av[1])
        if op in (C.MAX_REPEAT, C.MIN_REPEAT):
            lo, hi, sub = av
            if hi == C.MAXREPEAT and len(sub) == 1 and _wide(sub[0]):
                return True
            if lo == 0:  # may match nothing: what follows may lead as well
                return leads_with_wildcard(list(sub)) or leads_with_wildcard(items[i + 1:])
            return leads_with_wildcard(list(sub))
        if op in (C.AT, C.ASSERT, C.ASSERT_NOT):
            continue  # zero-width: the next item is tried at every offset too
        return False  # a literal, a class: the search moves on fast
    return False


def _patterns() -> dict[str, str]:
    """Every compiled pattern held by a reader module: in its globals, or in the tuples,
    dicts and frozen records (FloorPattern, kb Signature) they hold. pattern -> where."""
    for pkg in READERS:
        mod = importlib.import_module(f"ddpdoctor.{pkg}")
        for info in pkgutil.walk_packages(mod.__path__, f"{mod.__name__}."):
            if info.name.rsplit(".", 1)[-1] not in SKIP:
                importlib.import_module(info.name)
    found: dict[str, str] = {}
    seen: set[int] = set()

    def walk(obj: object, where: str, depth: int) -> None:
        if depth > 6 or id(obj) in seen or isinstance(obj, (str, bytes, int, float)):
            return
        seen.add(id(obj))
        if isinstance(obj, re.Pattern):
            if isinstance(obj.pattern, str):
                found.setdefault(obj.pattern, where)
        elif isinstance(obj, (tuple, list, set, frozenset)):
            for x in obj:
                walk(x, where, depth + 1)
        elif isinstance(obj, dict):
            for x in obj.values():
                walk(x, where, depth + 1)
        elif dataclasses.is_dataclass(obj) and hasattr(obj, "__dict__"):
            for x in vars(obj).values():
                walk(x, where, depth + 1)

    for name, module in list(sys.modules.items()):
        if name.startswith("ddpdoctor.") and name.split(".")[1] in READERS:
            for key, value in vars(module).items():
                walk(value, f"{name}.{key}", 0)
    return found


def test_the_check_sees_the_shapes_that_are_quadratic_and_passes_the_rest():
    quadratic = [r"(?i:.*(?:reducing to|loss scale))\s*(?P<s>[\d.]+)", r".*?error",
                 r"[^|]*\| ERROR", r"(?:x|.*y)z", r"(?P<op>\S+) \[ready ranks:",
                 r"\b\S+x", r"(?:a)?.*b", r"(?=x).*y"]
    linear = [r"^(?i:.*(?:reducing to|loss scale))\s*(?P<s>[\d.]+)", r"error: .*",
              r"\s*Traceback", r"(?P<a>\d+).*x", r"[a-z]*\| ERROR",
              r"(?<!\S)(?P<op>\S+) \[ready ranks:"]
    for pattern in quadratic:
        assert leads_with_wildcard(list(P.parse(pattern))), pattern
    for pattern in linear:
        assert not leads_with_wildcard(list(P.parse(pattern))), pattern


@pytest.fixture(scope="module")
def patterns() -> dict[str, str]:
    return _patterns()


def test_the_readers_hold_the_patterns_that_read_logs(patterns):
    """The walk reaches the rules as data: the floor's and the knowledge base's."""
    where = set(patterns.values())
    assert "ddpdoctor.diagnose.floor.PATTERNS" in where
    assert any(w.startswith("ddpdoctor.diagnose.kb.") for w in where), sorted(where)[:20]
    assert len(patterns) > 200


def test_no_reader_pattern_starts_with_an_unanchored_wildcard(patterns):
    bad = {where: p for p, where in patterns.items()
           if where not in MATCHED_ONLY and leads_with_wildcard(list(P.parse(p)))}
    assert not bad, bad
