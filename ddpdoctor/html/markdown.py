"""Playbooks (Markdown under playbooks/) as HTML, with markdown-it-py.

Raw HTML in a playbook is escaped, not passed through: a page may travel to a colleague, and
nothing in it should run that the page itself did not put there.
"""

from __future__ import annotations

from functools import lru_cache


@lru_cache(maxsize=1)
def _parser():  # noqa: ANN202
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark", {"html": False, "linkify": False}).enable("table")


def to_html(text: str) -> str:
    return _parser().render(text)


def playbook_html(finding_id: str) -> tuple[str, str]:
    """(title, body HTML) of the playbook for ``finding_id``; a missing one says so."""
    from ddpdoctor.playbook import PlaybookError, load

    try:
        pb = load(finding_id)
    except KeyError:
        return finding_id, f"<p>No playbook named {finding_id} ships with this version.</p>"
    except PlaybookError as e:
        return finding_id, to_html(f"The playbook could not be read: {e}")
    return pb.title, to_html(pb.body)
