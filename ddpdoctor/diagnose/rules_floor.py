"""The floor's rule: failure evidence no signature explained becomes an error finding.

Runs after every other rule and only when none of them found an error: a log whose job
failed is never "healthy", whatever words it failed in. The finding is decided by the
family of the evidence (diagnose/floor.py), in the order one fault causes the next: a GPU
that fell off the bus kills its process; a kill for memory is an OOM; a loss scale that
collapsed is the numbers; then a death by signal; then a library's own error line;
then a bare non-zero exit.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.floor import Evidence
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, cut, fmt, verdict

_SIGKILL_HINT = ("a SIGKILL that no line explains is most often the host's OOM killer "
                 "(check `dmesg -T | grep -i -B5 'killed process'` on that node) or the "
                 "scheduler enforcing a limit")


def _q(text: str, n: int) -> str:
    """A log line quoted in a title: its runs of spaces (column padding) made one."""
    return cut(" ".join(text.split()), n)


def _who(evs: list[Event]) -> str:
    ranks = fmt(evs)
    return f"rank {ranks}" if ranks else "a worker"


def _hardware(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    bad = [e for e in hits if e.data.get("evidence") == Evidence.HARDWARE.value]
    if not bad:
        return None
    return verdict(ix, "GPU_HEALTH", f"a GPU or its bus failed: {_q(bad[0].text, 160)}", bad,
                   {"evidence_kind": Evidence.HARDWARE.value,
                    "hint": "the GPU is unreachable or its PCIe link reports errors: drain "
                            "the node; `nvidia-smi -q` and `dmesg` on it say which device"})


def _oom(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    bad = [e for e in hits if e.data.get("oom")]
    if not bad:
        return None
    return verdict(ix, "OOM", f"{_who(bad)} was killed for memory: {_q(bad[0].text, 160)}",
                   bad, {"evidence_kind": bad[0].data["evidence"],
                         "hint": "the host or the container ran out of RAM (not GPU memory): "
                                 "fewer DataLoader workers, smaller host-side buffers, "
                                 "CPU offload off, or a larger memory limit"})


def _nonfinite(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    bad = [e for e in hits if e.data.get("evidence") == Evidence.NONFINITE.value]
    if not bad:
        return None
    what = ("the dynamic loss scale collapsed" if bad[0].data.get("pattern")
            == "numbers.loss_scale" else "a loss stopped being finite")
    return verdict(ix, "GRAD_NONFINITE", f"{what}: {_q(bad[-1].text, 160)}", bad,
                   {"evidence_kind": Evidence.NONFINITE.value})


def _bus_error(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    """SIGBUS in a training process is a mapped page that cannot be backed: in practice
    /dev/shm (DataLoader workers, NCCL's shared-memory transport) is full."""
    bad = [e for e in hits if e.data.get("signal") == "SIGBUS"]
    if not bad:
        return None
    return verdict(ix, "ENV_SHM_TOO_SMALL", f"{_who(bad)} died of a bus error (SIGBUS): "
                   f"shared memory (/dev/shm) most likely ran out ({_q(bad[0].text, 120)})",
                   bad, {"evidence_kind": bad[0].data["evidence"], "signal": "SIGBUS",
                         "hint": "in a container, /dev/shm is 64 MB by default: "
                                 "docker run --shm-size=16g (or --ipc=host)"})


def _killed(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    """SIGKILL is not something a process does to itself: with no error of its own in the
    log it is the kernel's (or the container's) OOM killer, by far the most common sender."""
    bad = [e for e in hits if e.data.get("signal") == "SIGKILL"]
    if not bad:
        return None
    return verdict(ix, "OOM", f"{_who(bad)} was killed (SIGKILL) with no error of its own: "
                   f"most likely the host's out-of-memory killer ({_q(bad[0].text, 120)})",
                   bad, {"evidence_kind": bad[0].data["evidence"], "signal": "SIGKILL",
                         "hint": _SIGKILL_HINT, "certainty": "likely"})


# a host this full when a process dies with no error of its own: the OOM killer's work
_HOST_MEMORY_FULL_PERCENT = 80.0


def _memory_full(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    """A death with no error of its own (no signal named: a launcher killing its workers,
    a bare exit) right after the job's last reading of host memory said it was nearly full:
    the kernel's OOM killer, whose SIGKILL the launcher's report does not name."""
    deaths = [e for e in hits if not e.data.get("signal")]
    if not deaths:
        return None
    first = deaths[0]
    before = [m for m in ix.of(K.HOST_MEMORY) if m.source == first.source
              and m.lineno < first.lineno]
    if not before or before[-1].typed("percent", float) < _HOST_MEMORY_FULL_PERCENT:
        return None
    last = before[-1]
    return verdict(ix, "OOM", f"{_who(deaths)} died with no error of its own just after the "
                   f"host's memory was {last.data['percent']:g}% used ({_q(last.text, 100)}): "
                   "most likely the host's out-of-memory killer", [last, *deaths],
                   {"evidence_kind": first.data["evidence"], "host_memory": last.where,
                    "hint": _SIGKILL_HINT, "certainty": "likely"})


def _signal_death(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    bad = [e for e in hits if e.data.get("signal")]
    if not bad:
        return None
    e = bad[0]
    sig = e.data["signal"]
    # SIGKILL never gets here: _killed, earlier in FAMILIES, takes every one
    ev: dict[str, object] = {"evidence_kind": e.data["evidence"], "signal": sig}
    return verdict(ix, "RANK_CRASHED", f"{_who(bad)} died of {sig} "
                   f"({e.data['evidence']}, {e.where})", bad, ev)


def _said_as(evidence: Evidence, what: str, hint: str,
             ) -> Callable[[EventIndex, list[Event]], Verdict | None]:
    """The family of one kind of evidence said as it is: ``what`` and the first line."""
    def family(ix: EventIndex, hits: list[Event]) -> Verdict | None:
        bad = [e for e in hits if e.data.get("evidence") == evidence.value]
        if not bad:
            return None
        return verdict(ix, "UNRECOGNIZED_FAILURE", f"{what} that no known signature "
                       f"explains: {_q(bad[0].text, 160)}", bad,
                       {"evidence_kind": evidence.value, "hint": hint})
    return family


_library_error = _said_as(
    Evidence.LIBRARY_ERROR, "a communication library reported an error",
    "search the library's issues (NCCL, Open MPI, the NIC driver) for this line with your "
    "versions; NCCL_DEBUG=INFO on every rank shows what preceded it")
_error_record = _said_as(
    Evidence.ERROR_RECORD, "a program logged an error",
    "the logger named in the record is the component that failed: its lines before this "
    "one say what it was doing")


def _exit_code(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    bad = hits
    if not bad:
        return None
    e = bad[0]
    code = e.data.get("exit_code")
    said = f" with exit code {code}" if code is not None else ""
    return verdict(ix, "UNRECOGNIZED_FAILURE",
                   f"{_who(bad)} failed{said}, and no line before it says why "
                   f"({e.data['evidence']}, {e.where})", bad,
                   {"evidence_kind": e.data["evidence"],
                    "hint": "the launcher saw the failure but the worker's own error is not "
                            "in this log: add the rank's own output (torchrun --tee 3 "
                            "--log-dir DIR, or the per-rank files) and run diagnose again"})


# What a cancelled job's launchers print as they stop its workers: not deaths of their own
TEARDOWN_PATTERNS = frozenset({"deepspeed.killing_subprocess"})
STOP_SIGNALS = frozenset({"SIGTERM", "SIGINT", "SIGCONT"})


def is_teardown(e: Event) -> bool:
    """A launcher stopping its workers (a floor line), not a death of their own."""
    return e.data.get("pattern") in TEARDOWN_PATTERNS or e.data.get("signal") in STOP_SIGNALS


def _bare_cancel(e: Event) -> bool:
    pattern = e.data.get("pattern")
    return (pattern == "slurm.cancelled" and "DUE TO" not in e.text
            or pattern == "slurm.job_state" and _state_of(e) == "CANCELLED")


def _cancelled(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    """slurm's `CANCELLED AT T` with no reason is `scancel` (a user, an admin, a workflow)
    or a stop the log does not show. With only the teardown that follows it (the launchers
    stopping their workers, SIGTERM), it is the job's end: before the trainer said it
    completed, the job did not finish, so it is a failure whose cause the log does not
    tell (a job cancelled because it hung reads the same as one cut on purpose); after
    the trainer said so, it is a warning. A reason (TIME LIMIT, NODE FAILURE, PREEMPTION)
    or any other failure line is not this."""
    cancels = [e for e in hits if _bare_cancel(e)]
    if not cancels or any(not _bare_cancel(e) and not is_teardown(e) for e in hits):
        return None
    first = cancels[0]
    done = _done_before(ix, first)
    said = ("after the trainer said it completed: a stop of what ran after it" if done else
            "before the job finished: stopped by `scancel` (a user, an admin, a workflow) "
            "or by something the log does not show; no rank reported a failure before it")
    return verdict(ix, "UNRECOGNIZED_FAILURE", f"the job was cancelled with no reason given "
                   f"({_q(first.text, 120)}) {said}", cancels,
                   {"evidence_kind": first.data["evidence"],
                    "hint": "if it was cancelled on purpose, nothing is wrong; if nobody "
                            "cancelled it: `sacct -j JOBID -o JobID,State,Reason` and the "
                            "scheduler's log say who did, and the ranks' last lines say "
                            "where they were (a job that stopped printing was likely hung)"},
                   severity="warning" if done else "")


_REASON = re.compile(r"DUE TO ([A-Z][A-Z ]+[A-Z])")
# seff's end state of a job the scheduler ended, as the reason slurmstepd's line gives
_STATE = re.compile(r"State: ([A-Z_]+)")
_STATE_REASON = {"TIMEOUT": "time limit", "NODE_FAIL": "node failure",
                 "PREEMPTED": "preemption", "DEADLINE": "deadline",
                 "BOOT_FAIL": "node failure at boot"}


def _state_of(e: Event) -> str:
    m = _STATE.search(e.text)
    return m.group(1) if m else ""


def _stop_reason(e: Event) -> str:
    """Why the scheduler ended the job, where the line says ('' where it does not)."""
    pattern = e.data.get("pattern")
    if pattern == "slurm.cancelled":
        m = _REASON.search(e.text)
        return m.group(1).lower() if m else ""
    if pattern == "slurm.job_state":
        return _STATE_REASON.get(_state_of(e), "")
    return ""


# reasons a scheduler gives for ending a job that did not end itself
_OUTSIDE = frozenset({"time limit", "preemption", "deadline"})


def stopped_from_outside(e: Event) -> bool:
    """The scheduler ended a job that was still running: a bare cancel, its time limit, a
    preemption, a deadline (not a node that failed, not the job's own failure)."""
    return e.kind is K.FLOOR and (_bare_cancel(e) or _stop_reason(e) in _OUTSIDE)


# a launch or a process group starting: a run after an earlier one's completion line
_STARTS = (K.LAUNCH_START, K.LAUNCH_LAYOUT, K.RANK_ANNOUNCE, K.NCCL_COMM_INIT)


def _done_before(ix: EventIndex, e: Event) -> bool:
    """The trainer said its training completed before ``e`` (in the same log), and no run
    started after that line (a second launch in one file that never finished is not)."""
    done = [d.lineno for d in ix.of(K.JOB_DONE) if d.source == e.source and d.lineno < e.lineno]
    return bool(done) and not any(s.source == e.source and max(done) < s.lineno < e.lineno
                                  for s in ix.of(*_STARTS))


def _scheduler_stop(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    """slurm's `CANCELLED AT T DUE TO TIME LIMIT` (or PREEMPTION, NODE FAILURE; seff's
    `State: TIMEOUT` and the like), with only the teardown after it: the scheduler ended
    the job for the reason it gives; the next step reads the reason. After the trainer
    said it completed, what the scheduler stopped ran after the training: a warning."""
    stops = [e for e in hits if _stop_reason(e)]
    if not stops or any(e not in stops and not is_teardown(e) for e in hits):
        return None
    why = _stop_reason(stops[0])
    done = _done_before(ix, stops[0])
    after = " after the trainer said it completed: a stop of what ran after it" if done else ""
    return verdict(ix, "UNRECOGNIZED_FAILURE", f"the scheduler stopped the job ({why}): "
                   f"{_q(stops[0].text, 120)}{after}", stops,
                   {"evidence_kind": stops[0].data["evidence"],
                    "hint": "the ranks' last lines say how far it got: resume from the last "
                            "checkpoint with more time, or save more often"
                            if why == "time limit" else
                            "the scheduler's own reason: `sacct -j JOBID -o "
                            "JobID,State,Reason,NodeList` says more"},
                   severity="warning" if done else "")


def is_refused(e: Event) -> bool:
    """A scheduler's refusal to start a step (srun / salloc / sbatch): nothing of it ran."""
    return e.kind is K.FLOOR and e.data.get("pattern") == "slurm.allocation_refused"


def _refused(ix: EventIndex, hits: list[Event]) -> Verdict | None:
    """The scheduler would not start the step: no rank ran, so no rank failed; what to fix
    is the request (a time limit, a partition, an account, a size the policy allows)."""
    refused = [e for e in hits if is_refused(e)]
    if not refused:
        return None
    return verdict(ix, "UNRECOGNIZED_FAILURE", f"the scheduler refused to start the job step "
                   f"({_q(refused[0].text, 160)}): nothing of it ran", refused,
                   {"evidence_kind": refused[0].data["evidence"],
                    "family": "allocation_refused",
                    "hint": "the lines above it from the scheduler say which rule the request "
                            "broke (a time limit it requires, -t; a partition, -p; an "
                            "account, -A; more nodes or GPUs than allowed)"}, ranks=[])


# The families, the cause before its effect.
FAMILIES: tuple[Callable[[EventIndex, list[Event]], Verdict | None], ...] = (
    _refused, _cancelled, _scheduler_stop, _hardware, _oom, _nonfinite, _bus_error, _killed,
    _memory_full, _signal_death, _library_error, _error_record, _exit_code)


def floor(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    if any(v.finding.severity == "error" or v.finding.evidence.get("after_completion")
           for v in earlier):
        return []
    hits = list(ix.of(K.FLOOR))
    if any(v.finding.evidence.get("stopped_by") for v in earlier):
        # a stop a rule already said (an interrupt): the launcher's teardown is that stop
        hits = [e for e in hits if not is_teardown(e)]
    for family in FAMILIES:
        found = family(ix, hits)
        if found is not None:
            return [found]
    return []


RULE = Rule("floor", floor, folds=frozenset({K.FLOOR}))
