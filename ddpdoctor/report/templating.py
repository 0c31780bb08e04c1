"""The Jinja2 environment: templates are package data, autoescaped, loaded once."""

from __future__ import annotations

from functools import lru_cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import jinja2


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    import jinja2

    env = jinja2.Environment(
        loader=jinja2.PackageLoader("ddpdoctor.report", "templates"),
        autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True)
    from ddpdoctor.core.findings import format_ranks

    env.filters["ranks"] = format_ranks
    env.filters["pretty"] = _pretty
    return env


def _pretty(value: object) -> str:
    import json

    if isinstance(value, str):
        return value
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return "\n".join(value)  # quoted log lines, stack lines: one per line, as printed
    return json.dumps(value, indent=2, default=str, ensure_ascii=False)
