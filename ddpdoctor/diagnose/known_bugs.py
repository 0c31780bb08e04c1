"""Known upstream bugs as findings: from a log line (diagnose, run) or from versions (check).

    from ddpdoctor.diagnose.known_bugs import findings_for_versions
    findings_for_versions(torch="2.2.1", python="3.12.3")  # -> [Finding(KNOWN_UPSTREAM_BUG)]
"""

from __future__ import annotations

import re
from typing import Literal

from ddpdoctor.core.findings import Finding, Severity
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, verdict
from ddpdoctor.diagnose.kb.bugs import BY_ID, KNOWN_BUGS, RAISED_IN, KnownBug


def version_tuple(text: str) -> tuple[int, ...]:
    """``"2.8.0.dev20250327+cu126"`` -> ``(2, 8, 0)``; ``"3.12"`` -> ``(3, 12)``."""
    parts = []
    for piece in re.split(r"[.+-]", text.strip()):
        if not piece.isdigit():
            break
        parts.append(int(piece))
    return tuple(parts)


def in_range(version: str, lo: str | None, hi: str | None) -> bool:
    """Whether ``version`` lies in ``[lo, hi)``, compared on the parts both spell out."""
    v = version_tuple(version)
    if not v:
        return False
    if lo is not None and _cmp(v, version_tuple(lo)) < 0:
        return False
    return hi is None or _cmp(v, version_tuple(hi)) < 0


def _cmp(a: tuple[int, ...], b: tuple[int, ...]) -> int:
    n = max(len(a), len(b))
    a2, b2 = a + (0,) * (n - len(a)), b + (0,) * (n - len(b))
    return (a2 > b2) - (a2 < b2)


def affects(bug: KnownBug, versions: dict[str, str], require_all: bool) -> bool:
    """Whether ``versions`` fall in the bug's ranges. ``require_all``: every component the
    bug names must be known (check); otherwise unknown components do not rule it out."""
    if not bug.versions:
        return False if require_all else True
    for component, (lo, hi) in bug.versions.items():
        have = versions.get(component)
        if not have:
            if require_all:
                return False
            continue
        if not in_range(have, lo, hi):
            return False
    return True


def _finding(bug: KnownBug, severity: Severity | Literal[""] = "") -> Finding:
    return Finding("KNOWN_UPSTREAM_BUG", f"known upstream bug: {bug.title} ({bug.url})",
                   evidence={"bug": bug.id, "upstream": bug.url, "affected": bug.affected,
                             "fixed_in": bug.fixed, "workaround": bug.workaround},
                   severity=severity)


def findings_for_versions(torch: str | None = None, nccl: str | None = None,
                          python: str | None = None, cuda: str | None = None) -> list[Finding]:
    """KNOWN_UPSTREAM_BUG warnings for the bugs these versions are known to hit."""
    have = {k: v for k, v in (("torch", torch), ("nccl", nccl), ("python", python),
                              ("cuda", cuda)) if v}
    return [_finding(b) for b in KNOWN_BUGS if b.versions and affects(b, have, require_all=True)]


def known_bugs(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A log line that matches a known bug's signature, in a log whose versions fit it."""
    out = []
    seen = set()
    for e in ix.of(K.KNOWN_BUG):
        bug = BY_ID[e.typed("bug", str)]
        if bug.id in seen or not affects(bug, dict(ix.versions), require_all=False):
            continue
        seen.add(bug.id)
        f = _finding(bug, severity="error")  # it broke this job: not a mere warning
        v = verdict(ix, "KNOWN_UPSTREAM_BUG", f.title, [e], f.evidence, severity="error")
        out.append(v)
    return out + _raised_in(ix, seen)


def _raised_in(ix: EventIndex, seen: set[str]) -> list[Verdict]:
    """An exception raised where a known bug raises it (kb/bugs.py RaisedIn)."""
    out = []
    for e in ix.of(K.EXCEPTION):
        at, exc = e.get_str("raised_at"), e.get_str("exception")
        bug = next((b for b in RAISED_IN if b.id not in seen and b.raised_in is not None
                    and b.raised_in.matches(at, exc)), None)
        if bug is None or not affects(bug, dict(ix.versions), require_all=False):
            continue
        seen.add(bug.id)
        f = _finding(bug, severity="error")
        out.append(verdict(ix, "KNOWN_UPSTREAM_BUG", f.title, [e],
                           {**f.evidence, "raised_at": at}, severity="error"))
    return out


RULE = Rule("known_bugs", known_bugs, frozenset({
    K.NCCL_WARN, K.NCCL_CUDA, K.NCCL_DETAIL, K.EXCEPTION, K.ERROR_LINE, K.CUDA_ERROR,
    K.NCCL_SYSTEM, K.SEGFAULT, K.FATAL_PYTHON, K.PROCESS_EXIT, K.AGENT_FAILED,
    K.TORCHRUN_FAILURE, K.NCCL_SHM}))
