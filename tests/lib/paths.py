"""Where the suite's own files are: every test module and helper names its paths from here,
not from its own ``__file__`` (modules live in tests/unit, tests/functional and tests/lib)."""

from pathlib import Path

LIB = Path(__file__).resolve().parent
TESTS = LIB.parent
REPO = TESTS.parent
FIXTURES = TESTS / "fixtures"
