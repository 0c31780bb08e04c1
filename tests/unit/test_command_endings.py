"""One way a command ends (issue #28): no command module exits on its own. Every command
returns an outcome or raises DoctorError, and the CLI renders, writes --json/--html and
exits in one place; a `sys.exit`, a bare `exit()` or a `raise SystemExit` in
``ddpdoctor/commands/`` would be a second way. An ast walk, no imports, no processes."""

from __future__ import annotations

import ast
from pathlib import Path

COMMANDS = Path(__file__).resolve().parents[2] / "ddpdoctor" / "commands"


def _exits(tree: ast.AST) -> list[int]:
    """Lines that end the process from a command: sys.exit(...), exit()/quit(), os._exit
    and raise SystemExit."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            if isinstance(f, ast.Attribute) and isinstance(f.value, ast.Name) \
                    and (f.value.id, f.attr) in (("sys", "exit"), ("os", "_exit")):
                out.append(node.lineno)
            elif isinstance(f, ast.Name) and f.id in ("exit", "quit"):
                out.append(node.lineno)
        elif isinstance(node, ast.Raise) and node.exc is not None:
            exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
            if isinstance(exc, ast.Name) and exc.id == "SystemExit":
                out.append(node.lineno)
    return sorted(out)


def test_no_command_exits_on_its_own():
    found = {p.name: lines for p in sorted(COMMANDS.glob("*.py"))
             if (lines := _exits(ast.parse(p.read_text())))}
    assert found == {}


def test_the_walk_sees_each_way_out():
    planted = ("import sys, os\n"
               "def a():\n    sys.exit(2)\n"
               "def b():\n    raise SystemExit(1)\n"
               "def c():\n    os._exit(3)\n"
               "def d():\n    exit()\n"
               "def e():\n    return 0\n")
    assert _exits(ast.parse(planted)) == [3, 5, 7, 9]
