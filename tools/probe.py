"""Probe a mechanism, not a thread: re-write every corpus log the way another launcher, log
collector, shell or platform would have written the same job's output, and report each log
whose diagnosis changed.

    python -m tools.probe [DIR] [--styles kubectl,pdsh,quote,...] [--sample N] [--seed S]

A job's diagnosis must not depend on how its lines reached the reader: a collector's time
in front of every line, pdsh's host label, a terminal's colour codes, UTF-16, CRLF, Docker's
json-file records. Only logs the corpus reads right as they are are probed (a miss is the
corpus score's business);
a changed result is listed with the style, what it was and what it became. Exit 1 when any
changed (docs/diagnose.md, "A line's envelope" and "How its bytes are written").
"""

from __future__ import annotations

import argparse
import codecs
import json
import random
import sys
import tempfile
from collections import Counter
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from tools import corpus


def _lines(text: str, wrap: Callable[[int, str], str]) -> bytes:
    return "".join(wrap(i, line) + "\n" for i, line in enumerate(text.splitlines())).encode()


def hard_wrap(text: str, width: int) -> bytes:
    out = []
    for line in text.splitlines():
        while len(line) > width:
            out.append(line[:width])
            line = line[width:]
        out.append(line)
    return "".join(piece + "\n" for piece in out).encode()


# Each style: the same text as another path to the reader would have written it. Every
# format is a real one (the sources are in docs/diagnose.md and the tests that hold them).
STYLES: dict[str, Callable[[str], bytes]] = {
    # `kubectl logs --timestamps`, Docker, CloudWatch, Loki, Ray/Beaker exports
    "kubectl": lambda t: _lines(t, lambda i, s: f"2024-05-01T12:00:{i % 60:02d}.123456789Z {s}"),
    # pdsh's host label (DeepSpeed's multi-node launcher)
    "pdsh": lambda t: _lines(t, lambda i, s: f"node-01: {s}"),
    # a terminal's colour codes around every line
    "ansi": lambda t: _lines(t, lambda i, s: f"\x1b[0m{s}\x1b[0m"),
    # a Markdown or e-mail quote of the whole log (a reply that quotes it)
    "quote": lambda t: _lines(t, lambda i, s: f"> {s}"),
    # a terminal's copy (tmux copy-mode, screen, PuTTY) that cuts each line at its width
    "wrap80": lambda t: hard_wrap(t, 80),
    "wrap120": lambda t: hard_wrap(t, 120),
    # Windows PowerShell 5.1's `>`
    "utf16": lambda t: codecs.BOM_UTF16_LE + t.encode("utf-16-le"),
    # Windows line ends
    "crlf": lambda t: t.replace("\n", "\r\n").encode(),
    # envelopes no reader names, learned from the log (diagnose/envelope.py): journald
    # ("Dez 28 06:43:00 XXX mail_on_failure[9777]:   File ...", systemd-cron/systemd-cron
    # #58), docker compose and SageMaker's local mode ("kachor9sfh-algo-1-uuf2f | ...",
    # aws-samples/amazon-sagemaker-local-mode#6; "webui-docker-auto-1  | Traceback ...",
    # AbdBarho/stable-diffusion-webui-docker#420), `kubectl logs --prefix`
    # ("[pod/echo-req-7cfd7bf68f-nk5kr/hello] ...", geerlingguy/ansible-for-kubernetes#75)
    "journald": lambda t: _lines(
        t, lambda i, s: f"Nov 29 00:{i % 60:02d}:54 gpu-node-01 python3[12345]: {s}"),
    "compose": lambda t: _lines(t, lambda i, s: f"trainer-1  | {s}"),
    "kubeprefix": lambda t: _lines(t, lambda i, s: f"[pod/job-worker-0/pytorch] {s}"),
    # a time and a blank, no separator: moreutils' `ts` ("Dec 06 17:37:24 yarn run v1.17.3",
    # elastic/kibana#52408), a log viewer's time column ("2025-02-18 12:54 [rank13]:[E218 ...",
    # NVIDIA/nccl#1610), a clock alone ("07:05:16 logged at ...", bdd/runitor#231)
    "ts": lambda t: _lines(t, lambda i, s: f"Dec 06 17:37:{i % 60:02d} {s}"),
    "viewer": lambda t: _lines(t, lambda i, s: f" 2025-02-18 12:{i % 60:02d} {s}"),
    "clock": lambda t: _lines(t, lambda i, s: f"07:05:{i % 60:02d} {s}"),
    # Docker's json-file log driver (a container's /var/lib/docker/containers/*-json.log)
    "dockerjson": lambda t: "".join(
        json.dumps({"log": s + "\n", "stream": "stderr", "time": "2019-01-01T11:11:11.111Z"})
        + "\n" for s in t.splitlines()).encode(),
}


# The styles every log must read the same in (the default, and a test). A hard wrap and an
# envelope learned from the log are measured, not held: an excerpt of a few lines cannot
# show the width it was cut at, nor the shape of what every line starts with.
MEASURED = ("wrap80", "wrap120", "journald", "compose", "kubeprefix", "ts", "viewer", "clock")
HELD = [s for s in STYLES if s not in MEASURED]


def _outcome(r: corpus.Result) -> tuple[str, tuple[int, ...], bool]:
    return r.got_id, r.got_ranks, r.healthy


def _kind(case: corpus.Case, got: corpus.Result) -> str:
    if got.called_healthy:
        return "failed job called healthy"
    if got.called_failed:
        return "healthy run called failed"
    return "another finding"


def probe(cases: list[corpus.Case], styles: list[str], workdir: Path,
          progress: Callable[[int, int], None] | None = None,
          ) -> tuple[Counter[tuple[str, str]], list[str]]:
    """Per (style, "same" or how it changed): how many; and one line per change."""
    counts: Counter[tuple[str, str]] = Counter()
    changes: list[str] = []
    for n, case in enumerate(cases, 1):
        base = corpus.run(case)
        if progress:
            progress(n, len(cases))
        if not base.right:
            continue
        text = case.log.read_text(encoding="utf-8", errors="replace")
        for style in styles:
            path = workdir / f"{style}.log"
            path.write_bytes(STYLES[style](text))
            got = corpus.run(replace(case, log=path))
            if _outcome(got) == _outcome(base):
                counts[(style, "same")] += 1
                continue
            kind = _kind(case, got)
            counts[(style, kind)] += 1
            changes.append(f"{style}: {case.name}: {base.got_id} {list(base.got_ranks)} -> "
                           f"{got.got_id} {list(got.got_ranks)} ({kind})")
    return counts, changes


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m tools.probe", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dir", nargs="?", type=Path, default=corpus.DEFAULT_DIR,
                    help="a corpus folder (default: the development set)")
    ap.add_argument("--styles", default=",".join(HELD),
                    help=f"comma-separated, of: {', '.join(STYLES)} (default: all but "
                    f"{', '.join(s for s in STYLES if s not in HELD)}, measured only)")
    ap.add_argument("--sample", type=int, default=0, help="probe N logs drawn at random "
                    "(default: every log)")
    ap.add_argument("--seed", type=int, default=0, help="the sample's seed (default 0)")
    args = ap.parse_args(argv)
    styles = [s for s in args.styles.split(",") if s]
    unknown = [s for s in styles if s not in STYLES]
    if unknown:
        ap.error(f"unknown style(s) {', '.join(unknown)}: pick from {', '.join(STYLES)}")
    cases = corpus.load(args.dir)
    if not cases:
        ap.error(f"no corpus log (NAME.log with NAME.json) in {args.dir}")
    if args.sample:
        cases = random.Random(args.seed).sample(cases, min(args.sample, len(cases)))

    def progress(n: int, total: int) -> None:
        if n % 50 == 0 or n == total:
            print(f"probed {n}/{total} logs", file=sys.stderr)

    with tempfile.TemporaryDirectory(prefix="ddpdoctor-probe-") as tmp:
        counts, changes = probe(cases, styles, Path(tmp), progress)
    print("| style | read the same | changed |\n|---|---:|---:|")
    for style in styles:
        same = counts[(style, "same")]
        changed = sum(v for (s, k), v in counts.items() if s == style and k != "same")
        print(f"| {style} | {same} | {changed} |")
    if changes:
        print("\nChanged:\n" + "\n".join(f"- {c}" for c in changes))
    return 1 if changes else 0


if __name__ == "__main__":
    raise SystemExit(main())
