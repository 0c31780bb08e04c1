"""Where the suite's CPU goes: sums the file ``tests/lib/cpu_report.py`` writes, per module and
per test, costliest first.

    DDPD_CPU_REPORT=/tmp/cpu.jsonl pytest -p tests.lib.cpu_report -n 3 --dist loadfile tests
    python -m tools.test_cpu /tmp/cpu.jsonl [--top N]
"""

from __future__ import annotations

import argparse
import collections
import json
import sys


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.test_cpu", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("report", help="the JSON-lines file DDPD_CPU_REPORT named")
    ap.add_argument("--top", type=int, default=40, help="rows of each table (default 40)")
    args = ap.parse_args(argv)
    per_module: collections.Counter[str] = collections.Counter()
    tests: list[tuple[float, str]] = []
    with open(args.report, encoding="utf-8") as f:
        for line in f:
            row = json.loads(line)
            cpu = float(row["own"]) + float(row["children"])
            per_module[row["test"].split("::", 1)[0]] += cpu
            tests.append((cpu, row["test"]))
    total = sum(per_module.values())
    print(f"{len(tests)} tests, {total:.0f} CPU s")
    print("| CPU s | share | module |\n|---:|---:|---|")
    for mod, cpu in per_module.most_common(args.top):
        print(f"| {cpu:.1f} | {100 * cpu / total:.1f}% | {mod} |")
    print("\n| CPU s | test |\n|---:|---|")
    for cpu, name in sorted(tests, reverse=True)[:args.top]:
        print(f"| {cpu:.1f} | {name} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
