"""Everything two processes agree on, defined once: environment variables, the run directory
layout and its file names, store keys and schema versions.

The writer and the reader of each name import it from here; docs/design.md ("Contracts") is
generated from this module (``python -m ddpdoctor.core.contract``) and tests/unit/test_docs.py
checks that the two agree. Nothing here imports anything heavier than the standard library:
the watch's sitecustomize and ``--help`` import it.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

ENV_PREFIX = "DDPDOCTOR_"


@dataclass(frozen=True)
class Contract:
    """One name two processes agree on: who writes it, who reads it, what it means."""

    name: str
    kind: str  # "env", "file", "store key", "schema", "thread name"
    writer: str
    reader: str
    meaning: str


# --- Environment variables ------------------------------------------------------------------
DEBUG = "DDPDOCTOR_DEBUG"
CHECK_RESULT = "DDPDOCTOR_CHECK_RESULT"
WATCH = "DDPDOCTOR_WATCH"
WATCH_PREFIX = "DDPDOCTOR_WATCH_"
WATCH_EVERY = "DDPDOCTOR_WATCH_EVERY"
WATCH_CHECKS = "DDPDOCTOR_WATCH_CHECKS"
WATCH_WARN = "DDPDOCTOR_WATCH_WARN"
WATCH_LINK_EVERY = "DDPDOCTOR_WATCH_LINK_EVERY"
WATCH_NONFINITE_OUTPUT = "DDPDOCTOR_WATCH_NONFINITE_OUTPUT"
EVENTS = "DDPDOCTOR_EVENTS"
HANG_TIMEOUT = "DDPDOCTOR_HANG_TIMEOUT"
HEARTBEAT_DIR = "DDPDOCTOR_HEARTBEAT_DIR"
FR_DIR = "DDPDOCTOR_FR_DIR"
RUN_ID = "DDPDOCTOR_RUN_ID"
TRAIN_MEMORY = "DDPDOCTOR_TRAIN_MEMORY"
METRICS_PORT = "DDPDOCTOR_METRICS_PORT"
METRICS_HOST = "DDPDOCTOR_METRICS_HOST"
PROFILE = "DDPDOCTOR_PROFILE"  # "START:STEPS": a torch.profiler window on every rank
METRICS_JOB = "DDPDOCTOR_METRICS_JOB"
SCALE_NPROC = "DDPDOCTOR_SCALE_NPROC"
SCALE_MODE = "DDPDOCTOR_SCALE_MODE"
SCALE_RANK_BATCH = "DDPDOCTOR_SCALE_RANK_BATCH"

# --- Run directory layout (``ddpdoctor run --log-dir``) ---------------------------------------
REPORT_FILE = "report.json"
REPORT_FILES = (REPORT_FILE, "ddpdoctor-report.json")  # what ``ddpdoctor report DIR`` reads
EVENTS_FILE = "watch-events.jsonl"
SERIES_FILE = "watch-series-rank{rank}.jsonl"
SERIES_GLOB = "watch-series-rank*.jsonl"
ATTACHED_FILE = "watch-attached-rank{rank}.json"
ATTACHED_GLOB = "watch-attached-rank*.json"
PROFILE_TRACE_FILE = "profile-rank{rank}.json"
PROFILE_TOP_FILE = "profile-top-rank{rank}.json"
PROFILE_TOP_GLOB = "profile-top-rank*.json"
FR_SUBDIR = "fr"
HEARTBEAT_SUBDIR = "heartbeat"
HEARTBEAT_FILE = "rank{rank}.json"
HEARTBEAT_GLOB = "rank*.json"
FR_DUMP_FILE = "ddpdoctor-fr-rank{rank}.json"
FR_DUMP_GLOB = "ddpdoctor-fr-rank*.json"
FR_READY_FILE = "ddpdoctor-fr-rank{rank}.ready"
FR_REQUEST_FILE = "ddpdoctor-fr.request"
STACKS_FILE = "ddpdoctor-stacks-rank{rank}.txt"
OOM_SNAPSHOT_FILE = "ddpdoctor-oom-rank{rank}-{time}.pickle"
REAPER_FILE = "reaper.json"
OUTPUT_LOG = "output.log"
RANK_LOG = "rank{rank}.log"
TRAIN_LOG_FILES = ("train.jsonl", "json-log.jsonl")

# --- Schemas ----------------------------------------------------------------------------------
REPORT_SCHEMA = "ddpdoctor.report/1"
EVENTS_SCHEMA = "ddpdoctor.event/1"
SERIES_SCHEMA = "ddpdoctor.watch-series/1"
HEARTBEAT_SCHEMA = "ddpdoctor.heartbeat/1"
REAPER_SCHEMA = "ddpdoctor.reaper/1"

# --- Store keys (the check launcher's TCPStore) -----------------------------------------------
PROGRESS_KEY = "ddpdoctor/progress/{rank}"
PRE_DONE_KEY = "ddpdoctor/pre_done/{rank}"
FN_DONE_KEY = "ddpdoctor/fn_done/{rank}"
CHECK_KEY = "ddpdoctor/check/{run}/{attempt}/{kind}/{rank}"  # kind: "pre" or "res"
# The socket mesh (check/mesh.py): {what} is "addr/<rank>" ("host:port node"), "addresses"
# (rank 0's JSON table of them all), "done" (a counter), "all_done" or "failed" (flags).
MESH_KEY = "ddpdoctor/mesh/{run}/{attempt}/{what}"
RANK_RESULT_FILE = "rank{rank}.pkl"  # the launcher's private result directory
RANK_PRE_FILE = "rank{rank}.pre"
# --- Store keys (the job's own TCPStore: ``run``'s job view, ``attach --job``) ---------------
JOBVIEW_PREFIX = "ddpdoctor.jobview/v1/"  # torchrun's keys never start with it

# --- Thread names (the OS-level name, /proc/PID/task/TID/comm: 15 bytes at most) ------------
# The watch's own threads inside a rank carry it, so that run can tell their CPU (a
# heartbeat, a Flight Recorder dump it asked for) from the training's work.
OWN_THREAD_PREFIX = "ddpdoctor"


def fr_dump_file(rank: int) -> str:
    """The Flight Recorder dump a rank writes into ``$DDPDOCTOR_FR_DIR``."""
    return FR_DUMP_FILE.format(rank=rank)


def heartbeat_file(rank: int) -> str:
    return HEARTBEAT_FILE.format(rank=rank)


def stacks_file(rank: int) -> str:
    return STACKS_FILE.format(rank=rank)


CONTRACTS: tuple[Contract, ...] = (
    Contract(DEBUG, "env", "user", "cli", "show the traceback of an unexpected error"),
    Contract(CHECK_RESULT, "env", "check --nnodes", "check worker (rank 0)",
             "write the JSON report here and exit 0"),
    Contract(WATCH, "env", "run", "watch's sitecustomize", "1: start the watch in every rank"),
    Contract(WATCH_EVERY, "env", "user, run", "watch", "steps between checks"),
    Contract(WATCH_CHECKS, "env", "user, run", "watch", "checks the watch runs"),
    Contract(WATCH_WARN, "env", "user, run", "watch", "warn instead of raise"),
    Contract(WATCH_LINK_EVERY, "env", "user, run", "watch", "steps between link probes"),
    Contract(WATCH_NONFINITE_OUTPUT, "env", "user, run", "watch",
             "check model outputs for NaN/inf"),
    Contract(EVENTS, "env", "run, train", "watch", "path of the events file"),
    Contract(HANG_TIMEOUT, "env", "user, run", "watch", "seconds without progress = hang"),
    Contract(HEARTBEAT_DIR, "env", "run", "watch, attach, run",
             "directory of per-rank heartbeats"),
    Contract(FR_DIR, "env", "run", "watch, attach", "directory of Flight Recorder dumps"),
    Contract(RUN_ID, "env", "run", "run (reaper)", "marks every process of one job"),
    Contract(TRAIN_MEMORY, "env", "plan's verification, user", "train",
             "1: measure the bytes of the last step on every rank"),
    Contract(METRICS_PORT, "env", "run --metrics-port, user", "watch",
             "serve Prometheus metrics on this port + LOCAL_RANK"),
    Contract(PROFILE, "env", "run --profile, user", "watch",
             "START:STEPS: profile steps START..START+STEPS-1 on every rank"),
    Contract(PROFILE_TRACE_FILE, "file", "watch", "the user (chrome://tracing, Perfetto)",
             "a rank's torch.profiler trace of the --profile window"),
    Contract(PROFILE_TOP_FILE, "file", "watch", "run",
             "a rank's top operators and step times of the --profile window "
             "(ddpdoctor/core/profiled.py)"),
    Contract(METRICS_HOST, "env", "run --metrics-host, user", "watch",
             "address the metrics bind (default 127.0.0.1)"),
    Contract(METRICS_JOB, "env", "user", "watch's Prometheus sink", "the job label"),
    Contract(SCALE_NPROC, "env", "scale", "the user's command", "the world size of this run"),
    Contract(SCALE_MODE, "env", "scale", "the user's command", "weak or strong"),
    Contract(SCALE_RANK_BATCH, "env", "scale", "the user's command",
             "the per-rank batch, when --batch-size / --global-batch was given"),
    Contract(REPORT_FILE, "file", "run", "report", "the JSON report of a run directory"),
    Contract(EVENTS_FILE, "file", "watch", "run, report", "one JSON event per line"),
    Contract(SERIES_FILE, "file", "watch", "report", "per-rank step series"),
    Contract(ATTACHED_FILE, "file", "watch", "run", "what a rank's watch watches, and how "
             "it attached (ddpdoctor/core/attachment.py)"),
    Contract(f"{HEARTBEAT_SUBDIR}/{HEARTBEAT_FILE}", "file", "watch", "run, attach, report",
             "a rank's last step, time, phase"),
    Contract(f"{FR_SUBDIR}/{FR_DUMP_FILE}", "file", "watch", "attach, run, report",
             "a rank's Flight Recorder dump"),
    Contract(f"{FR_SUBDIR}/{FR_READY_FILE}", "file", "watch", "attach",
             "this rank serves dumps on request"),
    Contract(f"{FR_SUBDIR}/{FR_REQUEST_FILE}", "file", "attach", "watch",
             "touched to ask every rank for a dump"),
    Contract(STACKS_FILE, "file", "watch", "attach, run", "Python stacks at a hang"),
    Contract(OOM_SNAPSHOT_FILE, "file", "watch", "the user", "CUDA memory snapshot at an OOM"),
    Contract(REAPER_FILE, "file", "run's reaper", "the user, report",
             "what the reaper ended after run was SIGKILLed"),
    Contract(OUTPUT_LOG, "file", "run", "diagnose, report", "the job's combined output"),
    Contract(RANK_LOG, "file", "run", "diagnose", "one rank's output lines"),
    Contract(REPORT_SCHEMA, "schema", "every command", "report, scripts", "report JSON"),
    Contract(EVENTS_SCHEMA, "schema", "watch", "run, report", "one events file line"),
    Contract(SERIES_SCHEMA, "schema", "watch", "report", "one series file line"),
    Contract(HEARTBEAT_SCHEMA, "schema", "watch", "run, attach", "a heartbeat file"),
    Contract(REAPER_SCHEMA, "schema", "run's reaper", "report", "the reaper's record"),
    Contract(PROGRESS_KEY, "store key", "check rank", "check launcher", "count:label reached"),
    Contract(PRE_DONE_KEY, "store key", "check rank", "check ranks",
             "pre-init evidence saved"),
    Contract(FN_DONE_KEY, "store key", "check rank", "check ranks",
             "the rank's function returned (or failed): peers may tear down"),
    Contract(CHECK_KEY, "store key", "check worker", "check worker (rank 0)",
             "a rank's pre-init data / result"),
    Contract(MESH_KEY, "store key", "check rank (mesh)", "check ranks (mesh)",
             "mesh addresses, the finished-ranks counter and the cut flag"),
    Contract(JOBVIEW_PREFIX + "*", "store key", "run (each node), attach --job",
             "run (the leader, each node)", "the job view: nodes, stacks, verdict"),
    Contract(OWN_THREAD_PREFIX + "*", "thread name", "watch (in each rank)",
             "run, attach --job (CPU of a rank)", "the watch's own threads: not the training"),
)


def markdown_table() -> str:
    """The "Contracts" table of docs/design.md."""
    lines = ["| name | kind | written by | read by | meaning |", "|---|---|---|---|---|"]
    for c in CONTRACTS:
        lines.append(f"| `{c.name}` | {c.kind} | {c.writer} | {c.reader} | {c.meaning} |")
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(markdown_table() + "\n")
