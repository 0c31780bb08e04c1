"""What the ranks' in-training checks found: the watch's JSON-lines events -> findings.

Under ``ddpdoctor run`` every rank appends to one events file in the run directory. A
finding several ranks emitted alike (the same id and culprit ranks) is kept once, at its
first step. A finding that the crash triage also made from the output is merged into
that one: the log line leads, the watch's step and numbers ride along in its evidence.
"""

from __future__ import annotations

import os
from typing import Any

from ddpdoctor.core.attachment import Attachment
from ddpdoctor.core.findings import Finding


def watch_findings(path: str | os.PathLike, since: float = 0.0) -> list[Finding]:
    """The findings in ``path`` written at ``since`` (wall time) or later (missing or
    unreadable file: none), first step first. The file is only ever appended to: a reused
    run directory or a fixed ``DDPDOCTOR_EVENTS`` still holds earlier jobs' findings."""
    seen: dict[tuple[str, tuple[int, ...]], Finding] = {}
    fresh = (e for e in _fresh(path, since, "finding") if "id" in e)
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
    return _earliest_rank_scoped(list(seen.values()))


def _earliest_rank_scoped(found: list[Finding]) -> list[Finding]:
    """A finding each rank made alone (``scope: rank``: no gather compared the ranks,
    e.g. a NaN seen after the last check step) is kept once per id: at the earliest
    step, naming the ranks that saw it then. A NaN spreads to every rank through the
    next all-reduce; the rank that had it first is the one to look at."""
    scoped: dict[str, list[Finding]] = {}
    out: list[Finding] = []
    for f in found:
        if f.evidence.get("scope") == "rank":
            scoped.setdefault(f.id, []).append(f)
        else:
            out.append(f)
    for same in scoped.values():
        first = min(int(f.evidence.get("step") or 0) for f in same)
        at_first = [f for f in same if int(f.evidence.get("step") or 0) == first]
        keep = at_first[0]
        keep.ranks = sorted({r for f in at_first for r in f.ranks})
        keep.evidence["ranks_later"] = sorted({r for f in same for r in f.ranks}
                                              - set(keep.ranks))
        if len(keep.ranks) > 1:
            keep.title = keep.title.replace(f"on rank {at_first[0].ranks[0]} ",
                                            f"on rank {','.join(map(str, keep.ranks))} ")
        out.append(keep)
    return out


def _fresh(path: str | os.PathLike, since: float, kind: str) -> list[dict[str, Any]]:
    from ddpdoctor.watch.events import read_events

    try:
        events = read_events(str(path))
    except OSError:
        return []
    return [e for e in events if isinstance(e, dict) and e.get("kind") == kind
            and float(e.get("time") or 0) >= since]


def watch_notes(path: str | os.PathLike, since: float = 0.0, limit: int = 3) -> list[str]:
    """The watch's distinct notes (what it could not compare, and why), first first."""
    seen: dict[str, None] = {}
    for e in _fresh(path, since, "note"):
        seen.setdefault(str(e.get("message"))[:400], None)
    return list(seen)[:limit]


def describe_attachments(atts: list[Attachment]) -> str:
    """One phrase: what the watch watched, on which ranks; or that it watched nothing."""
    if not atts:
        return ("no model was watched: no DDP or FSDP2 model was built and no optimizer "
                "stepped a model in a process group of 2+ ranks")
    kinds: dict[tuple[str, str, str], set[int]] = {}
    for a in atts:
        kinds.setdefault((a.model, a.wrapper, a.how), set()).add(a.rank)
    parts = [f"{model} ({wrapper}, attached {how}) on rank {_span(sorted(ranks))}"
             for (model, wrapper, how), ranks in sorted(kinds.items())]
    return "watching " + "; ".join(parts)


def _span(ranks: list[int]) -> str:
    if len(ranks) > 2 and ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]}"
    return ",".join(map(str, ranks))


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


def _brief(f: Finding) -> dict[str, object]:
    return {"title": f.title, "ranks": f.ranks, **f.evidence}
