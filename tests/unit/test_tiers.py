"""The suite's two tiers (Makefile, docs/development.md "Two tiers") stay one suite.

`make test` is the gate and `make test-e2e` the rest of the end-to-end matrix: these checks
fail if a test could fall between the tiers or run in both, if a module's shared jobs could
be split across them, if CI stopped running either, or if a mode lost its end-to-end path
in the gate.
"""

from __future__ import annotations

import ast
import itertools
import re
from pathlib import Path

from _pytest.mark.expression import Expression

ROOT = Path(__file__).resolve().parents[2]
TESTS = ROOT / "tests"
UNIT, FUNCTIONAL, LIB = TESTS / "unit", TESTS / "functional", TESTS / "lib"
# The modes whose main path is a job the gate must still start (diagnose, plan and playbook
# start none: their tests run in the gate whole).
GATE_MODES = ("run", "attach", "check", "watch", "scale")


def _make_var(name: str) -> str:
    m = re.search(rf"^{name} := (.+)$", (ROOT / "Makefile").read_text(), re.M)
    assert m, f"the Makefile defines no {name}"
    return m.group(1).strip()


def _selected(expr: str, marks: set[str]) -> bool:
    return Expression.compile(expr).evaluate(lambda name, **_: name in marks)


def test_every_test_is_in_exactly_one_tier():
    gate, matrix = _make_var("GATE"), _make_var("MATRIX")
    for slow, in_matrix in itertools.product((False, True), repeat=2):
        marks = {m for m, on in (("slow", slow), ("matrix", in_matrix)) if on}
        assert _selected(gate, marks) != _selected(matrix, marks), marks
    assert not _selected(gate, {"slow", "matrix"}) and _selected(gate, {"slow"})
    assert _selected(gate, {"matrix"}), "a matrix module's unit tests belong to the gate"


def test_ci_runs_both_tiers():
    steps = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert "make test" in steps and "make test-e2e" in steps, steps
    recipe = re.search(r"^test-e2e:.*\n((?:\t.*\n)+)", (ROOT / "Makefile").read_text(), re.M)
    assert recipe and '-m "$(MATRIX)"' in recipe.group(1)


def _uses_mark(tree: ast.AST, mark: str) -> int:
    return sum(isinstance(n, ast.Attribute) and n.attr == mark
               and isinstance(n.value, ast.Attribute) and n.value.attr == "mark"
               for n in ast.walk(tree))


def _matrix_marks(tree: ast.Module) -> tuple[int, int]:
    """(all `pytest.mark.matrix` uses, those in a module-level `pytestmark = ...`)."""
    module_level = sum(_uses_mark(stmt, "matrix") for stmt in tree.body
                       if isinstance(stmt, ast.Assign)
                       and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                               for t in stmt.targets))
    return _uses_mark(tree, "matrix"), module_level


def test_matrix_is_only_a_module_mark_so_shared_jobs_stay_in_one_tier():
    """A module fixture's jobs serve all its tests; a per-test mark would run them twice."""
    for path in sorted(TESTS.rglob("test_*.py")):
        total, module_level = _matrix_marks(ast.parse(path.read_text()))
        assert total == module_level, f"{path.name}: `matrix` marks a test, not its module"


def test_the_mark_check_sees_a_per_test_mark():
    planted = ast.parse("import pytest\n@pytest.mark.matrix\ndef test_x():\n    pass\n")
    assert _matrix_marks(planted) == (1, 0)


def test_each_mode_keeps_an_end_to_end_job_in_the_gate():
    for mode in GATE_MODES:
        gate_jobs = [p.name for p in FUNCTIONAL.glob(f"test_{mode}*.py")
                     if "mark.slow" in (text := p.read_text()) and "mark.matrix" not in text]
        assert gate_jobs, f"`make test` starts no {mode} job"


def _slow(path: Path) -> bool:
    return _uses_mark(ast.parse(path.read_text()), "slow") > 0


def test_the_folders_say_which_tests_start_processes():
    """tests/unit: no module marks a test `slow` (none starts a process: `make test-unit`);
    tests/functional: every module starts one; tests/lib: the helpers and the scripts the
    jobs run, no tests; nothing else beside conftest.py."""
    assert sorted(p.name for p in TESTS.glob("*.py")) == ["conftest.py"]
    assert [p.name for p in sorted(UNIT.glob("*.py")) if _slow(p)] == []
    assert [p.name for p in sorted(FUNCTIONAL.glob("*.py")) if not _slow(p)] == []
    assert list(LIB.glob("test_*.py")) == []
    names = [p.name for p in TESTS.rglob("test_*.py") if "fixtures" not in p.parts]
    assert len(names) == len(set(names)), "a test module's name is the suite's module name"


def test_the_slow_check_sees_a_parametrized_mark():
    planted = ast.parse("import pytest\n@pytest.mark.parametrize('x', "
                        "[pytest.param(1, marks=pytest.mark.slow)])\ndef test_x(x):\n    pass\n")
    assert _uses_mark(planted, "slow") == 1 and _uses_mark(planted, "matrix") == 0
