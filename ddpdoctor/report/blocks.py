"""What a page is made of: sections of charts (bokeh models) and HTML fragments."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from markupsafe import Markup

if TYPE_CHECKING:
    from bokeh.model import Model


@dataclass
class Chart:
    """A bokeh model, embedded by the page assembly with one shared script."""

    title: str
    model: Model
    note: str = ""  # how to read it, under the chart


@dataclass
class Fragment:
    """HTML rendered from one of the package's own templates (everything in it escaped)."""

    html: Markup


@dataclass
class Section:
    title: str
    items: list[Chart | Fragment] = field(default_factory=list)
    note: str = ""  # e.g. what is missing and why

    def __bool__(self) -> bool:
        return bool(self.items or self.note)


def fragment(template: str, **context: object) -> Fragment:
    """Render ``templates/<template>`` (autoescaped) into a Fragment."""
    from ddpdoctor.report.templating import environment

    return Fragment(Markup(environment().get_template(template).render(**context)))
