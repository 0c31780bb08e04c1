"""Playbooks: one Markdown file per finding id, shipped as package data.

Format (kept dependency-free, so no YAML parser)::

    ---
    id: ENV_SHM_TOO_SMALL
    title: /dev/shm is too small
    severity: error
    applies-to: check, diagnose
    ---
    ## Symptoms
    ## Why it happens
    ## Fix
    ## Verify
"""

from __future__ import annotations

import re
import sys
from dataclasses import dataclass, field
from importlib import resources
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # where the type lives moved in 3.11
    if sys.version_info >= (3, 11):
        from importlib.resources.abc import Traversable
    else:
        from importlib.abc import Traversable

REQUIRED_KEYS = ("id", "title", "severity", "applies-to")
REQUIRED_SECTIONS = ("Symptoms", "Why it happens", "Fix", "Verify")


class PlaybookError(ValueError):
    """A playbook file that does not follow the format."""


@dataclass
class Playbook:
    id: str
    title: str
    severity: str
    applies_to: list[str]
    body: str
    sections: dict[str, str] = field(default_factory=dict)


_SECTION = re.compile(r"^## +(.+?)\s*$", re.MULTILINE)


def parse(text: str, source: str = "<playbook>") -> Playbook:
    lines = text.splitlines()
    if not lines or lines[0].strip() != "---":
        raise PlaybookError(f"{source}: must start with a '---' front matter line")
    try:
        end = next(i for i in range(1, len(lines)) if lines[i].strip() == "---")
    except StopIteration:
        raise PlaybookError(f"{source}: front matter is not closed with '---'") from None
    meta: dict[str, str] = {}
    for line in lines[1:end]:
        if not line.strip():
            continue
        key, sep, value = line.partition(":")
        if not sep:
            raise PlaybookError(f"{source}: front matter line without 'key: value': {line!r}")
        meta[key.strip()] = value.strip()
    missing = [k for k in REQUIRED_KEYS if not meta.get(k)]
    if missing:
        raise PlaybookError(f"{source}: front matter lacks {', '.join(missing)}")
    body = "\n".join(lines[end + 1:]).strip() + "\n"
    heads = list(_SECTION.finditer(body))
    sections = {}
    for i, m in enumerate(heads):
        stop = heads[i + 1].start() if i + 1 < len(heads) else len(body)
        sections[m.group(1)] = body[m.end():stop].strip()
    absent = [s for s in REQUIRED_SECTIONS if not sections.get(s)]
    if absent:
        raise PlaybookError(f"{source}: missing or empty sections: {', '.join(absent)}")
    return Playbook(
        id=meta["id"],
        title=meta["title"],
        severity=meta["severity"],
        applies_to=[a.strip() for a in meta["applies-to"].strip("[]").split(",") if a.strip()],
        body=body,
        sections=sections,
    )


def _dir() -> Traversable:
    return resources.files("ddpdoctor.playbooks")


def available() -> list[str]:
    """Ids of every shipped playbook, sorted."""
    return sorted(p.name[:-3] for p in _dir().iterdir() if p.name.endswith(".md"))


def load(finding_id: str) -> Playbook:
    """The playbook of ``finding_id``; KeyError when there is none. Only shipped ids are
    looked up: a path ("../x"), a NUL or a 5,000-character name never reaches the file
    system."""
    if finding_id not in available():
        raise KeyError(finding_id)
    path = _dir() / f"{finding_id}.md"
    return parse(path.read_text(encoding="utf-8"), source=f"playbooks/{finding_id}.md")


def load_all() -> list[Playbook]:
    return [load(i) for i in available()]
