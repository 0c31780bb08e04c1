"""The text readers' nested repeats on worst-case lines (tests/unit/test_regex_linear.py
checks every pattern's shape without running any)."""

from __future__ import annotations

import subprocess
import sys

import pytest

# A repeat inside a repeat can backtrack exponentially when the inner one may swallow the
# outer one's delimiter. The patterns here with that nesting, each pumped on a line built
# to fail at its end (the worst case): all must answer at once. Run in a child process: a
# regex holds the GIL, so a pytest timeout could not stop it here.
PUMPS = '''
import re
from ddpdoctor.diagnose import envelope, scanner
from ddpdoctor.diagnose.kb import horovod, nccl
ifaces = next(s.regex for s in nccl.SIGNATURES if s.name == "nccl.socket_interfaces")
ready = next(s.regex for s in horovod.SIGNATURES if "ready ranks" in s.pattern)
for regex, line in (
        (ifaces, "NET/Socket : Using " + "[0]eth0:10.0.0.1<0>" * 40 + " x"),
        (ifaces, "NET/Socket : Using " + "[0]eth0:10.0.0.1<0> " * 400 + "x"),
        (ready, "allreduce.x [ready ranks: " + "1, " * 3000 + "x"),
        (scanner._EXCEPTION, "a." * 3000 + "aError x\\n"),
        (scanner._PREFIXED_EXCEPTION, "] " + "a." * 3000 + "Error x\\n"),
        (scanner._C10D_ERROR, "[E1" + " 1" * 3000 + "x"),
        (envelope._WRAPPED, "[I1" + " 1" * 3000 + "x")):
    regex.search(line)
print("done")
'''


@pytest.mark.slow  # starts a process
def test_nested_repeats_do_not_backtrack_exponentially():
    try:
        p = subprocess.run([sys.executable, "-c", PUMPS], capture_output=True, text=True,
                           timeout=60)
    except subprocess.TimeoutExpired:
        pytest.fail("a pattern backtracked for a minute on a pumped line")
    assert p.returncode == 0 and p.stdout.strip() == "done", p.stderr
