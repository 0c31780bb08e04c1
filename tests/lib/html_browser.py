"""Headless Chromium for the HTML tests: install it when missing (root only), open a page,
and read back what a probe script saw: console errors and which charts drew pixels."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass

import pytest

# Catches errors from the first script on: inserted at the top of <head>.
_HOOK = """<script>window.__errors = [];
window.addEventListener('error', e => window.__errors.push(String(e.message)));
window.addEventListener('unhandledrejection', e => window.__errors.push(String(e.reason)));
const __ce = console.error;
console.error = function () {
  window.__errors.push(Array.from(arguments).map(String).join(' '));
  __ce.apply(console, arguments);
};
</script>"""

# A chart has drawn when a canvas inside it (bokeh renders into shadow roots) holds more
# than a handful of distinct colours.
_PROBE = """<script>
function __canvases(root, out) {
  for (const el of root.querySelectorAll('*')) {
    if (el.tagName === 'CANVAS') out.push(el);
    if (el.shadowRoot) __canvases(el.shadowRoot, out);
  }
  return out;
}
function __drawn(chart) {
  for (const c of __canvases(chart, [])) {
    if (!c.width || !c.height) continue;
    const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
    const seen = new Set();
    for (let i = 0; i < d.length; i += 4 * 97) seen.add(d[i] << 16 | d[i + 1] << 8 | d[i + 2]);
    if (seen.size > 4) return true;
  }
  return false;
}
function __report(tries) {
  const charts = Array.from(document.querySelectorAll('.chart'));
  const drawn = charts.filter(__drawn).length;
  if (drawn < charts.length && tries < 100) { setTimeout(() => __report(tries + 1), 100); return; }
  const pre = document.createElement('pre');
  pre.id = 'html-probe';
  pre.textContent = JSON.stringify({charts: charts.length, drawn: drawn,
                                    errors: window.__errors, tries: tries});
  document.body.appendChild(pre);
}
window.addEventListener('load', () => setTimeout(() => __report(0), 50));
</script>"""


@dataclass
class Opened:
    charts: int
    drawn: int
    errors: list[str]
    console: list[str]  # console lines Chromium logged at error level
    dom: str


def find_chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


def ensure_chromium() -> str:
    """Chromium's path, else skip: `make test`'s set-up installs Debian's package (the
    Makefile's `browser` target), a test never does."""
    path = find_chromium()
    if not path:
        pytest.skip("headless Chromium is not installed: `make browser` (as root) or "
                    "apt-get install chromium")
    return path


def _flags(profile: str) -> list[str]:
    # every host name fails to resolve: a page that reaches for the network shows an error
    return ["--headless", "--no-sandbox", "--disable-gpu", "--hide-scrollbars",
            "--no-first-run", "--disable-extensions", "--disable-dev-shm-usage",
            "--host-resolver-rules=MAP * ~NOTFOUND", f"--user-data-dir={profile}"]


def _short_tmp() -> tempfile.TemporaryDirectory:
    # Chromium puts its singleton socket in TMPDIR and refuses a path over ~107 bytes:
    # the tests' per-test TMPDIR (under pytest-xdist: .../popen-gw0/test_.../) is too long
    return tempfile.TemporaryDirectory(prefix="chr", dir="/tmp")


def _env(tmp: str) -> dict[str, str]:
    return {**os.environ, "TMPDIR": tmp}


def open_page(chromium: str, html_path: str, budget_ms: int = 15000) -> Opened:
    """Load a copy of the page with the hook and the probe; the page itself is not changed."""
    with open(html_path, encoding="utf-8") as f:
        html = f.read()
    probed = html.replace("<head>", "<head>" + _HOOK, 1).replace("</body>", _PROBE + "</body>")
    with _short_tmp() as tmp:
        page = os.path.join(tmp, "page.html")
        with open(page, "w", encoding="utf-8") as f:
            f.write(probed)
        proc = subprocess.run(
            [chromium, *_flags(os.path.join(tmp, "profile")), "--enable-logging=stderr",
             "--v=0", f"--virtual-time-budget={budget_ms}", "--dump-dom", f"file://{page}"],
            capture_output=True, text=True, timeout=120, env=_env(tmp))
    m = re.search(r'<pre id="html-probe">(.*?)</pre>', proc.stdout, re.S)
    assert m, f"the probe never reported; chromium stderr: {proc.stderr[-2000:]}"
    data = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&")
                      .replace("&lt;", "<").replace("&gt;", ">"))
    console = [line for line in proc.stderr.splitlines()
               if "CONSOLE" in line and ("ERROR" in line or "Uncaught" in line)]
    return Opened(data["charts"], data["drawn"], data["errors"], console, proc.stdout)


def screenshot(chromium: str, html_path: str, png_path: str, height: int = 2400,
               budget_ms: int = 8000) -> None:
    with _short_tmp() as tmp:
        subprocess.run([chromium, *_flags(os.path.join(tmp, "profile")),
                        f"--window-size=1280,{height}", f"--virtual-time-budget={budget_ms}",
                        f"--screenshot={png_path}", f"file://{os.path.abspath(html_path)}"],
                       capture_output=True, timeout=120, check=True, env=_env(tmp))


@pytest.fixture(scope="session")
def chromium() -> str:
    return ensure_chromium()
