"""``ddpdoctor playbook --html``: the playbooks themselves as one self-contained page."""

from __future__ import annotations

from typing import TYPE_CHECKING

from markupsafe import Markup, escape

from ddpdoctor.report.markdown import to_html

if TYPE_CHECKING:
    from ddpdoctor.core.playbook import Playbook


def render_playbooks(pbs: list[Playbook]) -> str:
    from importlib import resources

    css = (resources.files("ddpdoctor.report") / "templates" / "page.css").read_text()
    parts = [f"<section class='finding'><h2 id='{escape(p.id)}'>{escape(p.id)} · "
             f"{escape(p.title)}</h2><p class='muted'>{escape(p.severity)} · found by "
             f"{escape(', '.join(p.applies_to))}</p>{Markup(to_html(p.body))}</section>"
             for p in pbs]
    title = pbs[0].id if len(pbs) == 1 else "ddpdoctor playbooks"
    return ("<!doctype html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{escape(title)}</title><style>{css}</style></head><body><main>"
            + "".join(parts) + "</main></body></html>\n")
