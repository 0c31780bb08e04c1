"""What the ranks' in-training checks found: the watch's JSON-lines events -> findings.

Under ``ddpdoctor run`` every rank appends to one events file in the run directory. A
finding several ranks emitted alike (the same id and culprit ranks) is kept once, at its
first step. A finding that the crash triage also made from the output is merged into
that one: the log line leads, the watch's step and numbers ride along in its evidence.
"""

from __future__ import annotations

import os
from typing import Any

from ddpdoctor.findings import Finding


def watch_findings(path: str | os.PathLike, since: float = 0.0) -> list[Finding]:
    """The findings in ``path`` written at ``since`` (wall time) or later (missing or
    unreadable file: none), first step first. The file is only ever appended to: a reused
    run directory or a fixed ``DDPDOCTOR_EVENTS`` still holds earlier jobs' findings."""
    from ddpdoctor.watch.events import read_events

    try:
        events = read_events(str(path))
    except OSError:
        return []
    seen: dict[tuple[str, tuple[int, ...]], Finding] = {}
    fresh = (e for e in events if e.get("kind") == "finding" and "id" in e
             and float(e.get("time") or 0) >= since)
    for ev in sorted(fresh,
                     key=lambda e: (e.get("step", 0), e.get("time", 0))):
        try:
            f = Finding.from_dict(ev)
        except (KeyError, ValueError, TypeError):
            continue  # an id this version does not know, or a torn line
        key = (f.id, tuple(f.ranks))
        if key in seen:
            continue
        f.evidence.setdefault("step", ev.get("step"))
        f.evidence["reported_by"] = f"ddpdoctor.watch on rank {ev.get('rank')}"
        seen[key] = f
    return list(seen.values())


def merge(existing: list[Finding], watched: list[Finding]) -> list[Finding]:
    """``watched`` findings not already in ``existing``; those that are (same id) lend
    their evidence to the existing finding as ``evidence["watch"]``."""
    by_id = {f.id: f for f in existing}
    new = []
    for f in watched:
        same = by_id.get(f.id)
        if same is None:
            new.append(f)
            continue
        same.evidence.setdefault("watch", _brief(f))
        if not same.ranks and f.ranks:
            same.ranks = list(f.ranks)
    return new


def _brief(f: Finding) -> dict[str, Any]:
    return {"title": f.title, "ranks": f.ranks, **f.evidence}
