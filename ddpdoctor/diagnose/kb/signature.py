"""The shape of one knowledge-base entry: a known error text and what it means."""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from ddpdoctor.core.signames import killed_by
from ddpdoctor.diagnose.events import EventKind


@dataclass(frozen=True)
class Example:
    """A real line this signature must match, where it was seen, and what it yields.

    ``source`` is the public URL of the thread the line was posted in, or the path of a log
    recorded from a real run in this repository (``tests/fixtures/...``).
    """

    line: str
    source: str
    fields: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True)
class Signature:
    """One known error text.

    ``needle`` is a literal every match contains (or a tuple: one of them): the reader's
    prefilter looks for needles in whole chunks at C speed, and only lines holding one reach
    ``pattern``. The named
    groups of ``pattern`` are the fields it extracts; ``convert`` turns a group's text into
    its value (``int``, a list of ranks); ``extra`` adds computed fields.
    """

    name: str
    kind: EventKind
    needle: str | tuple[str, ...]  # one literal, or several (any of them)
    pattern: str
    finding: str  # the finding id this text leads to when it is the root cause
    versions: str  # the releases that print this wording
    examples: tuple[Example, ...]
    convert: Mapping[str, Callable[[str], object]] = field(default_factory=dict)
    extra: Callable[[re.Match[str]], Mapping[str, object]] | None = None
    flags: int = 0
    fallback: bool = False  # generic wording: only when no specific signature matched

    def __post_init__(self) -> None:
        object.__setattr__(self, "_regex", re.compile(self.pattern, self.flags))

    @property
    def regex(self) -> re.Pattern[str]:
        return self._regex  # type: ignore[attr-defined,no-any-return]

    @property
    def needles(self) -> tuple[str, ...]:
        return (self.needle,) if isinstance(self.needle, str) else self.needle

    @property
    def fields(self) -> tuple[str, ...]:
        return tuple(self.regex.groupindex)

    def match(self, body: str) -> dict[str, object] | None:
        """The fields of ``body`` (a line without its rank prefix), or None."""
        if not any(n in body for n in self.needles):
            return None
        m = self.regex.search(body)
        if m is None:
            return None
        data: dict[str, object] = {}
        for name, value in m.groupdict().items():
            if value is not None:
                data[name] = self.convert.get(name, _strip)(value)
        if self.extra is not None:
            data.update(self.extra(m))
        return data


def _strip(text: str) -> str:
    return text.strip()


# SIGABRT, SIGBUS, SIGKILL, SIGSEGV: the deaths whose negative returncode a wrapper's
# sys.exit passes on as the byte 256 - N (250, 249, 247, 245)
_BYTE_SIGNALS = frozenset({6, 7, 9, 11})


def launcher_exit(launcher: str, exit_code: int) -> dict[str, object]:
    """A launcher's line on a child that ended: which launcher, and the signal a
    negative code names. A wrapper between the launcher and Python (Determined's
    pid_client, a shell script) that exits with its child's returncode, -9, reaches the
    launcher as the byte 256 - 9 = 247: the signal the child died of, not a code it chose;
    the code is then the signal's, the launcher's own kept as ``reported_exit_code``."""
    out: dict[str, object] = {"launcher": launcher}
    if 256 - exit_code in _BYTE_SIGNALS:
        out.update(exit_code=exit_code - 256, reported_exit_code=exit_code)
        exit_code -= 256
    if exit_code < 0:
        out["signal"] = killed_by(exit_code)
    return out


def ints(text: str) -> list[int]:
    """``"4, 5, 6"`` -> ``[4, 5, 6]``."""
    return [int(r) for r in re.findall(r"\d+", text)]


class NeedleIndex:
    """Which of a row of items (signatures, floor patterns) a line can match, told by the
    literal needles each needs: one pass over the distinct needles, each looked for once,
    instead of every item testing its own. The positions come back in the items' order."""

    def __init__(self, needles_of: Sequence[tuple[str, ...]]) -> None:
        by: dict[str, list[int]] = {}
        for i, needles in enumerate(needles_of):
            for n in needles:
                by.setdefault(n, []).append(i)
        self._by = {n: tuple(ix) for n, ix in by.items()}

    @property
    def needles(self) -> tuple[str, ...]:
        return tuple(sorted(self._by))

    def held(self, body: str) -> list[int]:
        return sorted({i for n, ix in self._by.items() if n in body for i in ix})
