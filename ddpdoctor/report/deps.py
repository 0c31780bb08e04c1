"""Whether the HTML page can be written: its libraries are the ``html`` extra.

Checked when ``--html`` is parsed, before any work starts (a two-hour ``run --html``
must not find out at its end), without importing them: bokeh alone takes a second.
"""

from __future__ import annotations

import importlib.util

from ddpdoctor.core.errors import DoctorError, ExitCode

# (module, the distribution pip installs it from)
HTML_LIBRARIES = (("bokeh", "bokeh"), ("jinja2", "jinja2"), ("markdown_it", "markdown-it-py"))


def missing() -> list[str]:
    """The distributions of the html extra that cannot be imported here."""
    return [dist for module, dist in HTML_LIBRARIES if importlib.util.find_spec(module) is None]


def require_html() -> None:
    """DoctorError (a usage error, exit 2) when the page's libraries are not installed."""
    gone = missing()
    if gone:
        raise DoctorError(f"--html needs the html extra ({', '.join(gone)} not installed): "
                          "pip install 'ddpdoctor[html]'", ExitCode.USAGE)
