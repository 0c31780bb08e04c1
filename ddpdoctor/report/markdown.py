"""Playbooks (Markdown under playbooks/) as HTML, with markdown-it-py.

Raw HTML in a playbook is escaped, not passed through: a page may travel to a colleague, and
nothing in it should run that the page itself did not put there.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _parser():
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")


def to_html(text: str) -> str:
    return _parser().render(text)


@lru_cache(maxsize=256)  # a report of 50,000 crashes rendered one playbook 50,000 times
def playbook_html(finding_id: str) -> tuple[str, str, str]:
    """(title, Fix section HTML, whole body HTML) of the playbook for ``finding_id``; a
    missing or unreadable one says so instead."""
    from markupsafe import escape

    from ddpdoctor.core.playbook import PlaybookError, load

    try:
        pb = load(finding_id)
    except KeyError:
        msg = f"<p>No playbook named {escape(finding_id)} ships with this version.</p>"
        return finding_id, msg, msg
    except PlaybookError as e:
        msg = f"<p>The playbook could not be read: {escape(str(e))}</p>"
        return finding_id, msg, msg
    return pb.title, to_html(pb.sections.get("Fix", "")), to_html(pb.body)
