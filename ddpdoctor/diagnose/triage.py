"""Triage: events read from a crashed job's logs -> findings, root cause first.

When one rank dies, every other rank reports something too: gloo "Connection closed by
peer", NCCL watchdog timeouts, torchrun sending SIGTERM. Those lines are louder and more
numerous than the one that matters. Triage runs an ordered list of small rules (``RULES``)
over an immutable index of the events; each rule turns the events it knows into verdicts
and declares which kinds of events its finding explains (``folds``). What no verdict used
is folded into counts on the first finding. Rules marked ``alone`` (a timeout with no
culprit, an unreachable store) only run when nothing before them found a cause. A log
that shows a failure no rule explains gives UNRECOGNIZED_FAILURE: never "healthy"; the
floor (``rules_floor``, last) turns failure evidence of any wording into an error finding
when no rule found one.

Pure: a list of events in, a list of findings out; no files, no processes.
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import replace

from ddpdoctor.core.findings import Finding, Severity, format_ranks
from ddpdoctor.diagnose import (
    known_bugs,
    launches,
    rules_async,
    rules_census,
    rules_collective,
    rules_crash,
    rules_deepspeed,
    rules_env,
    rules_floor,
    rules_thread,
    rules_training,
    rules_versions,
)
from ddpdoctor.diagnose.events import CASCADE, WEAK, Event, EventKind
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, cut, ranks_of, verdict

RULES: tuple[Rule, ...] = ((known_bugs.RULE, rules_versions.RULE, rules_versions.PLUGIN_RULE,
                            rules_versions.DRIVER_RULE)
                           + rules_env.RULES + (rules_deepspeed.RULE,)
                           + rules_training.RULES + rules_collective.RULES
                           + (rules_thread.RULE, rules_async.RULE) + rules_crash.RULES
                           + rules_collective.ALONE[:1] + rules_crash.ALONE[:1]
                           + rules_collective.ALONE[1:] + rules_crash.ALONE[1:]
                           + (rules_census.RULE, rules_floor.RULE))

_LABELS = {
    EventKind.CONN_RESET: "'Connection reset by peer'",
    EventKind.CONN_CLOSED: "'Connection closed by peer'",
    EventKind.BROKEN_PIPE: "'Broken pipe'",
    EventKind.NCCL_REMOTE: "NCCL 'remote process exited or there was a network error'",
    EventKind.NCCL_SYSTEM: "NCCL 'unhandled system error'",
    EventKind.GLOO_TIMEOUT: "gloo collective timeout(s)",
    EventKind.NCCL_WATCHDOG: "NCCL watchdog timeout(s)",
    EventKind.CONN_REFUSED: "'Connection refused'",
    EventKind.CONNECT_TIMEOUT: "store connect timeout(s)",
    EventKind.STORE_TIMEOUT: "store wait timeout(s)",
    EventKind.CPP_ABORT: "C++ abort(s)",
    EventKind.DL_EXITED: "'DataLoader worker exited unexpectedly'",
    EventKind.EXCEPTION: "exception(s)",
    EventKind.ERROR_LINE: "c10d error line(s)",
    EventKind.NCCL_WARN: "NCCL WARN line(s)",
    EventKind.TRACEBACK: "other traceback(s)",
    EventKind.FLOOR: "launcher or failure report line(s)",
}
_CAUSE_BEFORE_EFFECT = [("ENV_SHM_TOO_SMALL", "DATALOADER_WORKER_FAILURE"),
                        ("OOM", "DATALOADER_WORKER_FAILURE"),
                        ("ENV_LIMITS", "DATALOADER_WORKER_FAILURE"),
                        ("DDP_UNUSED_PARAMETERS", "DDP_REDUCTION_NOT_FINISHED")]
_EFFECT_ORDER = {effect: 1 for _, effect in _CAUSE_BEFORE_EFFECT}
_SILENT_IN_FALLOUT = {EventKind.AGENT_FAILED, EventKind.NCCL_DETAIL}


def triage(events: Iterable[Event]) -> list[Finding]:
    """Findings for ``events`` (in log order), the first root cause first. A log of several
    launches whose last went on is that launch's findings, then the earlier failure's lead
    as a warning (launches.py)."""
    evs = list(events)
    parts = launches.split(evs)
    if parts is None:
        return _triage(evs)
    return _triage(list(parts.current)) + _earlier(parts)


def _earlier(parts: launches.Split) -> list[Finding]:
    lead = _triage(list(parts.earlier))[0]
    restarted = bool(parts.start.data.get("restart"))
    what = "attempt" if restarted else "launch"
    went_on = (f"the {what} that followed ({parts.start.where}"
               + (": the elastic agent restarted the worker group" if restarted else "")
               + f") went on, {parts.progress} line(s) of progress and no failure")
    return [replace(lead, severity="warning",
                    title=f"an earlier {what} in this log failed: {lead.title}; {went_on}",
                    evidence={**lead.evidence, "earlier_launch": True,
                              "later_launch": parts.start.quote()})]


def _triage(events: list[Event]) -> list[Finding]:
    ix = EventIndex.build(events)
    verdicts: list[Verdict] = []
    folds: set[EventKind] = set(CASCADE) | {EventKind.FLOOR}
    broken: list[str] = []
    for rule in RULES:
        if rule.alone and verdicts:
            continue
        try:
            found = [_as_logged(ix, v) for v in rule.run(ix, tuple(verdicts))]
        except Exception as e:  # one rule's bug must not lose what the others found
            broken.append(f"{rule.name}: {type(e).__name__}: {e}")
            continue
        if found:
            folds |= rule.folds
        verdicts.extend(found)
    # a framework's advice comes after every finding of what went wrong, warnings first
    advice = [v.finding for v in sorted(rules_training.advice(ix, tuple(verdicts)),
                                        key=lambda v: (v.finding.severity == "info", v.first))]
    if not verdicts:
        unknown = unrecognized(ix)
        if unknown is None:
            return _rules_broken(broken) + advice
        verdicts = [unknown]
    findings = _one_process_hint(ix, _ordered(ix, _same_failure_merged(verdicts), folds))
    if broken:
        findings[0].evidence["rule_errors"] = broken
    # advice follows what went wrong, and leads what is only said (a job stopped by hand)
    said = [f for f in findings if f.severity == "info"]
    return [f for f in findings if f.severity != "info"] + advice + said


def _rules_broken(broken: list[str]) -> list[Finding]:
    """A rule that raised on a log where no other rule found anything: what it would have
    said is not known, so the log is not called clean (a bug in ddpdoctor: reported)."""
    if not broken:
        return []
    return [Finding("UNRECOGNIZED_FAILURE", "ddpdoctor could not read this log completely: "
                    f"a rule of its own failed ({broken[0]}); what it would have found is "
                    "not known (a bug in ddpdoctor: please report it with the log)",
                    evidence={"rule_errors": broken}, severity="warning")]


# lines a job printed after a retried connect's warning: it got through (an excerpt that
# ends at the warning may be a connect that never did)
WENT_ON_AFTER = 5


def _as_logged(ix: EventIndex, v: Verdict) -> Verdict:
    """An error resting only on records their library logged as warnings and retried
    (c10d's "[W socket.cpp] ... failed to connect"), in a log where nothing else failed and
    the job printed on after the last of them, is a warning: a connect that never got
    through ends the log there, or says so in an error or an exception."""
    if v.finding.severity != "error" or not v.events \
            or any(e.data.get("level") != "W" for e in v.events) \
            or any(e.is_failure and e.data.get("level") != "W" for e in ix.events) \
            or min(e.get_int("tail", 0) for e in v.events) < WENT_ON_AFTER:
        return v
    v.finding.severity = "warning"
    v.finding.title += (" (logged as a warning, and retried: the job printed on after it "
                        "and nothing failed)")
    v.finding.evidence.setdefault("logged_as", "warning: the library went on (it retries "
                                  "a connect); an error or exception would follow a failure")
    return v


_ONE_PROCESS_HINT = (
    "torch.nn.DataParallel ran this job: one process drives every GPU and gathers the "
    "outputs on the first (where memory runs out first); started with a launcher "
    "(torchrun, accelerate launch, deepspeed) the same script runs one process per GPU "
    "(DistributedDataParallel)")


def _one_process_hint(ix: EventIndex, findings: list[Finding]) -> list[Finding]:
    """The lead finding of a DataParallel job says what the job was: the usual fix of such
    a failure is the launch, not the line that failed."""
    seen = ix.of(EventKind.ONE_PROCESS)
    if seen and findings and findings[0].severity == "error":
        findings[0].evidence.setdefault("one_process", f"{seen[0].where}: {_ONE_PROCESS_HINT}")
    return findings


def unrecognized(ix: EventIndex) -> Verdict | None:
    """The first line that shows a failure, when no rule knows what it means."""
    failures, severity = _failure_lines(ix)
    if not failures:
        return None
    root = next((e for e in failures if e.kind is EventKind.EXCEPTION),
                next((e for e in failures if e.kind is EventKind.TRACEBACK), failures[0]))
    who = f"rank {root.rank}" if root.rank is not None else "the job"
    where = root.get_str("where") or root.get_str("raised_at")
    if root.kind is EventKind.TRACEBACK and root.rank is not None and severity == "error":
        return _unread_exception(ix, root, where, failures)
    at = f" (at {where})" if where else ""
    ev = {"root_line": root.quote(), "hint": (
        "ddpdoctor knows no signature for this error text: the playbook shows how to read "
        "the log by hand; adding a Signature to ddpdoctor/diagnose/kb teaches it")}
    text = " ".join(root.text.split())  # a progress bar's padding is no part of a title
    title = (f"{who} failed: {cut(text, 200)}{at}" if severity == "error" else
             f"{who} printed a warning ddpdoctor does not recognise (healthy jobs print some "
             f"too): {cut(text, 200)}")
    return verdict(ix, "UNRECOGNIZED_FAILURE", title,
                   [root] + [e for e in failures if e is not root][:5], ev,
                   ranks=[root.rank] if root.rank is not None else [], severity=severity)


def _failure_lines(ix: EventIndex) -> tuple[list[Event], Severity]:
    """The lines that show a failure (error), else only lines healthy jobs print too:
    said as a warning."""
    failures = [e for e in ix.events if e.is_failure]
    if failures:
        return failures, "error"
    return [e for e in ix.events if e.kind in WEAK], "warning"


def _unread_exception(ix: EventIndex, root: Event, where: str,
                      failures: list[Event]) -> Verdict:
    """A rank's own traceback whose exception line could not be read (the log was cut
    there, or the class names no Error/Exception): that rank raised, where its frames say
    (the convention for a rank's own exception)."""
    return verdict(ix, "RANK_CRASHED", f"rank {root.rank} raised"
                   + (f" at {where}" if where else "") + ": an exception whose line "
                   "ddpdoctor could not read (cut from the log, or a class that names no "
                   "Error/Exception)", [root] + [e for e in failures if e is not root][:5],
                   {"root_line": root.quote(), "hint": "the rank's last lines name the "
                    "exception; adding a Signature to ddpdoctor/diagnose/kb teaches a new "
                    "one"}, ranks=[root.rank] if root.rank is not None else [])


# what differs between ranks' copies of one error: numbers, and ids (a uuid, a hash)
_NUMBERS = re.compile(r"[0-9a-fA-F]{8,}(?:-[0-9a-fA-F]{4,})*|\d+")


def _failure_shape(v: Verdict) -> tuple[str, str, str] | None:
    """What makes two ranks' findings one failure: the id, the exception with its numbers
    and ids folded (GPU 0 and GPU 1 out of memory), where it was raised. None: not one
    rank's error."""
    f = v.finding
    exc = f.evidence.get("exception")
    if f.severity != "error" or len(f.ranks) != 1 or not isinstance(exc, str) or not exc:
        return None
    return f.id, _NUMBERS.sub("#", exc), str(f.evidence.get("where", ""))


def _same_failure_merged(verdicts: list[Verdict]) -> list[Verdict]:
    """The same failure raised on several ranks (each its own OOM, each the same
    KeyError) is one finding naming every one of them, not one finding per rank."""
    shaped = [(v, _failure_shape(v)) for v in verdicts]
    groups: dict[tuple[str, str, str], list[Verdict]] = defaultdict(list)
    for v, shape in shaped:
        if shape is not None:
            groups[shape].append(v)
    out: list[Verdict] = []
    for v, shape in shaped:
        group = groups[shape] if shape is not None else [v]
        if len(group) == 1:
            out.append(v)
        elif v is group[0]:
            out.append(_merged(group))
    return out


def _merged(group: list[Verdict]) -> Verdict:
    lead = min(group, key=lambda v: v.first)
    ranks = sorted({r for v in group for r in v.finding.ranks})
    own = f"rank {lead.finding.ranks[0]} "
    title = lead.finding.title
    if title.startswith(own):
        title = f"rank {format_ranks(ranks)} " + title[len(own):]
    others = [v.finding.evidence.get("first_seen") for v in group if v is not lead]
    evidence = {**lead.finding.evidence,
                "also_raised_at": [w for w in others if isinstance(w, str)]}
    finding = replace(lead.finding, title=title, ranks=ranks, evidence=evidence)
    events = tuple(e for v in group for e in v.events)
    return Verdict(finding, events, lead.first)


def _ordered(ix: EventIndex, verdicts: list[Verdict], folds: set[EventKind]) -> list[Finding]:
    """Root causes in the order they happened; torchrun's first failure leads.

    The cascade (events no finding used) is folded into counts on the first finding.
    """
    firsts = {v.finding.id: v.first for v in verdicts}
    starts = {id(v): v.first for v in verdicts}
    for cause, effect in _CAUSE_BEFORE_EFFECT:
        # Findings of one fault stay together, the cause first (shm ran out, so the
        # DataLoader worker died), whichever line came first in the log.
        if cause in firsts and effect in firsts:
            for v in verdicts:
                if v.finding.id == cause:
                    starts[id(v)] = min(firsts[cause], firsts[effect])
    root_rank = ix.root_rank

    def key(v: Verdict) -> tuple[int, int, int, int]:
        leads = (root_rank is not None and root_rank in v.finding.ranks) \
            or v.finding.id == "KNOWN_UPSTREAM_BUG"
        # a failure leads what only may have hurt (a warning the job went on from)
        return (0 if v.finding.severity == "error" else 1, 0 if leads else 1, starts[id(v)],
                _EFFECT_ORDER.get(v.finding.id, 0))

    ordered = sorted(verdicts, key=key)
    fallout, unexplained = _fallout(ix, verdicts, folds)
    if fallout:
        ordered[0].finding.evidence["fallout"] = fallout
    if unexplained:
        ordered[0].finding.evidence["also_in_logs"] = unexplained
    return [v.finding for v in ordered]


def _fallout(ix: EventIndex, verdicts: list[Verdict], folds: set[EventKind]
             ) -> tuple[list[str], list[str]]:
    taken = {id(e) for v in verdicts for e in v.events}
    groups: dict[EventKind, list[Event]] = defaultdict(list)
    unexplained: list[str] = []
    for e in ix.events:
        if id(e) in taken or not (e.is_failure or e.kind in WEAK) \
                or e.kind in _SILENT_IN_FALLOUT:
            continue
        if e.kind is EventKind.TORCHRUN_FAILURE and e.data.get("first"):
            continue
        if e.kind in folds or e.kind in (EventKind.TORCHRUN_FAILURE, EventKind.STORE_TIMEOUT):
            groups[e.kind].append(e)
        elif len(unexplained) < 6:
            unexplained.append(e.quote(200))
    out = []
    for kind, evs in groups.items():
        ranks = ranks_of(evs)
        on = f" on rank {format_ranks(ranks)}" if ranks else ""
        count = sum(1 + e.repeats for e in evs)
        if kind is EventKind.TORCHRUN_FAILURE:
            sigs = sorted({e.get_str("signal") or str(e.data.get("exit_code")) for e in evs})
            out.append(f"torchrun then stopped rank {format_ranks(ranks)} "
                       f"({', '.join(sigs)}): fallout")
            continue
        verb = "was" if count == 1 else "were"
        out.append(f"{count} {_LABELS.get(kind, kind.value.replace('_', ' '))}{on} {verb} "
                   f"fallout (first at {evs[0].where})")
    return out, unexplained
