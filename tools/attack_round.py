"""Safety round 4: 100+ bad inputs, each run as an attacker would, as a subprocess.

Not shipped in the wheel (``tools/`` is outside the package). Each attempt runs the real
``ddpdoctor`` command line with a timeout in a fresh work directory and records the command,
what was expected, the exit code, the first stderr line and a verdict: ``held`` when every
guarantee of docs/safety.md held, ``BROKEN: why`` when one did not.

Guarantees checked on every attempt: the exit code is one of the documented ones for that
case, no traceback, the command ends before its timeout (deadlines). Where an attempt plants
a secret (every planted secret contains ``SEKRET``), the terminal view and every report file
(--json, --html) are searched for it; where it plants a terminal escape, the terminal view is
searched for the raw bytes; where it plants a symlink or a victim file, the victim is checked.

    .venv/bin/python tools/attack_round.py              # run all, print the table
    .venv/bin/python tools/attack_round.py --only D0    # attempts whose id starts with D0
    .venv/bin/python tools/attack_round.py --markdown out.md
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import pty
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DDP = str(ROOT / ".venv" / "bin" / "ddpdoctor")
PY = str(ROOT / ".venv" / "bin" / "python")

# Planted secrets: every one contains SEKRET, in the shape named.
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJTRUtSRVQifQ."
       "SEKRETsig_0123456789abcdefABCDEF-xyz")
AWS_ID = "AKIASEKRET7EXAMPLE12"
AWS_SECRET = "wJalrXUtnFEMI/K7MDENG/bPxRfiCYSEKRETKEY9"
GH_TOKEN = "ghp_SEKRET0123456789abcdefghijABCDEFGHIJ"
HF_TOKEN = "hf_SEKRETabcdefghijklmnopqrstuvwxyzAB"
SK_KEY = "sk-proj-SEKRETabcdefghijklmnopqrstuvwxyz0123"
SLACK = "xoxb-123456789012-SEKRET123456-abcdefghijklmnop"
ESC_SEQS = ("\x1b[2J", "\x1b]0;", "\x9b2J", "\u202e")


@dataclass
class Result:
    rc: int | None
    out: str
    err: str
    elapsed: float
    work: Path


Check = Callable[[Result], str | None]  # a reason it broke, or None


@dataclass
class Attempt:
    id: str
    cmd: str  # a shell command line run in the work dir; $D is ddpdoctor, $PY python
    expect: str
    codes: tuple[int, ...]
    setup: Callable[[Path], None] | None = None
    checks: list[Check] = field(default_factory=list)
    timeout: float = 30.0
    secret: bool = False  # SEKRET must be absent from the view and every report file
    secret_files_only: bool = False  # run: the job's own output passes through stdout
    escapes: bool = False  # planted escapes must not reach the terminal view raw
    tty: bool = False  # stdout is a pseudo-terminal (what a user sees)
    env: dict[str, str] = field(default_factory=dict)
    after: Callable[[Path], None] | None = None  # cleanup (end what setup started)


# ---------------------------------------------------------------- helpers for setups

def write(name: str, data: str | bytes) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        p = w / name
        p.write_bytes(data.encode("utf-8", "surrogateescape") if isinstance(data, str)
                      else data)
    return setup


def crash_log(line: str) -> str:
    """A crash whose last line (the exception) is ``line``: diagnose quotes it."""
    return ("[rank1]: Traceback (most recent call last):\n"
            '[rank1]:   File "/srv/train.py", line 42, in <module>\n'
            f"[rank1]: {line}\n")


def both(*setups: Callable[[Path], None]) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        for s in setups:
            s(w)
    return setup


def victim(w: Path) -> None:
    (w / "victim").write_text("precious\n")


def victim_intact(r: Result) -> str | None:
    v = r.work / "victim"
    if not v.exists():
        return "victim file removed"
    if v.read_text() != "precious\n":
        return "victim file overwritten"
    return None


def no_file(name: str) -> Check:
    def check(r: Result) -> str | None:
        return f"{name} was created" if (r.work / name).exists() else None
    return check


def stdout_has(text: str) -> Check:
    def check(r: Result) -> str | None:
        return None if text in r.out else f"stdout lacks {text!r}"
    return check


def file_has(name: str, text: str) -> Check:
    def check(r: Result) -> str | None:
        p = r.work / name
        if not p.exists():
            return f"{name} not written"
        return None if text in p.read_text(errors="replace") else f"{name} lacks {text!r}"
    return check


def faster_than(seconds: float) -> Check:
    def check(r: Result) -> str | None:
        return None if r.elapsed < seconds else f"took {r.elapsed:.1f} s (> {seconds} s)"
    return check


def html_escaped(r: Result) -> str | None:
    for p in r.work.glob("*.html"):
        if "<script>alert(" in p.read_text(errors="replace"):
            return f"{p.name} holds the planted <script> unescaped"
    return None


def sticky_symlink(w: Path) -> None:
    """A world-writable sticky dir (like /tmp) where another user planted report.json ->
    victim: the kernel's protected_symlinks rule refuses to follow such a link."""
    victim(w)
    s = w / "sticky"
    s.mkdir()
    os.chmod(s, 0o1777)
    link = s / "report.json"
    link.symlink_to(w / "victim")
    os.lchown(link, 65534, 65534)


def _shared_dir(w: Path) -> None:
    """A sticky world-writable folder another user (nobody) can reach, and a victim."""
    victim(w)
    for d in (w.parent, w):
        os.chmod(d, 0o755)
    (w / "sticky").mkdir()
    os.chmod(w / "sticky", 0o1777)


def fifo(name: str) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        os.mkfifo(w / name)
    return setup


_KEEP: list[object] = []  # sockets and processes a setup keeps alive until its attempt ends


def unix_socket(name: str) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        s = socket.socket(socket.AF_UNIX)
        s.bind(str(w / name))
        s.listen(1)
        _KEEP.append(s)
    return setup


def garbage_server(w: Path) -> None:
    """A TCP server on loopback that accepts and never answers: attach --job must give up."""
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen(8)
    _KEEP.append(s)
    (w / "port").write_text(str(s.getsockname()[1]))


def spawn(cmd: str, env: dict[str, str] | None = None) -> Callable[[Path], None]:
    """Start a helper process; its pid goes to ./pid."""
    def setup(w: Path) -> None:
        p = subprocess.Popen(cmd, shell=True, executable="/bin/bash", cwd=w,
                             env={**os.environ, **(env or {})},
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        _KEEP.append(p)
        time.sleep(0.5)
        (w / "pid").write_text(str(p.pid))
    return setup


def zombie(w: Path) -> None:
    """A zombie: a child that exited, whose parent (a sleeping python) never waits."""
    code = ("import os,time,sys\npid=os.fork()\nif pid==0: os._exit(0)\n"
            "print(pid,flush=True)\ntime.sleep(60)\n")
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True,
                         start_new_session=True)
    _KEEP.append(p)
    assert p.stdout is not None
    (w / "pid").write_text(p.stdout.readline().strip())
    time.sleep(0.3)


def end_kept(w: Path) -> None:
    while _KEEP:
        k = _KEEP.pop()
        if isinstance(k, subprocess.Popen):
            try:
                os.killpg(k.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            k.wait()
        elif isinstance(k, socket.socket):
            k.close()


def daemon_gone(r: Result) -> str | None:
    """run must end a daemon its job started (setsid sleep 4242)."""
    time.sleep(0.5)
    out = subprocess.run(["pgrep", "-f", "sleep 4242"], capture_output=True, text=True)
    pids = out.stdout.split()
    for pid in pids:  # end only what this attempt started, by pid
        os.kill(int(pid), signal.SIGKILL)
    return f"daemon left running: {pids}" if pids else None


def gz_bomb(name: str, size: int, chunk: bytes) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        with gzip.open(w / name, "wb", compresslevel=9) as f:
            block = chunk * (1 << 20 // len(chunk) or 1)
            left = size
            while left > 0:
                f.write(block[:left])
                left -= len(block)
    return setup


def big_line(name: str, size: int) -> Callable[[Path], None]:
    def setup(w: Path) -> None:
        with open(w / name, "wb") as f:
            f.write(b"RuntimeError: ")
            block = b"x" * (1 << 20)
            for _ in range(size >> 20):
                f.write(block)
            f.write(b"\n")
    return setup


def nested_json(depth: int) -> Callable[[Path], None]:
    return write("deep.json", "[" * depth + "]" * depth)


def report_json(**over: object) -> dict[str, object]:
    rep: dict[str, object] = {
        "schema": "ddpdoctor.report/1", "command": "diagnose",
        "started": "2026-01-01T00:00:00+00:00", "duration_s": 1.0,
        "world": {}, "findings": [], "probes": {}, "exit_code": 0,
    }
    rep.update(over)
    return rep


def finding(**over: object) -> dict[str, object]:
    f: dict[str, object] = {"id": "RANK_CRASHED", "severity": "error", "title": "crash",
                            "ranks": [1], "evidence": {}, "playbook": "RANK_CRASHED"}
    f.update(over)
    return f


def jfile(name: str, obj: object) -> Callable[[Path], None]:
    return write(name, json.dumps(obj))


# ---------------------------------------------------------------- the attempts

LOG_OPTS = ("", "-v", "--json out.json", "--json -", "--html out.html")


def attempts() -> list[Attempt]:
    a: list[Attempt] = []
    add = a.append
    # --- D: secrets in new shapes through diagnose, one output format each (cycled)
    secrets = [
        ("JWT in a URL query ?token=",
         f"RuntimeError: GET https://hub.example/api?token={JWT} 401"),
        ("JWT in a query under a harmless name ?state=",
         f"RuntimeError: GET https://x.example/cb?state={JWT}"),
        ("JWT bare in prose", f"RuntimeError: auth failed for {JWT}"),
        ("AWS access key id by value shape", f"RuntimeError: S3 403 for {AWS_ID} on bucket ckpt"),
        ("AWS secret key after a harmless word", f"RuntimeError: signing with {AWS_SECRET} failed"),
        ("Authorization:Bearer without space", f"RuntimeError: header Authorization:Bearer{JWT}"),
        ("bearer glued to a quote",
         f"RuntimeError: headers={{'Authorization':'Bearer {GH_TOKEN}'}}"),
        ("GitHub token by shape",
         f"RuntimeError: git clone https://{GH_TOKEN}@github.com/o/r failed"),
        ("Hugging Face token by shape", f"OSError: 401 Client Error for hf_hub with {HF_TOKEN}"),
        ("OpenAI-style sk- key by shape", f"RuntimeError: openai rejected {SK_KEY}"),
        ("Slack bot token by shape", f"RuntimeError: slack notify {SLACK} failed"),
        ("env dump as a Python dict repr",
         "RuntimeError: env={'WANDB_API_KEY': 'SEKRETwandb', 'RANK': '1'}"),
        ("environ() repr with PASSWORD",
         "RuntimeError: environ({'DB_PASSWORD': 'SEKRETdb', 'HOME': '/root'})"),
        ("JSON-style api_key", 'RuntimeError: config {"api_key": "SEKRETjson", "lr": 0.1}'),
        ("URL password, upper-case scheme",
         "RuntimeError: cannot reach HTTPS://admin:SEKRETpw@db.example/x"),
        ("URL password percent-encoded",
         "RuntimeError: redis://user:p%40SEKRETenc@cache:6379 refused"),
        ("export line in the error", "RuntimeError: run `export HF_TOKEN=SEKRETexport` first"),
        ("password with tabs around =", "RuntimeError: PASSWORD\t=\tSEKRETtabs"),
        ("--password=VALUE in a quoted argv",
         "RuntimeError: args ['--password=SEKRETargv', '--lr', '1']"),
        ("access_token in a URL fragment &", "RuntimeError: GET /x?a=1&access_token=SEKRETamp&b=2"),
        ("private key PEM body",
         "ValueError: bad key -----BEGIN RSA PRIVATE KEY-----MIIEpSEKRETpem"),
    ]
    for i, (what, line) in enumerate(secrets):
        opt = LOG_OPTS[i % len(LOG_OPTS)]
        add(Attempt(f"D{i:02d}", f"$D diagnose rank1.log {opt}",
                    f"{what}: masked in {opt or 'terminal'}; exit 1",
                    (1,), write("rank1.log", crash_log(line)), secret=True))
    add(Attempt("D21", "$D diagnose 'HF_TOKEN=SEKRETname.log' --json out.json --html out.html",
                "secret in the log's file name: masked in view, JSON, HTML; exit 1", (1,),
                write("HF_TOKEN=SEKRETname.log", crash_log("RuntimeError: boom")), secret=True))
    add(Attempt("D22", "$D diagnose rank1.log --html out.html",
                "env dump of a crashing rank (lines after the error) in HTML", (1,),
                write("rank1.log", crash_log("RuntimeError: boom") +
                      "[rank1]: AWS_SECRET_ACCESS_KEY=SEKRETaws\n[rank1]: HF_TOKEN=SEKRETenv\n"
                      "[rank1]: RuntimeError: again HF_TOKEN=SEKRETenv2\n"), secret=True))

    # --- T: terminal injection and odd characters
    esc_line = "RuntimeError: boom \x1b[2J\x1b]0;pwned\x07 \u009b2J \u202eevil"
    add(Attempt("T00", "$D diagnose rank1.log", "ESC[2J/OSC/C1 CSI/RTL in a log line: shown "
                "escaped in the terminal view; exit 1", (1,),
                write("rank1.log", crash_log(esc_line)),
                escapes=True))
    add(Attempt("T01", "$D diagnose -v rank1.log", "the same with -v", (1,),
                write("rank1.log", crash_log(esc_line)), escapes=True))
    add(Attempt("T02", "$D diagnose rank1.log", "the same on a real terminal (pty)", (1,),
                write("rank1.log", crash_log(esc_line)), escapes=True, tty=True))
    add(Attempt("T03", "$D diagnose $'x\\x1b[2J.log'", "ESC in the log file's name (head and "
                "check line)", (1,), write("x\x1b[2J.log", crash_log("RuntimeError: boom")),
                escapes=True))
    add(Attempt("T04", "$D diagnose rank1.log --json -", "ESC in a log line through --json -: "
                "JSON escapes it", (1,), write("rank1.log", crash_log(esc_line)), escapes=True))
    add(Attempt("T05", "$D playbook $'\\x1b[2JOOM'", "ESC in a playbook id: the one error line "
                "shows it escaped; exit 2", (2,), escapes=True))
    add(Attempt("T06", "$D plan --params 7e9 --strategy $'ddp\\x1b]0;x\\x07'",
                "ESC in plan --strategy: one line, exit 2", (2,), escapes=True))
    add(Attempt("T07", "$D diagnose rank1.log", "\\r in a log line to overwrite the verdict",
                (1,), write("rank1.log", crash_log("RuntimeError: x\r• No issues found!")),
                [lambda r: "raw \\r reached the view" if "\r" in r.out else None]))
    add(Attempt("T08", "$D diagnose rank1.log --json out.json", "invalid UTF-8 bytes in the "
                "error line; exit 1", (1,),
                write("rank1.log", crash_log("RuntimeError: \udcff\udcfe bad")),
                [file_has("out.json", "RANK_CRASHED")]))
    add(Attempt("T09", "$D diagnose $'\\xff\\xfe.log' --json out.json",
                "invalid UTF-8 in the file name; exit 1", (1,),
                write("\udcff\udcfe.log", crash_log("RuntimeError: boom"))))
    add(Attempt("T10", "$D diagnose rank1.log", "a 1 MB line of combining marks (zalgo)",
                (1,), write("rank1.log", crash_log("RuntimeError: " + "a\u0301\u0302" * 300000)),
                [faster_than(20)]))
    add(Attempt("T11", "PYTHONIOENCODING=ascii LC_ALL=C $D diagnose rank1.log",
                "ASCII-only stdout with ✓/✗ marks and non-ASCII evidence", (1,),
                write("rank1.log", crash_log("RuntimeError: ünïcødé ✗"))))
    add(Attempt("T12", "COLUMNS=0 LINES=-5 TERM=dumb $D diagnose rank1.log",
                "COLUMNS=0 LINES=-5 TERM=dumb", (1,),
                write("rank1.log", crash_log("RuntimeError: x"))))
    add(Attempt("T13", "$D diagnose rank1.log", "U+2028/U+0085 line separators in a line",
                (1,), write("rank1.log", crash_log("RuntimeError: a\u2028✓ fake\u0085line")),
                escapes=True))

    # --- H: huge and strange inputs
    add(Attempt("H00", "$D diagnose big.log", "one 100 MB line: read, cut, within 60 s", (1, 0, 3),
                big_line("big.log", 100 << 20), [faster_than(60)], timeout=120))
    add(Attempt("H01", "$D diagnose bomb.log.gz", "gzip bomb: 2 GB of NULs in ~2 MB", (0, 1, 3),
                gz_bomb("bomb.log.gz", 2 << 30, b"\0"), [faster_than(60)], timeout=90))
    add(Attempt("H02", "$D diagnose bomb.log.gz", "gzip bomb: 1 GB of one line without newline",
                (0, 1, 3), gz_bomb("bomb.log.gz", 1 << 30, b"a"), [faster_than(60)], timeout=90))
    add(Attempt("H03", "$D diagnose nested.log.gz", "gzip inside gzip", (0, 1, 3),
                lambda w: (w / "nested.log.gz").write_bytes(gzip.compress(gzip.compress(
                    crash_log("RuntimeError: x").encode())))))
    add(Attempt("H04", "$D diagnose /dev/zero", "/dev/zero: refused, one line", (2,)))
    add(Attempt("H05", "$D diagnose /dev/urandom", "/dev/urandom: refused, one line", (2,)))
    add(Attempt("H06", "$D diagnose sock", "a listening unix socket as input: refused", (2,),
                unix_socket("sock"), after=end_kept))
    add(Attempt("H07", "$D diagnose fifo", "a FIFO with no writer: refused at once", (2,),
                fifo("fifo"), [faster_than(10)]))
    add(Attempt("H08", "$D diagnose < /dev/zero", "stdin from /dev/zero: ends, not healthy",
                (1, 3), checks=[faster_than(40)], timeout=60))
    add(Attempt("H09", "$D diagnose < /dev/urandom", "stdin from /dev/urandom: ends, not healthy",
                (1, 3), checks=[faster_than(40)], timeout=60))
    add(Attempt("H10", "$D diagnose sparse.log", "a 20 GB sparse file (all NULs): not healthy, "
                "bounded time", (1, 3), lambda w: os.truncate(_touch(w / "sparse.log"), 20 << 30),
                [faster_than(120)], timeout=180))
    add(Attempt("H11", "$D diagnose zlink.log", "a symlink to /dev/zero: refused", (2,),
                lambda w: (w / "zlink.log").symlink_to("/dev/zero")))
    add(Attempt("H12", "$D diagnose many.log --json out.json", "200,000 crash lines: bounded "
                "time and report size", (1,),
                write("many.log", "".join(f"[rank{i % 64}]: RuntimeError: e{i}\n"
                                          for i in range(200000))), [faster_than(60)], timeout=120))
    add(Attempt("H13", "$D diagnose cr.log", "10 MB of bare \\r, no \\n", (0, 1, 3),
                write("cr.log", b"RuntimeError: x" + b"\r" * (10 << 20)), [faster_than(40)],
                timeout=60))
    add(Attempt("H14", "$D diagnose bad.log.gz", "a .gz that is not gzip", (0, 1, 3),
                write("bad.log.gz", crash_log("RuntimeError: not gz"))))
    add(Attempt("H15", "$D diagnose /proc/1/environ --json out.json", "pid 1's environment as "
                "a log (NUL-separated): read, or one line when it cannot be", (0, 1, 2, 3)))
    add(Attempt("H16", "$D diagnose .", "a directory: usage", (2,)))
    add(Attempt("H17", "$D diagnose - -", "stdin twice: usage", (2,)))
    add(Attempt("H18", "$D diagnose " + "x" * 5000 + ".log", "a 5000-char file name: one line",
                (2,)))

    # --- O: every output format into bad places
    crash = write("rank1.log", crash_log("RuntimeError: boom"))
    add(Attempt("O00", "$D diagnose rank1.log --json sticky/report.json", "--json to another "
                "user's symlink in a sticky world-writable dir (/tmp attack): victim untouched",
                (2, 3), both(crash, sticky_symlink), [victim_intact]))
    add(Attempt("O01", "$D diagnose rank1.log --html sticky/report.json", "the same with --html",
                (2, 3), both(crash, sticky_symlink), [victim_intact]))
    add(Attempt("O02", "$D plan --params 7e9 --json sticky/report.json", "the same with plan",
                (2, 3), sticky_symlink, [victim_intact]))
    add(Attempt("O03", "$D diagnose rank1.log --json fifo", "--json to a FIFO nobody reads: "
                "exit 3, one line, no hang", (3,), both(crash, fifo("fifo")), [faster_than(20)]))
    add(Attempt("O04", "(cat fifo > got &) ; $D diagnose rank1.log --json fifo; rc=$?; "
                "sleep 0.3; exit $rc",
                "--json to a FIFO with a reader: written", (1,), both(crash, fifo("fifo")),
                [file_has("got", "RANK_CRASHED")]))
    add(Attempt("O05", "$D diagnose rank1.log --json /dev/full", "--json /dev/full: exit 3",
                (3,), crash))
    add(Attempt("O06", "$D diagnose rank1.log --html sock", "--html to a unix socket: exit 2",
                (2,), both(crash, unix_socket("sock")), after=end_kept))
    add(Attempt("O07", "$D diagnose rank1.log --json /proc/ddp.json", "--json into /proc", (2, 3),
                crash))
    add(Attempt("O08", "$D diagnose rank1.log --json rank1.log/x.json", "--json under a file",
                (2,), crash))
    add(Attempt("O09", "$D diagnose rank1.log --json " + "d" * 300 + ".json",
                "--json name over NAME_MAX", (2, 3), crash))
    add(Attempt("O10", "$D diagnose rank1.log >/dev/full", "terminal view to /dev/full: exit 3",
                (3,), crash))
    add(Attempt("O11", "$D diagnose rank1.log --json - | head -c 10 >/dev/null",
                "--json - into a pipe closed early", (0, 1, 3), crash))
    add(Attempt("O12", "$D diagnose rank1.log 2>&- 1>&-", "stdout and stderr closed", (1,), crash))
    add(Attempt("O13", "$D diagnose rank1.log --json out.json --html out.json",
                "--json and --html to the same path", (1,), crash))
    add(Attempt("O14", "$D diagnose rank1.log --json ro/out.json", "--json into a read-only "
                "mount (bind ro)", (2, 3), crash,
                timeout=30))
    add(Attempt("O15", "$D playbook OOM --json ' '", "--json of blanks", (2,)))
    add(Attempt("O16", "setpriv --reuid 65534 --regid 65534 --clear-groups bash -c 'for i in "
                "$(seq 4000); do ln -sfn ../victim sticky/out.json 2>/dev/null; rm -f "
                "sticky/out.json 2>/dev/null; done' & for i in $(seq 25); do $D diagnose "
                "rank1.log --json sticky/out.json >/dev/null 2>&1; rm -f sticky/out.json; "
                "done; wait; exit 0", "symlink race: another user flips sticky/out.json "
                "between a symlink to the victim and nothing while --json writes there, 25 "
                "times: victim intact", (0,), both(crash, _shared_dir), [victim_intact],
                timeout=120))
    add(Attempt("O17", "$D playbook --html -", "--html - (stdout): usage", (2,)))

    # --- P: plan with absurd numbers
    for i, (args, what) in enumerate([
        ("--params 1e30 --nproc 8 --gpu-mem 80G", "1e30 parameters"),
        ("--params nan", "NaN parameters"),
        ("--params inf --gpu-mem 80G", "inf parameters"),
        ("--params -7e9", "negative parameters"),
        ("--params 0", "zero parameters"),
        ("--params 7e9 --nproc 0", "0 ranks"),
        ("--params 7e9 --gpu-mem -80G", "negative GPU memory"),
        ("--params 7e9 --gpu-mem nanG", "NaN GPU memory"),
        ("--params 7e9 --gpu-mem 1e400G", "GPU memory that overflows a float"),
        ("--params 7e9 --margin nan --gpu-mem 80G", "NaN margin"),
        ("--params 7e9 --margin -1 --gpu-mem 80G", "negative margin"),
        ("--params 7e9 --margin 1e308 --gpu-mem 80G", "huge margin"),
        ("--params 7e9 --reserve 1e30T --gpu-mem 80G", "reserve above any GPU"),
        ("--params 7e9 --seq 1000000000000 --gpu-mem 80G", "a 1e12-token sequence"),
        ("--layers 1000000000 --dim 1000000 --heads 1 --gpu-mem 80G", "1e9 layers of width 1e6"),
        ("--params 7e9 --batch-size 99999999999999999999999 --gpu-mem 80G", "a batch over 2^64"),
        ("--params 7e9 --nproc 2 --tp 3 --strategy tp-dp --gpu-mem 80G", "tp that does not divide"),
        ("--params 7e9 --strategy ddp,,,nope", "an unknown strategy"),
        ("--model os:getcwd", "--model factory returning a string"),
        ("--model ../../etc/passwd:x", "--model path traversal"),
        ("--params 7e9 --nproc 99999999999999999999 --gpu-mem 80G", "2^66 ranks"),
    ]):
        codes = (0, 1, 2, 3)
        if any(bad in what for bad in ("NaN", "inf", "negative", "zero", "0 ranks", "overflows",
                                       "unknown", "traversal", "string")):
            codes = (2,)
        opt = ("", "--json out.json", "--json -", "--html out.html")[i % 4]
        add(Attempt(f"P{i:02d}", f"$D plan {args} {opt}", f"{what}: one line or a finite "
                    f"report ({opt or 'terminal'})", codes, checks=[faster_than(20), _finite_json]))

    # --- B: playbook ids
    for i, (pid, what) in enumerate([
        ("../../etc/passwd", "path traversal"), ("/etc/passwd", "an absolute path"),
        ("OOM/../../README", "traversal behind a real id"), ("x" * 100000, "a 100,000-char id"),
        (".", "a dot"), ("ＯＯＭ", "full-width letters"), ("oom\\x00", "a backslash-escaped NUL"),
        ("*", "a glob"),
    ]):
        add(Attempt(f"B{i:02d}", f"$D playbook '{pid}' --json out.json", f"playbook {what}: "
                    "exit 2, one line, nothing read outside playbooks/", (2,),
                    checks=[lambda r: "root:x:0" in r.out + r.err and "leaked /etc/passwd"
                            or None, no_file("out.json")]))
    add(Attempt("B08", "$D playbook --json -", "every playbook as JSON to stdout", (0,),
                checks=[stdout_has("OOM")]))

    # --- R: report on malformed and hostile inputs
    add(Attempt("R00", "$D report bad.json --html out.html", "malformed JSON: exit 2", (2,),
                write("bad.json", '{"schema": "ddpdoctor.report/1", "findings": [')))
    add(Attempt("R01", "$D report deep.json --html out.html", "200,000 nested arrays: exit 2",
                (2,), nested_json(200000)))
    add(Attempt("R02", "$D report deep.json --html out.html", "a report with 100,000 nested "
                "objects in world", (0, 2), write("deep.json", _deep_world(100000))))
    add(Attempt("R03", "$D report huge.json --html out.html", "a 60 MB evidence string",
                (0, 2, 3), jfile("huge.json", report_json(findings=[finding(
                    evidence={"lines": ["x" * (60 << 20)]})])), [faster_than(150)], timeout=200))
    add(Attempt("R04", "$D report types.json --html out.html", "wrong types everywhere",
                (2,), jfile("types.json", report_json(findings="x", world=[], probes=7))))
    add(Attempt("R05", "$D report sec.json --html out.html", "secrets in world/command/evidence "
                "of a JSON written by someone else: masked in HTML", (0,),
                jfile("sec.json", report_json(
                    command=f"run --token SEKRETcmd {AWS_ID}",
                    world={"argv": ["train.py", "--api-key", "SEKRETworld"],
                           "env": {"HF_TOKEN": "SEKRETenv"}, "note": f"url ?token={JWT}"},
                    findings=[finding(title=f"crash {GH_TOKEN}",
                                      evidence={"lines": [f"Authorization:Bearer{JWT}"]})])),
                secret=True))
    add(Attempt("R06", "$D report xss.json --html out.html", "</script><script>alert() in "
                "title, evidence, world: escaped", (0,),
                jfile("xss.json", report_json(
                    world={"k</script><script>alert(1)</script>": "v"},
                    findings=[finding(title="</script><script>alert(1)</script>",
                                      evidence={"x": "<script>alert(2)</script>"})])),
                [html_escaped]))
    add(Attempt("R07", "$D report /dev/zero --html out.html", "/dev/zero as the source", (2,),
                checks=[faster_than(10)]))
    add(Attempt("R08", "$D report /dev/urandom --html out.html", "/dev/urandom as the source",
                (2,), checks=[faster_than(10)]))
    add(Attempt("R09", "$D report fifo --html out.html", "a FIFO with no writer as the source",
                (2,), fifo("fifo"), [faster_than(10)]))
    add(Attempt("R10", "$D report rundir --html out.html", "a run dir whose report.json is a "
                "symlink to /etc/shadow", (2,),
                lambda w: ((w / "rundir").mkdir(),
                           (w / "rundir/report.json").symlink_to("/etc/shadow")),
                [lambda r: "root:" in r.out + r.err + _read(r.work / "out.html") and
                 "/etc/shadow content leaked" or None]))
    add(Attempt("R11", "$D report ok.json --json-log bad.jsonl --html out.html",
                "--json-log with broken lines, NaN, 1e999, strings as numbers", (0,),
                both(jfile("ok.json", report_json()), write("bad.jsonl",
                     '{"step": 1, "loss": NaN}\n{"step": "x", "loss": 1e999}\n[1,2\n'
                     '{"step": 1e999, "rank_times": {"0": -1}}\nnot json\n'))))
    add(Attempt("R12", "$D report ok.json --run-dir /proc --html out.html",
                "--run-dir /proc", (0, 2), jfile("ok.json", report_json()), [faster_than(30)]))
    add(Attempt("R13", "$D report nan.json --html out.html", "NaN, Infinity, bad date",
                (0, 2), write("nan.json", json.dumps(report_json(duration_s=float("nan"),
                                                                 started="yesterday")))))
    add(Attempt("R14", "$D report sev.json --html out.html", "a finding with severity 'bogus'",
                (0, 2), jfile("sev.json", report_json(findings=[finding(severity="bogus")]))))
    add(Attempt("R15", "$D report list.json --html out.html", "top level a list / null",
                (2,), write("list.json", "[null]")))
    add(Attempt("R16", "$D report many.json --html out.html", "50,000 findings",
                (0, 2), jfile("many.json", report_json(findings=[finding(title=f"t{i}")
                                                                  for i in range(50000)])),
                [faster_than(90)], timeout=150))
    add(Attempt("R17", "$D report bom.json --html out.html", "UTF-16 with BOM", (0, 2),
                write("bom.json", json.dumps(report_json()).encode("utf-16"))))
    add(Attempt("R18", "$D report ok.json --html ro/out.html", "--html into a read-only mount",
                (2, 3), jfile("ok.json", report_json())))
    add(Attempt("R19", "$D report sec.json --html out.html", "secret as a dict key and in "
                "probe data", (0,), jfile("sec.json", report_json(probes={"env": {
                    "status": "ok", "summary": f"ok {SLACK}", "data": {
                        f"x?token={JWT}": 1, "vars": {"MY_PASSWORD": "SEKRETprobe"}}}})),
                secret=True))

    # --- A: attach on the wrong processes and numbers
    for i, (args, what, codes) in enumerate([
        ("1", "pid 1 (init): only the ranks below it, if any, are read", (0, 1, 3)),
        ("2", "pid 2 (kthreadd, a kernel thread)", (3,)),
        ("$(cat pid)", "a zombie", (3,)), ("0", "pid 0", (2,)), ("-1", "pid -1", (2,)),
        ("99999999", "a pid that cannot exist", (2, 3)), ("1e3", "pid 1e3", (2,)),
        ("9223372036854775808", "pid 2^63", (2,)), ("--timeout nan 1", "--timeout nan", (2,)),
        ("--timeout -1 1", "--timeout -1", (2,)), ("--timeout 1e308 1", "--timeout 1e308", (2, 3)),
        ("$$", "its own shell (its parent)", (3,)),
        ("--job 'localhost:99999'", "--job port out of range", (2,)),
        ("--job '[::1'", "--job unclosed IPv6 bracket", (2,)),
        ("--job $'\\x1b[2Jhost:1'", "--job host with ESC", (2, 3)),
    ]):
        setup = zombie if what == "a zombie" else None
        add(Attempt(f"A{i:02d}", f"$D attach {args} --json out.json", f"attach {what}: one "
                    "line, nothing signalled", codes, setup, [faster_than(25)],
                    escapes="ESC" in what, after=end_kept if setup else None))
    add(Attempt("A15", "$D attach --timeout 3 --job 127.0.0.1:$(cat port)", "--job to a server "
                "that never answers: gives up within its deadline", (1, 3), garbage_server,
                [faster_than(40)], timeout=60, after=end_kept))
    add(Attempt("A16", "$D attach $(cat pid) --json out.json", "a non-python process with "
                "RANK=0 in its environment: not a target", (3,),
                spawn("exec sleep 300", {"RANK": "0"}), [faster_than(25)], after=end_kept))
    add(Attempt("A17", "$D attach $(cat pid) --json out.json --html out.html", "a python "
                "'rank' (RANK=0) whose argv holds --token SEKRET and an AWS key: masked",
                (0, 1, 3), spawn(f"exec {PY} -c 'import time; time.sleep(300)' --token "
                                 f"SEKRETargv {AWS_ID}", {"RANK": "0", "WORLD_SIZE": "1",
                                                          "HF_TOKEN": "SEKRETenv"}),
                secret=True, timeout=45, after=end_kept))

    add(Attempt("A18", "$D attach $(cat pid)", "a rank (RANK=0) whose script's file name "
                "holds ESC[2J: the stack view shows it escaped", (0, 1, 3),
                both(write("x\x1b[2J.py", "import time\ntime.sleep(300)\n"),
                     spawn(f"exec {PY} $'x\\x1b[2J.py'", {"RANK": "0", "WORLD_SIZE": "1"})),
                escapes=True, timeout=45, after=end_kept))

    # --- U: run
    run = "$D run --no-watch --hang-timeout 60 --run-dir rd"
    add(Attempt("U00", f"{run} -- ./no-such-command", "a command that does not exist: one "
                "line, exit 2 (documented: the job never started)", (2,)))
    add(Attempt("U01", f"{run} -- /tmp", "a directory as the command: one line, exit 2",
                (2,)))
    add(Attempt("U02", f"{run} -- sh -c 'exec >&- 2>&-; sleep 1; exit 5'", "a job that closes "
                "its stdio: its code 5", (5,), timeout=40))
    add(Attempt("U03", f"{run} -- sh -c 'setsid sleep 4242 & exit 0'", "a job that forks a "
                "daemon: exit 0 and the daemon ended", (0,), checks=[daemon_gone], timeout=60))
    add(Attempt("U04", f"{run} -- sh -c 'kill -SEGV $$'", "a job killed by SIGSEGV: 139",
                (139,)))
    add(Attempt("U05", f"{run} -- sh -c 'kill -KILL $$'", "a job killed by SIGKILL: 137", (137,)))
    add(Attempt("U06", f"{run} -- sh -c 'head -c 1000000000 /dev/zero | tr \"\\\\0\" a; "
                "echo; exit 3' | tail -c 100 >/dev/null", "a job printing 1 GB in one line "
                "quickly: its code, bounded (100 MB: 18 s)", (0,), checks=[faster_than(540)],
                timeout=600))
    add(Attempt("U07", "$D run --no-watch --", "no command: usage", (2,)))
    for j, opt in enumerate(["--hang-timeout nan", "--hang-timeout -1", "--hang-min inf",
                             "--kill-grace nan", "--kill-grace 1e308 (finite: accepted)",
                             "--metrics-port 65536",
                             "--metrics-port -1", "--job-endpoint ''"]):
        lax = "''" in opt or "finite" in opt  # no endpoint / a finite grace: the job runs
        opt = opt.split(" (")[0]
        add(Attempt(f"U{8 + j:02d}", f"$D run {opt} -- true", f"run {opt}: exit 2"
                    + (" or accepted (the job's 0)" if lax else ""), (0, 2) if lax else (2,)))
    add(Attempt("U16", f"HF_TOKEN=SEKRETenv {run} --json out.json --html out.html -- sh -c "
                f"'env; echo \"RuntimeError: Authorization:Bearer{JWT} {AWS_ID}\"; exit 1' "
                "--password SEKRETargv", "a crashing job that dumps its env and a bearer "
                "token: reports masked, exit 1", (1,), secret=True, secret_files_only=True))
    add(Attempt("U17", f"{run} -- sh -c 'printf \"RuntimeError: \\033[2Jx\\n\" >&2; exit 1'",
                "a crash line with ESC[2J: the triage view shows it escaped", (1,),
                checks=[_triage_escaped]))
    add(Attempt("U18", f"{run} -- sh -c 'exit 300'", "exit 300 (sh: 44)", (44,)))
    add(Attempt("U19", "$D run --no-watch --run-dir /dev/null -- true", "--run-dir a file",
                (2, 3)))
    add(Attempt("U20", f"{run} -- true 0<&-", "stdin closed", (0,)))

    # --- C: check (numbers only, plus one short real run)
    for j, opt in enumerate(["--deadline nan", "--deadline 0", "--max-bytes 1e30G",
                             "--max-bytes nanM", "--expect-busbw inf", "--expect-busbw -5",
                             "--probe ../../etc", "--nproc 1025",
                             "--nnodes 2 --rdzv-endpoint $'\\x1b[2J:1'"]):
        esc = "x1b" in opt  # a host name that cannot resolve: one line, exit 3
        add(Attempt(f"C{j:02d}", f"$D check {opt}", f"check {opt}: exit 2 before any rank"
                    + (" (or 3: the host cannot be reached)" if esc else ""),
                    (2, 3) if esc else (2,), checks=[faster_than(40 if esc else 15)],
                    escapes=esc, timeout=60))
    add(Attempt("C09", f"MY_NOTE={AWS_ID} API_TOKEN=SEKRETtok $D check --nproc 1 --probe env "
                "--deadline 40 --json out.json --html out.html", "one real 1-rank env check: "
                "secret env values masked", (0, 1), secret=True, timeout=90))

    # --- X: train (numbers and paths only; one dry run)
    for j, opt in enumerate(["--steps 0", "--lr nan", "--clip inf", "--topk-ratio nan",
                             "--pg-timeout nan", "--inject nan@99999:1", "--inject crash@1:1e3",
                             "--checkpoint-dir /proc --save-every 1",
                             "--strategy 'ddp;rm -rf /'", "--nproc 0"]):
        add(Attempt(f"X{j:02d}", f"$D train {opt} --dry-run", f"train {opt}: exit 2, nothing "
                    "launched", (2,), checks=[faster_than(20)]))
    add(Attempt("X10", "$D train --dry-run --json-log fifo --html out.html",
                "train --dry-run with a FIFO json-log: nothing written, no hang", (0, 2),
                fifo("fifo"), [faster_than(20)]))

    # --- S: scale
    for j, opt in enumerate(["--nproc-list 0,1", "--nproc-list nan", "--nproc-list ''",
                             "--nproc-list 1,1e9", "--min-efficiency nan", "--run-timeout 0",
                             "--work-dir /dev/null"]):
        add(Attempt(f"S{j:02d}", f"$D scale {opt} -- true", f"scale {opt}: one line, exit 2"
                    + (" (or 3: cannot create it)" if "work-dir" in opt else ""),
                    (2, 3) if "work-dir" in opt else (2,), checks=[faster_than(20)]))
    add(Attempt("S07", "$D scale --nproc-list 1,2 --steps 2 --warmup-steps 0 --run-timeout 20 "
                "-- ./no-such-cmd", "scale of a command that does not exist: 3, one line",
                (3,), checks=[faster_than(40)], timeout=60))
    add(Attempt("S08", "$D scale --nproc-list 1,2 --steps 2 --warmup-steps 0 --run-timeout 20 "
                "--json out.json -- sh -c 'echo ddpdoctor-throughput: nan samples/s; "
                "echo ddpdoctor-throughput: -1e400 samples/s'", "NaN and -inf throughput "
                "lines", (1, 3), checks=[faster_than(60), _finite_json], timeout=90))
    return a


def _deep_world(depth: int) -> str:
    world = '{"a":' * depth + "1" + "}" * depth
    return json.dumps(report_json()).replace('"world": {}', '"world": ' + world)


def _touch(p: Path) -> Path:
    p.touch()
    return p


def _read(p: Path) -> str:
    return p.read_text(errors="replace") if p.exists() else ""


def _finite_json(r: Result) -> str | None:
    """A JSON report holds no NaN/Infinity (not JSON; strict parsers refuse it)."""
    texts = [_read(r.work / "out.json")]
    if r.out.lstrip().startswith("{"):
        texts.append(r.out)
    for t in texts:
        if t and any(bad in t for bad in ("NaN", "Infinity")):
            return "JSON report holds NaN/Infinity"
    return None


def _triage_escaped(r: Result) -> str | None:
    """run's own report lines (after the job's output) must not carry the raw ESC."""
    tail = r.out.split("ddpdoctor run", 1)[-1] if "ddpdoctor run" in r.out else ""
    return "raw ESC in run's report view" if "\x1b[2J" in tail else None


# ---------------------------------------------------------------- running

def _prepare_ro(w: Path) -> None:
    ro = w / "ro"
    ro.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "ro,size=1m", "tmpfs", str(ro)],
                   capture_output=True)


def _execute(at: Attempt, work: Path, env: dict[str, str]) -> tuple[int | None, bytes, bytes]:
    p = subprocess.Popen(["bash", "-c", at.cmd], cwd=work, env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         stdin=None if "<" in at.cmd else subprocess.DEVNULL,
                         start_new_session=True)
    try:
        out_b, err_b = p.communicate(timeout=at.timeout)
        return p.returncode, out_b, err_b
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        out_b, err_b = p.communicate()
        return None, out_b, err_b


def _execute_tty(at: Attempt, work: Path, env: dict[str, str]
                 ) -> tuple[int | None, bytes, bytes]:
    """stdout on a pseudo-terminal: what a user at a terminal would get."""
    master, slave = pty.openpty()
    p = subprocess.Popen(["bash", "-c", at.cmd], cwd=work, env=env, stdout=slave,
                         stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # EIO: the child side closed
            break
        if not b:
            break
        chunks.append(b)
    rc: int | None
    try:
        rc = p.wait(at.timeout)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        rc = None
    err_b = p.stderr.read() if p.stderr else b""
    os.close(master)
    return rc, b"".join(chunks), err_b


def _problems(at: Attempt, r: Result) -> list[str]:
    """Every guarantee this attempt broke (empty: it held)."""
    problems = []
    if r.rc is None:
        problems.append(f"no end within {at.timeout:.0f} s")
    elif r.rc not in at.codes:
        problems.append(f"exit {r.rc}, expected {'/'.join(map(str, at.codes))}")
    # ddpdoctor's own traceback (a job's or a quoted log's is not one)
    own = f'File "{ROOT / "ddpdoctor"}'
    if own in r.err or own in r.out or (
            "Traceback (most recent call last)" in r.err and "run " not in at.cmd):
        problems.append("traceback")
    problems += [why for c in at.checks if (why := c(r))]
    if at.secret:
        places = {} if at.secret_files_only else {"stdout": r.out, "stderr": r.err}
        for p_ in r.work.iterdir():
            if p_.suffix in (".json", ".html") and p_.is_file() and not p_.name.startswith(
                    ("sec", "ok")):
                places[p_.name] = p_.read_text(errors="replace")
        leaked = [name for name, t in places.items() if "SEKRET" in t]
        if leaked:
            problems.append("secret reached " + ", ".join(leaked))
    if at.escapes:
        raw = [repr(s) for s in ESC_SEQS if s in r.out or s in r.err]
        if raw:
            problems.append("raw " + " ".join(raw) + " reached the terminal")
    return problems


def run_one(at: Attempt, base: Path) -> tuple[Result, str]:
    work = base / at.id
    work.mkdir(parents=True)
    if " ro/" in at.cmd:
        _prepare_ro(work)
    if at.setup:
        at.setup(work)
    env = {**os.environ, "D": DDP, "PY": PY, "TMPDIR": str(work), **at.env}
    env.pop("DDPDOCTOR_DEBUG", None)
    start = time.monotonic()
    rc, out_b, err_b = (_execute_tty if at.tty else _execute)(at, work, env)
    r = Result(rc, out_b.decode("utf-8", "replace"), err_b.decode("utf-8", "replace"),
               time.monotonic() - start, work)
    problems = _problems(at, r)
    if at.after:
        at.after(work)
    verdict = "held" if not problems else "BROKEN: " + "; ".join(problems)
    return r, verdict


def first_line(text: str) -> str:
    for line in text.splitlines():
        if line.strip():
            return line.strip()
    return ""


def _cell(s: str, n: int = 110) -> str:
    s = s.encode("unicode_escape").decode("ascii") if any(
        ord(c) < 32 or 0x7f <= ord(c) < 0xa0 or 0x2000 <= ord(c) < 0x2070 for c in s) else s
    s = s.replace("|", "\\|")
    return s if len(s) <= n else s[:n] + "…"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", default="", help="run attempts whose id starts with this")
    ap.add_argument("--markdown", default=None, help="write the table here")
    ap.add_argument("--keep", action="store_true", help="keep the work directories")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(prefix="ddpdoctor-attack-"))
    rows = []
    broken = 0
    try:
        for at in attempts():
            if args.only and not any(at.id.startswith(o) for o in args.only.split(",")):
                continue
            try:
                r, verdict = run_one(at, base)
            except Exception as e:  # the harness itself failed: say so, go on
                end_kept(base)
                r, verdict = Result(None, "", "", 0.0, base), f"harness error: {e!r}"
            broken += verdict != "held"
            err1 = first_line(r.err)
            rows.append((at.id, at.cmd, at.expect, r.rc, err1, verdict, r.elapsed))
            print(f"{at.id:4} rc={r.rc!s:4} {r.elapsed:6.1f}s {verdict[:150]}  | "
                  f"{_cell(err1, 90)}", flush=True)
            if not args.keep:
                for m in (base / at.id / "ro",):
                    subprocess.run(["umount", str(m)], capture_output=True)
                shutil.rmtree(base / at.id, ignore_errors=True)
    finally:
        if not args.keep:
            shutil.rmtree(base, ignore_errors=True)
    print(f"\n{len(rows)} attempts: {len(rows) - broken} held, {broken} broken")
    if args.markdown:
        with open(args.markdown, "w") as f:
            f.write("| # | attempt | expected | exit | first stderr line | result |\n")
            f.write("|---|---|---|---|---|---|\n")
            for rid, cmd, expect, rc, err1, verdict, _el in rows:
                f.write(f"| {rid} | `{_cell(cmd, 120)}` | {_cell(expect)} | {rc} | "
                        f"{_cell(err1, 90) or '—'} | {_cell(verdict, 120)} |\n")
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
