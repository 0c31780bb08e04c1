"""What run records about the job never carries its secrets.

redact.py decides what looks secret by name (``HF_TOKEN``, ``--token X``). run knows more:
the job's actual secret values (those of secret-named variables in its environment and of
secret-named flags on its command line). Each of those values that turns up anywhere in
run's report (a command line read from /proc, a log line quoted as evidence, a process
name) is masked too, not only where a name announces it.

The masking is linear in the text and the values together: a command line of 100 kB
with thousands of ``--token X`` pairs is as many values as it is long, and replacing
them one by one (one scan of the report per value) was quadratic (issue #27). Few values
are looked for one by one (str.find, C speed); many in one pass of an Aho-Corasick
automaton (``_Literals``). Either way every occurrence is masked, and two that overlap
are one mask (masking one value after the other left the tail of the second shown).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, TypeVar, overload

from ddpdoctor.core import redact

if TYPE_CHECKING:
    from ddpdoctor.core.report import Report

_K = TypeVar("_K")
_V = TypeVar("_V")
_MIN_LEN = 4  # shorter values ("1", "yes") would mask ordinary words
# Up to this many values, one str.find scan each (C speed) beats one pass of the
# pure-Python automaton; above it the automaton's single pass wins and stays linear.
_FEW = 16


def secret_values(env: Mapping[str, str], argv: list[str]) -> list[str]:
    values = {v for k, v in env.items() if redact.is_secret_name(k) and v}
    masked = redact.argv(argv)
    for raw, shown in zip(argv, masked):
        if raw != shown:
            values.add(raw.partition("=")[2] if "=" in shown else raw)
    return sorted((v for v in values if len(v) >= _MIN_LEN), key=len, reverse=True)


class _Literals:
    """Every occurrence of any of many literal strings, found in one pass over a text.

    Aho-Corasick: a trie of the values with failure links; ``longest[s]`` is the longest
    value ending at state ``s`` (its own or one reached by its failure chain), which is
    all masking needs: the union of the occurrences.
    """

    def __init__(self, words: list[str]) -> None:
        goto: list[dict[str, int]] = [{}]
        longest = [0]
        for w in words:
            s = 0
            for ch in w:
                nxt = goto[s].get(ch)
                if nxt is None:
                    nxt = len(goto)
                    goto.append({})
                    longest.append(0)
                    goto[s][ch] = nxt
                s = nxt
            longest[s] = max(longest[s], len(w))
        fail = [0] * len(goto)
        queue = deque(goto[0].values())  # depth 1 fails to the root
        while queue:
            s = queue.popleft()
            for ch, t in goto[s].items():
                queue.append(t)
                f = fail[s]
                while f and ch not in goto[f]:
                    f = fail[f]
                fail[t] = goto[f].get(ch, 0)  # a shorter state: never t itself
                longest[t] = max(longest[t], longest[fail[t]])
        self._goto, self._fail, self._longest = goto, fail, longest

    def spans(self, text: str) -> list[tuple[int, int]]:
        """The union of all occurrences, as sorted disjoint [start, end) spans."""
        goto, fail, longest = self._goto, self._fail, self._longest
        out: list[tuple[int, int]] = []
        s = 0
        for i, ch in enumerate(text):
            while s and ch not in goto[s]:
                s = fail[s]
            s = goto[s].get(ch, 0)
            if longest[s]:
                start, end = i + 1 - longest[s], i + 1
                while out and start < out[-1][1]:  # overlaps: one mask, no piece shown
                    start = min(start, out.pop()[0])
                out.append((start, end))
        return out

    def mask(self, text: str) -> str:
        return _mask_spans(text, self.spans(text))


def _spans_each(text: str, secrets: list[str]) -> list[tuple[int, int]]:
    """``_Literals.spans`` for a few values: one C-speed scan per value (each occurrence
    found as str.replace would: left to right, not overlapping itself)."""
    found = []
    for s in secrets:
        i = text.find(s)
        while i >= 0:
            found.append((i, i + len(s)))
            i = text.find(s, i + len(s))
    found.sort()
    out: list[tuple[int, int]] = []
    for start, end in found:
        if out and start < out[-1][1]:  # overlaps: one mask, no piece shown
            out[-1] = (out[-1][0], max(end, out[-1][1]))
        else:
            out.append((start, end))
    return out


def _mask_spans(text: str, spans: list[tuple[int, int]]) -> str:
    if not spans:
        return text
    parts: list[str] = []
    pos = 0
    for start, end in spans:
        parts += (text[pos:start], redact.MASK)
        pos = end
    parts.append(text[pos:])
    return "".join(parts)


@overload
def scrub(obj: str, secrets: list[str]) -> str: ...
@overload
def scrub(obj: dict[_K, _V], secrets: list[str]) -> dict[_K, object]: ...
@overload
def scrub(obj: object, secrets: list[str]) -> object: ...
def scrub(obj: object, secrets: list[str]) -> object:
    """``redact.deep(obj)`` with every literal secret value masked as well."""
    return _scrub(obj, _masker(secrets))


def scrub_report(report: Report, secrets: list[str]) -> None:
    """In place: every check's summary and data, every finding's title and evidence, the
    world block."""
    mask = _masker(secrets)  # built once for the whole report
    report.world = _scrub(report.world, mask)
    for c in report.checks:
        c.summary = _scrub(c.summary, mask)
        c.data = _scrub(c.data, mask)
    for f in report.findings:
        f.title = _scrub(f.title, mask)
        f.evidence = _scrub(f.evidence, mask)


def _masker(secrets: list[str]) -> Callable[[str], str] | None:
    if not secrets:
        return None
    if len(secrets) <= _FEW:
        return lambda text: _mask_spans(text, _spans_each(text, secrets))
    return _Literals(secrets).mask


@overload
def _scrub(obj: str, mask: Callable[[str], str] | None) -> str: ...
@overload
def _scrub(obj: dict[_K, _V], mask: Callable[[str], str] | None) -> dict[_K, object]: ...
@overload
def _scrub(obj: object, mask: Callable[[str], str] | None) -> object: ...
def _scrub(obj: object, mask: Callable[[str], str] | None) -> object:
    obj = redact.deep(obj)
    return obj if mask is None else _replace(obj, mask)


@overload
def _replace(obj: str, mask: Callable[[str], str]) -> str: ...
@overload
def _replace(obj: dict[_K, _V], mask: Callable[[str], str]) -> dict[_K, object]: ...
@overload
def _replace(obj: object, mask: Callable[[str], str]) -> object: ...
def _replace(obj: object, mask: Callable[[str], str]) -> object:
    if isinstance(obj, str):
        return mask(obj) if len(obj) >= _MIN_LEN else obj
    if isinstance(obj, dict):
        return {_replace(k, mask) if isinstance(k, str) else k: _replace(v, mask)
                for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_replace(v, mask) for v in obj]
    return obj
