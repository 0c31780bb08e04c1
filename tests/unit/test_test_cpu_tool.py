"""tools/test_cpu.py sums tests/lib/cpu_report.py's lines per module and per test."""

from __future__ import annotations

import json

from tools import test_cpu


def test_sums_per_module_costliest_first(tmp_path, capsys):
    rows = [{"test": "tests/test_a.py::t1", "own": 1.0, "children": 9.0, "wall": 3.0},
            {"test": "tests/test_a.py::t2", "own": 0.5, "children": 0.0, "wall": 0.5},
            {"test": "tests/test_b.py::t1", "own": 0.2, "children": 20.0, "wall": 9.0}]
    report = tmp_path / "cpu.jsonl"
    report.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert test_cpu.main([str(report), "--top", "2"]) == 0
    out = capsys.readouterr().out
    assert out.splitlines()[0] == "3 tests, 31 CPU s"
    modules = [line for line in out.splitlines() if line.startswith("| ") and ".py |" in line]
    assert modules[:2] == ["| 20.2 | 65.8% | tests/test_b.py |",
                           "| 10.5 | 34.2% | tests/test_a.py |"]
    assert "| 10.0 | tests/test_a.py::t1 |" in out
    assert "tests/test_a.py::t2" not in out  # --top 2
