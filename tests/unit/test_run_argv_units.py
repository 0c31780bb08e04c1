"""run's start-up is linear in its command line and environment (issue #27): every text
pass over them (redaction of secret-looking assignments, masking of the job's literal
secret values, the cut command lines of killed processes) on 128 KiB inputs (issue #27
asked for a 100,000-character argument). No processes.

Linearity without timing-fragile asserts: CPU time (not wall time: a loaded machine
delays, it adds little CPU), measured in interleaved rounds (a busy spell hits both sizes
alike) and factors wide enough that only the order of growth decides. First 4 KiB against
16 KiB, median of 7 rounds (linear: 4x, measured 3.7-4.1; quadratic: 10-16x), which fails
a quadratic pass in seconds; then 128 KiB within 6x of the linear extrapolation from
4 KiB, under a CPU-time alarm (a quadratic pass needs 32x the linear time there: the alarm
fails it instead of letting it run on).
"""

from __future__ import annotations

import gc
import signal
import statistics
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import pytest

from ddpdoctor.core import redact
from ddpdoctor.run import tree
from ddpdoctor.run.secrets import _Literals, scrub, secret_values

SMALL, MID, BIG = 1 << 12, 1 << 14, 1 << 17
ROUNDS = 7


class _TooSlow(Exception):
    pass


@contextmanager
def _cpu_deadline(seconds: float) -> Iterator[None]:
    """Raise _TooSlow after ``seconds`` of this process's CPU time (re checks signals
    while it matches, so a runaway pattern is interrupted too)."""

    def expire(_sig, _frame):
        raise _TooSlow

    old = signal.signal(signal.SIGPROF, expire)
    signal.setitimer(signal.ITIMER_PROF, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_PROF, 0)
        signal.signal(signal.SIGPROF, old)


def _cpu(fn: Callable[[str], object], text: str) -> float:
    gc.disable()  # a collection landing in one measurement is not the code's growth
    try:
        t0 = time.process_time()
        fn(text)
        return time.process_time() - t0
    finally:
        gc.enable()


def assert_linear(fn: Callable[[str], object], make: Callable[[int], str]) -> None:
    small, mid = make(SMALL), make(MID)
    pairs = [(_cpu(fn, small), _cpu(fn, mid)) for _ in range(ROUNDS)]  # interleaved:
    ratio = statistics.median(b / max(a, 1e-6) for a, b in pairs)  # load hits both alike
    assert ratio < 8, f"{MID // SMALL}x the input took {ratio:.1f}x the CPU time " \
                      f"(median of {ROUNDS}): not linear"
    # extrapolated from the smaller size: a quadratic pass inflates it the least
    per_small = statistics.median(a for a, _ in pairs)
    budget = max(1.0, 6 * (BIG // SMALL) * per_small)
    try:
        with _cpu_deadline(budget):
            _cpu(fn, make(BIG))
    except _TooSlow:
        pytest.fail(f"{BIG} chars took over {budget:.1f} s CPU: 6x what {SMALL} chars "
                    f"({per_small:.4f} s) predict for a linear pass")


def _repeat(unit: str) -> Callable[[int], str]:
    return lambda n: (unit * (n // len(unit) + 1))[:n]


# Inputs that once made (or could make) a redaction pattern retry a long match from
# every position: one long word (the issue's `x` * 10,000), words, quotes opened and
# never closed, flags, URLs, authorization headers, a `-p` flag run, secret names.
_SHAPES = {
    "one long word": "x",
    "words": "ab ",
    "unclosed double quotes": 'a "',
    "unclosed single quotes": "a '",
    "short -p flags": "-p ",
    "bearer": "bearer ",
    "authorization headers": "authorization: ",
    "secret assignments": "TOKEN=",
    "secret flags": "--token ",
    "a command line": "--data /d/x.bin --lr 3e-4 HF_TOKEN=hf_abcdefgh  ",
}
# One word made of many `name=`/`name:` pairs: the assignment pattern scanned the rest
# of the word as a value again from each name inside it (fixed in redact.py: the value is
# matched apart, only after a secret name).
_QUADRATIC_BEFORE = {
    "one word of assignments": "a=",
    "one word of colons": "a:",
    "URL schemes": "a://",
    "URL with a password": "x://u:p",
}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("unit", list(_SHAPES.values()), ids=list(_SHAPES))
def test_redaction_is_linear_on_a_long_text(unit):
    assert_linear(lambda s: scrub({"command": s}, []), _repeat(unit))


@pytest.mark.timeout(180)
@pytest.mark.parametrize("unit", list(_QUADRATIC_BEFORE.values()),
                         ids=list(_QUADRATIC_BEFORE))
def test_redaction_of_long_assignment_words_is_linear(unit):
    assert_linear(redact.text, _repeat(unit))


def _token_pairs(n: int) -> list[str]:
    """A command line of n characters of `--token vNNNNNNN` pairs: as many secret values
    as it is long (one scan of the report per value was quadratic)."""
    args: list[str] = []
    size, i = 0, 0
    while size < n:
        args += ["--token", f"v{i:07d}"]
        size += len("--token") + len(f"v{i:07d}") + 2
        i += 1
    return args


@pytest.mark.timeout(120)
def test_masking_many_secret_values_is_linear():
    def run(cmdline: str) -> object:
        argv = cmdline.split(" ")
        return scrub({"command": cmdline, "argv": argv}, secret_values({}, argv))

    assert_linear(run, lambda n: " ".join(_token_pairs(n)))


def test_many_secret_values_are_all_masked():
    argv = ["python", "train.py", *_token_pairs(200_000)]
    values = secret_values({"HF_TOKEN": "hf_abcdef123"}, argv)
    assert len(values) > 16  # the one-pass automaton, not str.replace per value
    out = scrub({"command": " ".join(argv), "log": "loaded hf_abcdef123 and v0000007"},
                values)
    assert "v0000" not in out["command"] and out["command"].count("***") == len(values) - 1
    assert out["log"] == "loaded *** and ***"


@pytest.mark.parametrize("many", [False, True], ids=["few values", "many values"])
def test_overlapping_secret_values_are_masked_whole(many):
    """Two values that overlap in the text: one mask over both, no piece of either shown
    (replacing one value after the other left the tail of the second); the same with
    str.replace per value (few) and the automaton (many)."""
    filler = [f"unused{i:04d}" for i in range(30)] if many else []
    values = sorted(["abcdEF", "EFghij", *filler], key=len, reverse=True)
    out = scrub({"t": "x abcdEFghij y abcdEF z"}, values)
    assert out["t"] == "x *** y *** z"


def test_literals_find_every_occurrence():
    lits = _Literals(["abab", "bab", "babb"])
    assert lits.spans("ababbab abab") == [(0, 7), (8, 12)]
    assert lits.mask("--ababb--") == "--***--"
    assert lits.mask("no secret here") == "no secret here"


class _Proc:
    def __init__(self, cmdline: list[str]) -> None:
        self._cmdline = cmdline

    def name(self) -> str:
        return "python"

    def cmdline(self) -> list[str]:
        return self._cmdline


def test_a_killed_process_command_line_is_redacted_in_a_bounded_window(monkeypatch):
    """Only 300 characters of a process's command line are kept: redaction reads a
    bounded window, not a 1 MB argument for every process of the tree."""
    seen: list[int] = []
    real = redact.text

    def counting(s: str) -> str:
        seen.append(len(s))
        return real(s)

    monkeypatch.setattr(tree.redact, "text", counting)
    name, cmd = tree._describe(_Proc(["python", "train.py", "--token", "s3cr3t",
                                      "HF_TOKEN=hf_abc", "x" * (1 << 20)]))
    assert name == "python"
    assert cmd.startswith("python train.py --token *** HF_TOKEN=*** xxx")
    assert len(cmd) == tree._CMD_SHOWN
    assert max(seen) <= tree._CMD_WINDOW
