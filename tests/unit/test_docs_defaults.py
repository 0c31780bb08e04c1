"""A default a command's page states is the one ``--help`` states (issue #28: run.md said
the hang timeout defaults to 300 s; it adapts to the job's step times).

Every "`--option ...` ... (default X)" on docs/<command>.md is read against the click option
of that command: a fixed default must be the option's number; a default computed at run
time (``default=None``) must be stated the way its ``--help`` states it, with the same
numbers. No process is started: the commands' modules import without torch.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import click
import pytest

from ddpdoctor.cli import COMMANDS

DOCS = Path(__file__).resolve().parents[2] / "docs"
# "`--kill-grace` (default 10 s)", "`--hang-timeout` seconds (default: adaptive, ...)"
_STATED = re.compile(r"`(--[a-z][a-z-]*)[^`]*`[^.;()`]{0,80}?\(default:?\s*([^)]*)\)")
_NUMBER = re.compile(r"\d+(?:\.\d+)?")


def stated_defaults(text: str) -> list[tuple[str, str]]:
    """(option, what the page says its default is) for every stated default."""
    return [(m[1], " ".join(m[2].replace("`", "").split())) for m in _STATED.finditer(text)]


def _option(command: str, flag: str) -> click.Option | None:
    cmd = importlib.import_module(COMMANDS[command][0]).command
    return next((p for p in cmd.params
                 if isinstance(p, click.Option) and flag in p.opts), None)


def _help_default(opt: click.Option) -> str:
    """What --help says a computed default is: the text after "default:"."""
    m = re.search(r"default:\s*(.*)", opt.help or "", re.I | re.S)
    return " ".join(m[1].split()) if m else ""


def mismatch(flag: str, said: str, opt: click.Option) -> str | None:
    """Why ``said`` is not the default of ``opt``; None when they agree."""
    number = _NUMBER.match(said)
    if opt.default is None:
        helped = _help_default(opt)
        if not helped:
            return f"{flag}: the page says (default {said}), --help states no default"
        first = helped.split()[0].strip(",;.()")
        missing = set(_NUMBER.findall(helped)) - set(_NUMBER.findall(said))
        if first not in said or missing:
            return f"{flag}: the page says (default {said}), --help: default: {helped}"
        return None
    if number and isinstance(opt.default, (int, float)) and not isinstance(opt.default, bool):
        if float(number[0]) != float(opt.default):
            return f"{flag}: the page says (default {said}), --help: {opt.default}"
    return None


@pytest.mark.parametrize("command", sorted(c for c in COMMANDS if (DOCS / f"{c}.md").exists()))
def test_every_stated_default_is_the_help_default(command: str):
    wrong = []
    for flag, said in stated_defaults((DOCS / f"{command}.md").read_text()):
        opt = _option(command, flag)
        if opt is None:
            wrong.append(f"{flag}: no such option of `ddpdoctor {command}`")
        elif (why := mismatch(flag, said, opt)) is not None:
            wrong.append(why)
    assert not wrong, f"docs/{command}.md:\n  " + "\n  ".join(wrong)


def test_run_states_the_adaptive_hang_timeout():
    said = dict(stated_defaults((DOCS / "run.md").read_text()))
    assert "--hang-timeout" in said  # the page states it (and the test above checks it)
    assert said["--hang-timeout"].startswith("adaptive")


def test_the_run_help_states_the_adaptive_rule_the_code_uses():
    from ddpdoctor.jobview import leader

    opt = _option("run", "--hang-timeout")
    assert opt is not None and opt.default is None
    helped = _help_default(opt)
    assert f"{leader.HANG_K:g} x the job's p99 step time" in helped
    assert f"once {leader.WARMUP_STEPS} steps" in helped
    assert f"({leader.BEFORE_STEPS_S:g} s before)" in helped
    hang_min = _option("run", "--hang-min")
    assert hang_min is not None and hang_min.default == leader.HANG_MIN_S


def test_the_checker_catches_a_fixed_number_for_a_computed_default():
    opt = _option("run", "--hang-timeout")
    assert opt is not None
    assert stated_defaults("when nothing moved for `--hang-timeout` seconds (default 300), "
                           "run reads") == [("--hang-timeout", "300")]
    assert mismatch("--hang-timeout", "300", opt) == (
        "--hang-timeout: the page says (default 300), --help: default: " + _help_default(opt))
    grace = _option("run", "--kill-grace")
    assert grace is not None
    assert mismatch("--kill-grace", "30 s", grace) == (
        "--kill-grace: the page says (default 30 s), --help: 10.0")
    assert mismatch("--kill-grace", "10 s", grace) is None
