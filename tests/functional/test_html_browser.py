"""Every page kind opened in headless Chromium: no console errors, every chart drew pixels,
no network reached for (host names do not resolve in the browser)."""

from __future__ import annotations

import pytest
from click.testing import CliRunner
from html_browser import chromium, open_page  # noqa: F401  (chromium: a session fixture)
from html_pages import LOGS, check_page, hang_page, synthetic_pages, train_page

from ddpdoctor.cli import main

pytestmark = pytest.mark.slow  # a browser start per page: seconds each


def _open(chromium_path, tmp_path, name, html):
    path = tmp_path / f"{name}.html"
    path.write_text(html, encoding="utf-8")
    opened = open_page(chromium_path, str(path))
    assert opened.errors == [] and opened.console == [], (opened.errors, opened.console)
    return opened


@pytest.mark.timeout(300)
def test_check_page_in_chromium(chromium, tmp_path):  # noqa: F811
    opened = _open(chromium, tmp_path, "check", check_page()[1])
    assert (opened.charts, opened.drawn) == (2, 2)
    assert 'id="verdict"' in opened.dom


def test_train_page_in_chromium(chromium, tmp_path):  # noqa: F811
    opened = _open(chromium, tmp_path, "train", train_page()[2])
    assert (opened.charts, opened.drawn) == (5, 5)


def test_run_hang_page_in_chromium(chromium, tmp_path):  # noqa: F811
    opened = _open(chromium, tmp_path, "hang", hang_page()[2])
    # 3 Flight Recorder groups, heartbeats, and the trainer's 5 charts
    assert opened.charts == opened.drawn == 9
    assert "your line" in opened.dom


def test_diagnose_page_in_chromium(chromium, tmp_path):  # noqa: F811
    out = tmp_path / "diag.html"
    res = CliRunner().invoke(main, ["diagnose", str(LOGS / "dataloader_bus.log"),
                                    "--html", str(out)])
    assert res.exit_code == 1, res.output
    opened = _open(chromium, tmp_path, "diag", out.read_text())
    assert opened.charts == 0  # text only: the quoted lines and the cascade
    assert "ENV_SHM_TOO_SMALL" in opened.dom and "Root cause in the logs" in opened.dom


@pytest.mark.timeout(400)
def test_64_rank_pages_in_chromium(chromium, tmp_path):  # noqa: F811
    for kind, html in synthetic_pages(tmp_path).items():
        opened = _open(chromium, tmp_path, kind, html)
        assert opened.charts > 0 and opened.drawn == opened.charts, kind


def test_the_probe_sees_a_broken_page(chromium, tmp_path):  # noqa: F811
    """The checks above can fail: a chart whose data is broken draws nothing and errors."""
    html = train_page()[2]
    broken = html.replace('"type":"object","name":"Figure"', '"type":"object","name":"Nope"', 1)
    assert broken != html
    path = tmp_path / "broken.html"
    path.write_text(broken, encoding="utf-8")
    opened = open_page(chromium, str(path))
    assert opened.errors or opened.console
    assert opened.drawn < opened.charts
