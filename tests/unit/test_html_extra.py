"""The HTML page's libraries are the ``html`` extra: without them ``--html`` is refused
when it is parsed (exit 2, what to install), before any work, and nothing is written."""

from __future__ import annotations

import importlib.util

import pytest
from click.testing import CliRunner

from ddpdoctor.cli import main
from ddpdoctor.report import deps

LOG = "tests/fixtures/reallogs/G2_broadcast_rank0_only_hang_no_timeout.log"


@pytest.fixture
def no_bokeh(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(deps.importlib.util, "find_spec",
                        lambda name, *a: None if name == "bokeh" else real(name, *a))


def test_the_extra_is_named_when_a_library_is_missing(no_bokeh):
    assert deps.missing() == ["bokeh"]
    with pytest.raises(deps.DoctorError, match=r"pip install 'ddpdoctor\[html\]'") as e:
        deps.require_html()
    assert e.value.exit_code == 2


@pytest.mark.parametrize("argv", [["diagnose", LOG, "--html", "{out}"],
                                  ["playbook", "OOM", "--html", "{out}"],
                                  ["report", "{report}", "--html", "{out}"]])
def test_html_is_refused_before_any_work(no_bokeh, tmp_path, argv):
    out, report = tmp_path / "page.html", tmp_path / "r.json"
    report.write_text("{}")
    args = [a.format(out=out, report=report) for a in argv]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2, result.output
    assert "'--html': needs the html extra (bokeh not installed)" in result.output
    assert "pip install 'ddpdoctor[html]'" in result.output
    assert not out.exists()


def test_with_the_extra_installed_nothing_is_missing():
    assert deps.missing() == []


def test_a_plain_install_pulls_no_page_library():
    from pathlib import Path

    import tomllib

    project = tomllib.loads(Path("pyproject.toml").read_text())["project"]
    plain = " ".join(project["dependencies"])
    extra = project["optional-dependencies"]["html"]
    for _, dist in deps.HTML_LIBRARIES:
        assert dist not in plain and any(d.startswith(dist) for d in extra), dist
