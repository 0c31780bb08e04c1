"""diagnose's log reader vs `grep -E` with the same error patterns, on one generated log.

Writes an ordinary training log (tqdm progress bars redrawn with \\r, timestamped loss lines,
eval lines, a warning now and then) of --size MB with a crash at the end, then times, in the
same run and on the same warm file: `grep -E -c -f PATTERNS` (the reader's keywords as one
alternation) and `diagnose_logs` in a fresh process (its peak RSS from VmHWM). Prints the
speed ratio (grep's time / ours: 1.0 = as fast as grep) and the peak memory.

    .venv/bin/python benchmarks/bench_logscan.py [--size 1024] [--rounds 3] [--json OUT]

--dense: the log is a real keyword-dense one instead (a healthy 8-GPU fairseq run whose
4,000-character stats lines each hold ``loss_scale``, and whose c10d socket warnings hold a
keyword: the X68 fairseq fixture named in DENSE), repeated to --size. Most of its
lines reach the rules, and one quadratic pattern there (2026-11-29: the loss-scale floor
pattern's leading ``.*``) took 119 s on 5 MB; tests/unit/test_regex_linear.py keeps that shape out.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from ddpdoctor.diagnose import KEYWORDS  # noqa: E402

CRASH = (ROOT / "tests" / "fixtures" / "logs" / "exception.log").read_bytes()
DENSE = ROOT / "tests" / "fixtures" / "reallogs" / \
    "X68_healthy_fairseq_8gpu_c10d_socket_warn_fp16_overflow.log"


def block(epoch: int) -> bytes:
    """About 1 MB of one epoch's output."""
    out = []
    for step in range(0, 4000):
        if step % 25 == 0:
            bar = "█" * (step * 40 // 4000) + " " * (40 - step * 40 // 4000)
            out.append(f"Epoch {epoch}: {step * 100 // 4000:3d}%|{bar}| {step}/4000 "
                       f"[{step // 60:02d}:{step % 60:02d}<12:00, {5 + step % 7}.{step % 97:02d}"
                       f"it/s, loss={2 + 1 / (step + 1):.4f}, v_num=3]\r")
        out.append(f"2024-06-0{1 + epoch % 9} 12:{step % 60:02d}:{step % 60:02d},{step % 1000:03d}"
                   f" INFO trainer: step {epoch * 4000 + step} | loss {2 + 1 / (step + 1):.6f} |"
                   f" lr {3e-4 * (1 - step / 4000):.6e} | grad_norm {0.5 + step % 13 / 10:.3f} |"
                   f" tokens/s {120000 + step * 7 % 5000}\n")
        if step % 1000 == 999:
            out.append(f"2024-06-01 12:00:00,000 INFO trainer: eval epoch {epoch} step {step}: "
                       f"val_loss {1.9 + step / 1e5:.4f} acc {0.7 + step / 1e5:.4f}\n")
            out.append("/usr/lib/python3/site-packages/torch/optim/lr_scheduler.py:143: "
                       "UserWarning: Detected call of `lr_scheduler.step()` before "
                       "`optimizer.step()`.\n")
    return "".join(out).encode()


def write_log(path: Path, size_mb: int, dense: bool = False) -> int:
    target = size_mb << 20
    written = 0
    real = DENSE.read_bytes()
    with open(path, "wb") as f:
        epoch = 0
        while written < target:
            b = real if dense else block(epoch)
            f.write(b)
            written += len(b)
            epoch += 1
        f.write(CRASH)
        written += len(CRASH)
    return written


def grep_pattern() -> str:
    return "|".join(re.sub(r"([][().*+?{}|^$\\])", r"\\\1", k.decode()) for k in KEYWORDS)


def time_grep(path: Path, patterns: Path) -> float:
    # LC_ALL=C: grep's fastest mode (no multibyte decoding), the stricter reference.
    t = time.perf_counter()
    subprocess.run(["grep", "-a", "-c", "-E", "-f", str(patterns), str(path)],
                   stdout=subprocess.DEVNULL, check=False,
                   env={"LC_ALL": "C", "PATH": "/usr/bin:/bin"})
    return time.perf_counter() - t


READER = """
import json, sys, time
from ddpdoctor.diagnose import LogInput, diagnose_logs
t = time.perf_counter()
findings, scan = diagnose_logs([LogInput(sys.argv[1])])
dt = time.perf_counter() - t
hwm = [ln for ln in open('/proc/self/status') if ln.startswith('VmHWM')][0]
print(json.dumps({"seconds": dt, "peak_kb": int(hwm.split()[1]),
                  "first": [findings[0].id, findings[0].ranks] if findings else None,
                  "lines": scan.stats[0].lines, "picked": scan.stats[0].picked}))
"""


def time_reader(path: Path) -> dict:
    p = subprocess.run([sys.executable, "-c", READER, str(path)], capture_output=True,
                       check=True, cwd=ROOT)
    return json.loads(p.stdout)


def main(argv: list[str] | None = None) -> dict:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=1024, help="log size in MB (default 1024)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--json", help="write the result here")
    ap.add_argument("--dense", action="store_true",
                    help="a real keyword-dense log (fairseq stats lines) repeated, not the "
                         "generated ordinary one")
    args = ap.parse_args(argv)
    if shutil.which("grep") is None:
        sys.exit("grep not found")
    with tempfile.TemporaryDirectory() as tmp:
        log = Path(tmp) / "train.log"
        size = write_log(log, args.size, args.dense)
        patterns = Path(tmp) / "patterns"
        patterns.write_text(grep_pattern() + "\n")
        time_grep(log, patterns)  # warm the page cache for both
        greps, ours, runs = [], [], []
        for _ in range(args.rounds):  # interleaved: load on the machine hits both alike
            greps.append(time_grep(log, patterns))
            run = time_reader(log)
            runs.append(run)
            ours.append(run["seconds"])
    g, o = statistics.median(greps), statistics.median(ours)
    result = {"log": "dense" if args.dense else "ordinary",
              "size_mb": round(size / 2**20), "grep_s": round(g, 3), "reader_s": round(o, 3),
              "ratio": round(g / o, 3), "reader_mb_s": round(size / 2**20 / o),
              "grep_mb_s": round(size / 2**20 / g),
              "peak_rss_mb": round(max(r["peak_kb"] for r in runs) / 1024, 1),
              "first_finding": runs[0]["first"], "lines": runs[0]["lines"],
              "lines_examined": runs[0]["picked"]}
    print(f"{result['size_mb']} MB log, {result['lines']} lines: grep -E {g:.2f} s "
          f"({result['grep_mb_s']} MB/s), diagnose reader {o:.2f} s ({result['reader_mb_s']} "
          f"MB/s): ratio {result['ratio']:.2f} (>= 0.2 wanted); peak RSS "
          f"{result['peak_rss_mb']} MB (< 64 wanted); first finding {result['first_finding']}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
