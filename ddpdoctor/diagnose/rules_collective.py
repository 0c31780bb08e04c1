"""Triage rules for collectives: mismatches, named culprits, and the rank that stayed silent."""

from __future__ import annotations

import re

from ddpdoctor.core.findings import format_ranks
from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import (
    MAIN_FIRST_HINT,
    WAITING_FRAME,
    EventIndex,
    Rule,
    Verdict,
    fmt,
    on_rank,
    rank_or,
    ranks_of,
    verdict,
)

_TIMEOUTS = frozenset({K.NCCL_WATCHDOG, K.GLOO_TIMEOUT, K.NCCL_WORK_STATE, K.ERROR_LINE,
                       K.CPP_ABORT, K.EXCEPTION, K.CONN_RESET, K.CONN_CLOSED, K.AGENT_FAILED,
                       K.BARRIER_PEER_ERROR, K.STORE_TIMEOUT, K.DESYNC_HEADER,
                       K.DESYNC_TIMEOUT_AT, K.DESYNC_STARTED})


def _detail_verdict(ix: EventIndex, detail: list[Event]) -> Verdict:
    """A check that compared the ranks' collectives said they differ: torch's fingerprint
    (each rank's op and shape), NCCL's ("at and around rank N"), or a library's own."""
    # rank -> the parts of its fingerprint (kb/c10d.py: _fingerprint)
    colls: dict[str, dict[str, str | int]] = {}
    for e in detail:
        for r, fp in (e.typed("collectives", dict) if "collectives" in e.data else {}).items():
            colls.setdefault(str(r), fp)
    around = [e.typed("around_rank", int) for e in detail if "around_rank" in e.data]
    if colls:
        desc = "; ".join(f"rank {r}: {fp.get('op', '?')} shape [{fp.get('shape', '')}]"
                         for r, fp in sorted(colls.items()))
        title = f"ranks called different collectives ({desc})"
        ranks = [int(r) for r in colls]
    elif around:
        title = (f"NCCL detected mismatched collectives at and around rank {around[0]}: "
                 "ranks call different collectives (or the same with different sizes)")
        ranks = around[:1]
    else:
        # a library's own cross-rank check (DeepSpeed's, accelerate's) caught it first
        ranks = sorted({r for e in detail for r in e.ints("disagreeing", [])})
        check = detail[0].get_str("check", "a cross-rank check")
        title = (f"{check} found the ranks disagree"
                 + (f" (rank {format_ranks(ranks)})" if ranks else "")
                 + ": they would call different collectives (or the same with different "
                 "sizes)")
    return verdict(ix, "HANG_COLLECTIVE_MISMATCH", title, detail,
                   {"collectives": colls} if colls else {}, ranks=ranks)


def mismatch(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    out = []
    detail = ix.of(K.MISMATCH_DETAIL)
    if detail:
        out.append(_detail_verdict(ix, detail))
    size = ix.of(K.SIZE_MISMATCH)
    if size:
        d = size[0].data
        ev: dict[str, object] = {"hint": "the ranks passed tensors of different sizes to the same "
                              "collective; rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to see "
                              "both shapes"}
        if d.get("received_bytes") is not None:
            ev.update(received_bytes=d["received_bytes"], expected_bytes=d["expected_bytes"])
        amounts = (f" (a transfer of {d['received_bytes']} bytes where "
                   f"{d['expected_bytes']} were expected)"
                   if d.get("received_bytes") is not None else "")
        where = f" (detected on rank {fmt(size)})" if fmt(size) else ""
        out.append(verdict(ix, "HANG_COLLECTIVE_MISMATCH",
                           "a collective received a different amount of data than it expected"
                           f"{amounts}{where}", size + ix.of(K.CPP_ABORT),
                           ev, ranks=ranks_of(size)))
    out.extend(_watchdog_fingerprints(ix) if not out else [])
    started = ix.of(K.DESYNC_STARTED)
    if len({e.data["op"] for e in started}) > 1 and not detail:
        minority = min(started, key=lambda e: len(e.ints("ranks")))
        out.append(verdict(
            ix, "HANG_COLLECTIVE_MISMATCH", "ranks are in different collectives: " + ", ".join(
                f"[{format_ranks(sorted(e.ints('ranks')))}] {e.data['op']}" for e in started),
            started + ix.of(K.DESYNC_TIMEOUT_AT),
            {"collectives": {format_ranks(sorted(e.ints("ranks"))): e.data["op"]
                             for e in started}}, ranks=minority.ints("ranks")))
    return out


_PG = re.compile(r"\[PG (?:ID )?(\S+)")
# the group c10d's log prefix names, one name across its ranks: "[PG ID 11 PG GUID 119 Rank
# 1]" (torch >= 2.4: the GUID is the group's name; the ID counts this rank's own groups),
# "[PG ID 0 PG GUID 0(default_pg) Rank 3]", "[PG 2 Rank 1]" (older)
_PG_NAME = re.compile(r"\[PG (?:ID \S+ PG GUID ([^\s(\]]+)|([^\s(\]]+))")


def group_of(e: Event) -> str | None:
    """The process group an NCCL line names, or None: sequence numbers and enqueued work
    count per group, so only lines of one group compare."""
    m = _PG_NAME.search(e.text)
    return (m.group(1) or m.group(2)) if m is not None else None


def _watchdog_fingerprints(ix: EventIndex) -> list[Verdict]:
    """Two ranks' watchdogs report the same sequence number of one process group as
    different collectives (op or element counts): the ranks called different collectives
    at that point, what torch's collective fingerprint check says with DETAIL on. The
    ranks of the rarer fingerprint are named when there is one."""
    by_seq: dict[tuple[str, int], dict[int, tuple[object, ...]]] = {}
    for e in ix.of(K.NCCL_WATCHDOG):
        if e.rank is None or "seq" not in e.data or "op" not in e.data:
            continue
        pg = _PG.search(e.text)
        fp: tuple[object, ...] = (e.data["op"], e.data.get("numel_in"), e.data.get("numel_out"))
        by_seq.setdefault((pg.group(1) if pg else "", e.typed("seq", int)), {})[e.rank] = fp
    for (_, seq), fps in sorted(by_seq.items(), key=lambda kv: kv[0][1]):
        if len(set(fps.values())) < 2:
            continue
        groups: dict[tuple[object, ...], list[int]] = {}
        for r, fp in sorted(fps.items()):
            groups.setdefault(fp, []).append(r)
        sizes = sorted(len(v) for v in groups.values())
        minority = min(groups.values(), key=len) if sizes[0] < sizes[1] else []
        desc = "; ".join(f"rank {format_ranks(rs)}: {_fp_text(fp)}" for fp, rs in groups.items())
        evs = [e for e in ix.of(K.NCCL_WATCHDOG) if e.data.get("seq") == seq]
        return [verdict(ix, "HANG_COLLECTIVE_MISMATCH",
                        f"the ranks' watchdogs timed out in different collectives at sequence "
                        f"number {seq} ({desc}): the ranks called different collectives",
                        evs, {"collectives": {format_ranks(rs): _fp_text(fp)
                                              for fp, rs in groups.items()}},
                        ranks=minority)]
    return _crossed_waits(ix) or _groups_apart(ix)


def _groups_apart(ix: EventIndex) -> list[Verdict]:
    """Every rank that timed out waits on a process group of its own: no two of them share
    a group, so no group shows a rank behind the others (sequence numbers count per group,
    never across them). Each rank waits in a collective on its group while the ranks it
    needs there are busy elsewhere: the ranks issued their groups' collectives in different
    orders, or two threads use one communicator at once (NVIDIA/nccl#1610). Said as seen:
    a rank outside these lines that left each of its groups waiting looks the same."""
    reporting = ix.of(K.NCCL_WATCHDOG, K.NCCL_WORK_STATE)
    groups: dict[int, set[str]] = {}
    for e in reporting:
        key = group_of(e)
        if e.rank is not None and key is not None:
            groups.setdefault(e.rank, set()).add(key)
    if len(groups) < 2 or any(len(g) != 1 for g in groups.values()) \
            or len({next(iter(g)) for g in groups.values()}) < len(groups) \
            or {e.rank for e in reporting} != set(groups):
        return []
    first = _first_timeouts(ix)
    where = []
    for r in sorted(groups):
        wd = first.get(r)
        state = next((e for e in reporting if e.rank == r), None)
        what = (f"{wd.data['op']} #{wd.data['seq']}" if wd is not None
                else f"work #{state.data['seq']}" if state is not None and "seq" in state.data
                else "a collective")
        where.append(f"rank {r}: {what} on group {next(iter(groups[r]))}")
    return [verdict(ix, "HANG_COLLECTIVE_MISMATCH",
                    f"the ranks timed out on different process groups ({'; '.join(where)}): "
                    "no two share a group, so none is behind the others in one; each waited "
                    "on its group for ranks busy on another", reporting,
                    {"groups": {str(r): next(iter(g)) for r, g in sorted(groups.items())},
                     "hint": "the ranks issue collectives on their groups in different orders "
                             "(a TP collective before a DP one on some ranks only), or two "
                             "threads use one communicator at once; a rank missing from "
                             "these lines that hung would leave each of its groups waiting "
                             "too: check its log. TORCH_DISTRIBUTED_DEBUG=DETAIL and the "
                             "flight recorder (TORCH_NCCL_TRACE_BUFFER_SIZE) show the order"},
                    ranks=[])]


def _crossed_waits(ix: EventIndex) -> list[Verdict]:
    """Every rank in the log timed out, and the ranks fall into groups each stuck in a
    collective of its own kind (op or element counts differ) at its own sequence number:
    one process group's collective completes on all its ranks or on none, so no rank can
    have passed another's stuck collective in the same group; each group waits in a
    collective the others never called (a rank that went to evaluation, logging or saving
    while another still trains; a batch whose modality takes another path). Ranks whose
    lines name different process groups are not compared: their numbers are not one
    sequence."""
    first = _first_timeouts(ix)
    others = {e.rank for e in ix.events if e.rank is not None} - set(first)
    if len(first) < 2 or others or not _one_group(ix) or not _states_cross(ix, first):
        return []
    fps = {r: (e.data["op"], e.data.get("numel_in"), e.data.get("numel_out"))
           for r, e in first.items()}
    groups: dict[tuple[int, tuple[object, ...]], list[int]] = {}
    for r, e in sorted(first.items()):
        groups.setdefault((e.typed("seq", int), fps[r]), []).append(r)
    seqs = {seq for seq, _ in groups}
    if len(groups) < 2 or len(seqs) < len(groups) or len(set(fps.values())) < len(groups):
        return []
    desc = "; ".join(f"rank {format_ranks(rs)}: {_fp_text(fp)} #{seq}"
                     for (seq, fp), rs in sorted(groups.items()))
    every = "every rank" if len(groups) == len(first) else "the ranks"
    return [verdict(ix, "HANG_COLLECTIVE_MISMATCH",
                    f"{every} timed out in different collectives ({desc}): each waited "
                    "in a collective the others never called", list(first.values()),
                    {"collectives": {format_ranks(rs): _fp_text(fp)
                                     for (_, fp), rs in sorted(groups.items())},
                     "hint": "find where the ranks' code paths part (an evaluation, a log or "
                             "a save on some ranks only, a batch of another modality); "
                             "TORCH_DISTRIBUTED_DEBUG=DETAIL names the two calls"}, ranks=[])]


def _first_timeouts(ix: EventIndex) -> dict[int, Event]:
    """Each rank's watchdog timeout with the lowest sequence number."""
    first: dict[int, Event] = {}
    for e in ix.of(K.NCCL_WATCHDOG):
        if e.rank is not None and "seq" in e.data and "op" in e.data:
            if e.rank not in first or e.typed("seq", int) < first[e.rank].typed("seq", int):
                first[e.rank] = e
    return first


def _one_group(ix: EventIndex) -> bool:
    """The watchdog lines that name a process group name one (or none does)."""
    return len({m.group(1) for e in ix.of(K.NCCL_WATCHDOG) if (m := _PG.search(e.text))}) <= 1


def _states_cross(ix: EventIndex, first: dict[int, Event]) -> bool:
    """The watchdogs' work-state lines, where the log has them, agree that the ranks
    crossed: a rank stuck later in the sequence says it completed the number another rank
    is stuck in (possible only when they called different collectives there). Without
    work-state lines the fingerprints alone decide."""
    done: dict[int, int] = {}
    for e in ix.of(K.NCCL_WORK_STATE):
        if e.rank is not None:
            done[e.rank] = max(done.get(e.rank, -1), e.typed("last_completed", int))
    if not done:
        return True
    stuck = {r: e.typed("seq", int) for r, e in first.items()}
    low = min(stuck, key=lambda r: stuck[r])
    return all(done.get(r, -1) >= stuck[low] for r in stuck if r != low)


def _fp_text(fp: tuple[object, ...]) -> str:
    op, numel_in, numel_out = fp  # _watchdog_fingerprints' triples
    return f"{op}" + (f" NumelIn={numel_in} NumelOut={numel_out}" if numel_in is not None
                      else "")


def named_culprits(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """Timeouts whose report names the rank that never came (desync, barrier, store)."""
    found = (finder(ix, earlier) for finder in _NAMED_CULPRIT_FINDERS)
    return [v for v in found if v is not None]


def _desync_lagging(ix: EventIndex, earlier: tuple[Verdict, ...]) -> Verdict | None:
    lagging = ix.of(K.DESYNC_MISSING, K.DESYNC_UNJOINED, K.DESYNC_UNFINISHED)
    if not lagging or any(v.finding.id == "HANG_COLLECTIVE_MISMATCH" for v in earlier):
        return None
    ranks = sorted({r for e in lagging if e.kind is not K.DESYNC_UNFINISHED
                    for r in e.ints("ranks")}) or sorted(
                        {r for e in lagging for r in e.ints("ranks")})
    extra = ix.of(K.DESYNC_TIMEOUT_AT, K.DESYNC_HEADER)
    return verdict(ix, "COLLECTIVE_TIMEOUT",
                   f"collective timed out; the desync report names rank "
                   f"{format_ranks(ranks)} as lagging/dead", extra[:1] + lagging,
                   {"desync_report": [e.text for e in lagging]}, ranks=ranks)


def _barrier_missing(ix: EventIndex, earlier: tuple[Verdict, ...]) -> Verdict | None:
    barrier = ix.of(K.MONITORED_BARRIER)
    if not barrier:
        return None
    ranks = sorted({r for e in barrier for r in e.ints("missing_ranks")})
    ms = barrier[0].data["timeout_ms"]
    return verdict(ix, "COLLECTIVE_TIMEOUT", f"rank {format_ranks(ranks)} did not reach "
                   f"monitored_barrier within {ms} ms", barrier, {"timeout_ms": ms},
                   ranks=ranks)


def _store_missing(ix: EventIndex, earlier: tuple[Verdict, ...]) -> Verdict | None:
    store = [e for e in ix.of(K.STORE_TIMEOUT) if e.data.get("missing_ranks")]
    if not store or ix.of(K.CONNECT_TIMEOUT, K.CONN_REFUSED):
        return None
    ranks = sorted({r for e in store for r in e.ints("missing_ranks")})
    d = store[0].data
    return verdict(
        ix, "COLLECTIVE_TIMEOUT", f"rank {format_ranks(ranks)} never joined the process "
        f"group (store wait timed out after {d['timeout_ms']} ms)", store,
        {"timeout_ms": d["timeout_ms"], "keys": d["keys"],
         "hint": f"rank {format_ranks(ranks)} never reached init_process_group / the store "
                 "barrier: it crashed, hung earlier, or was never started"}, ranks=ranks)


def _store_main_first(ix: EventIndex, earlier: tuple[Verdict, ...]) -> Verdict | None:
    """Ranks other than 0 time out waiting on the store while a data-preparation progress
    bar that names no rank runs: the "main process first" pattern, in the store instead of
    a collective (rank 0 sets the key the others wait for once its work is done)."""
    store = [e for e in ix.of(K.STORE_TIMEOUT) if not e.data.get("missing_ranks")]
    culprits = _main_first(ix, set(ranks_of(store))) if store else []
    if not culprits:
        return None
    busy = ix.of(K.BUSY)
    return verdict(
        ix, "HANG_RANK_MISSING_COLLECTIVE", f"rank {format_ranks(culprits)} was still "
        f"preparing data ({busy[-1].get_str('activity')}) when rank {fmt(store)} timed out "
        f"waiting on the store for it ({store[0].data['timeout_ms']} ms)", store + busy[-1:],
        {"busy": [e.quote(200) for e in busy][-3:], "hint": MAIN_FIRST_HINT}, ranks=culprits)


_PEER_GONE = re.compile(r"Connection (?:reset|closed) by peer|Broken pipe|Connection refused")


def _short(text: str) -> str:
    return text.split(". ", 1)[0][:120]


def _nccl_id_never_published(ix: EventIndex, earlier: tuple[Verdict, ...]) -> Verdict | None:
    uid = ix.of(K.STORE_UNIQUEID)
    if not uid:
        return None
    src = sorted({e.typed("source_rank", int) for e in uid})
    waiters = sorted({e.typed("waiter", int) for e in uid})
    if all(_PEER_GONE.search(str(e.data.get("error", ""))) for e in uid):
        # a timeout is a publisher still busy; a connection the store's side reset or
        # closed is a process that ended (the store lives in rank 0's process or its agent)
        return verdict(
            ix, "RANK_CRASHED",
            f"rank {format_ranks(src)} died before it published the NCCL id that rank "
            f"{format_ranks(waiters)} waited for: the store's connection was lost "
            f"({_short(str(uid[0].data['error']))}); rank {format_ranks(src)}'s own output "
            "says why",
            uid, {"waiting_ranks": waiters}, ranks=src)
    return verdict(
        ix, "HANG_RANK_MISSING_COLLECTIVE",
        f"rank {format_ranks(src)} never published the NCCL id that rank "
        f"{format_ranks(waiters)} waited for ({uid[0].data['error']}): rank "
        f"{format_ranks(src)} was busy elsewhere (data preprocessing, tokenizing) or died",
        uid, {"waiting_ranks": waiters, "hint": "raise the process-group timeout, or do "
              "the preprocessing before init_process_group / on every rank"}, ranks=src)


def _stalled_ops(ix: EventIndex, earlier: tuple[Verdict, ...]) -> Verdict | None:
    """Horovod's stall inspector: one ready set for every stalled tensor leaves out the
    ranks that never submitted it; different sets mean different tensors per rank."""
    stalls = ix.of(K.HOROVOD_STALL)
    if not stalls:
        return None
    sets = {tuple(sorted(e.ints("ready_ranks"))) for e in stalls}
    seen = {r for e in stalls for r in e.ints("ready_ranks")} | {
        e.rank for e in ix.events if e.rank is not None}
    ev = {"stalled_ops": len(stalls), "ready_ranks": sorted(sets)[:5],
          "first": stalls[0].data.get("op", "")}
    if len(sets) == 1:
        missing = sorted(set(range(max(seen) + 1)) - set(sets.pop()))
        if missing:
            return verdict(ix, "HANG_RANK_MISSING_COLLECTIVE",
                           f"rank {format_ranks(missing)} never submitted the {len(stalls)} "
                           f"tensor(s) the other ranks wait for (Horovod's stall inspector)",
                           stalls, ev, ranks=missing)
    return verdict(ix, "HANG_COLLECTIVE_MISMATCH",
                   f"ranks submitted different tensors: Horovod's stall inspector lists "
                   f"{len(stalls)} stalled tensor(s) ready on different ranks", stalls, ev,
                   ranks=[])


# In the order their findings are reported.
_NAMED_CULPRIT_FINDERS = (_desync_lagging, _barrier_missing, _store_missing, _store_main_first,
                          _nccl_id_never_published, _stalled_ops)


def _silent(timed_out: list[int], seen: set[int], census: frozenset[int]) -> list[int]:
    """Ranks missing below the highest rank that timed out, when they are few: N-1 ranks
    reporting one collective name the one that did not. Many missing ranks say the log is
    an excerpt of some ranks (a thread quoting four of eight), not that they hung; a rank
    seen in any report of the collective (its work state) is not missing. A rank whose own
    lines are in the log (the census) and that reports no timeout is no excerpt's gap,
    however many: it never entered the collective, or entered it later than the ones that
    timed out (ranks 1 and 2 of four, silent while 0 and 3 timed out at #17 and torchrun
    tore the job down: XG6_megatron_lowcomm_ddp_ranks12_missing_allreduce)."""
    if len(timed_out) < 2:
        return []
    quiet = sorted(census - set(timed_out) - seen)
    if quiet:
        return quiet
    missing = sorted(set(range(max(timed_out) + 1)) - set(timed_out) - seen)
    return missing if 2 * len(missing) <= len(set(timed_out) | seen) else []


def _main_first(ix: EventIndex, reporting: set[int]) -> list[int]:
    """Ranks other than 0 time out while a data-preparation progress bar that names no rank
    runs: the "main process first" pattern (HF datasets, YOLO's zero_first) makes it rank
    0's, and rank 0 reports no timeout of its own."""
    unnamed = [e for e in ix.of(K.BUSY) if e.data.get("busy_rank", e.rank) is None]
    if unnamed and reporting and 0 not in reporting:
        return [0]
    return []


def _behind(states: list[Event]) -> list[int]:
    """Ranks whose last enqueued NCCL work is lower than the others' of their group (they
    never issued it); numbers of different groups are not compared."""
    by_group: dict[str | None, dict[int, int]] = {}
    for e in states:
        if e.rank is not None:
            last = by_group.setdefault(group_of(e), {})
            last[e.rank] = max(last.get(e.rank, -2), e.typed("last_enqueued", int))
    if len(by_group) > 1:
        by_group.pop(None, None)  # a line naming no group cannot be placed in one
    out: set[int] = set()
    for last in by_group.values():
        if len(set(last.values())) >= 2:
            low = min(last.values())
            out |= {r for r, v in last.items() if v == low}
    return sorted(out)


def silent_rank(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """N-1 ranks time out in one collective: the rank that did not report it is the culprit."""
    watchdog = ix.of(K.NCCL_WATCHDOG, K.GLOO_TIMEOUT)
    states = ix.of(K.NCCL_WORK_STATE)
    if not watchdog and not states:
        return []
    evs = _first_timed_out(watchdog)
    reporting = set(ranks_of(evs + states))
    # A rank whose progress line shows it busy elsewhere, and that reports no timeout.
    named = {r for e in ix.of(K.BUSY) if (r := e.get_int("busy_rank", e.rank)) is not None}
    busy = sorted(named - reporting)
    culprits = _behind(states) or busy or _silent(ranks_of(evs), reporting, ix.ranks_seen)
    main = _main_first(ix, reporting)
    if main and (not culprits or (not busy and culprits == main)):
        # rank 0's own data-preparation progress line: it was busy, not stuck
        culprits = busy = main
    if not culprits and not (_is_barrier(evs) and _others_seen(ix, reporting)):
        return []
    d = (evs or states)[0].data
    op = f"{d.get('op', 'a collective')}" + (f" #{d['seq']}" if "seq" in d else "")
    ev: dict[str, object] = {"collective": {k: d[k] for k in ("op", "seq", "timeout_ms", "ran_ms")
                                         if k in d},
                          "ranks_reporting": fmt(evs + states)}
    other = _waiting_elsewhere(ix, culprits, d.get("op"))
    if other:
        return [_elsewhere_verdict(ix, culprits, other, op, evs + states, ev)]
    title = _missing_title(ix, culprits, busy, op, evs + states, ev)
    return [verdict(ix, "HANG_RANK_MISSING_COLLECTIVE", title, evs + states + ix.of(K.BUSY)[-1:],
                    ev, ranks=culprits)]


def _missing_title(ix: EventIndex, culprits: list[int], busy: list[int], op: str,
                   waiting: list[Event], ev: dict[str, object]) -> str:
    if busy and culprits == busy:
        return _busy_elsewhere(ix, culprits, op, ev)
    if culprits:
        return (f"rank {format_ranks(culprits)} never entered {op}; "
                f"{_who_waited(waiting, 'the others')} timed out waiting for it")
    ev["hint"] = ("a barrier early in the job times out when one process prepares data "
                  "longer than the process-group timeout: raise the timeout or prepare "
                  "the data before launching")
    return (f"{_who_waited(waiting, 'a rank')} timed out in a barrier ({op}) that another rank "
            "never reached: it was busy elsewhere (data preparation, tokenizing, saving)")


def _who_waited(waiting: list[Event], unknown: str) -> str:
    """The ranks that waited, or ``unknown`` where their lines carry no rank (never "rank
    ?": a slot the log did not fill)."""
    ranks = fmt(waiting)
    return f"rank {ranks}" if ranks else unknown


def _elsewhere_verdict(ix: EventIndex, culprits: list[int], other: dict[int, str], op: str,
                       waiting: list[Event], ev: dict[str, object]) -> Verdict:
    where = ", ".join(f"rank {r} was in {c}" for r, c in sorted(other.items()))
    ev["collectives"] = {str(r): c for r, c in sorted(other.items())}
    return verdict(ix, "HANG_COLLECTIVE_MISMATCH",
                   f"rank {format_ranks(culprits)} never entered {op}, where "
                   f"{_who_waited(waiting, 'the others')} waited; by its own traceback {where}: "
                   "the ranks "
                   "called different collectives", waiting, ev, ranks=culprits)


def _waiting_elsewhere(ix: EventIndex, culprits: list[int], op: object) -> dict[int, str]:
    """The collective each culprit's own traceback shows it waiting in, where that is not
    the one the others timed out in (names compared without case and underscores)."""
    if not culprits or not isinstance(op, str):
        return {}
    seen = {e.rank: e.typed("in_collective", str) for e in ix.events
            if e.rank in culprits and e.data.get("in_collective")}
    same = op.replace("_", "").upper()
    if not seen or any(c.replace("_", "").upper() == same for c in seen.values()):
        return {}
    return {r: c for r, c in seen.items() if r is not None}


def _first_timed_out(watchdog: list[Event]) -> list[Event]:
    """The timeout reports of the lowest sequence number: the collective that hung first.
    Lines that name no number (the C++ frame of the watchdog's check) say nothing of which
    collective: they count only when no line names one."""
    numbered = [e for e in watchdog if e.data.get("seq") is not None]
    by_seq: dict[int, list[Event]] = {}
    for e in numbered or watchdog:
        by_seq.setdefault(e.get_int("seq", -1), []).append(e)
    return min(by_seq.items(), key=lambda kv: kv[0])[1] if by_seq else []


def _others_seen(ix: EventIndex, reporting: set[int]) -> bool:
    """The log shows a rank other than those that timed out: only then does a barrier that
    timed out on them say another rank never came (an excerpt of one rank of a large job
    shows nothing of the others)."""
    return any(e.rank is not None and e.rank not in reporting for e in ix.events)


def _is_barrier(evs: list[Event]) -> bool:
    """A barrier, or the one-element all-reduce a barrier is made of."""
    return any(e.data.get("op") == "BARRIER" or (e.data.get("op") == "ALLREDUCE"
               and e.data.get("numel_in") == 1) for e in evs)


def _busy_elsewhere(ix: EventIndex, culprits: list[int], op: str,
                    ev: dict[str, object]) -> str:
    acts = sorted({e.typed("activity", str) for e in ix.of(K.BUSY)})
    ev["busy"] = [e.quote(200) for e in ix.of(K.BUSY)][-3:]
    return (f"rank {format_ranks(culprits)} was busy elsewhere ({', '.join(acts)}) while "
            f"the others waited in {op} until the timeout")


def timeouts(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    evs = ix.of(K.NCCL_WATCHDOG, K.GLOO_TIMEOUT, K.STORE_TIMEOUT)
    if not evs and not ix.of(K.NCCL_REMOTE):
        # the watchdog's "Exception (either an error or timeout)": a timeout unless the
        # error it caught is named (a remote process or the network: the comm rules)
        evs = ix.of(K.NCCL_WORK_STATE)
    peer = ix.of(K.BARRIER_PEER_ERROR)
    if not evs and peer:
        p = sorted({e.typed("peer", int) for e in peer})
        return [verdict(ix, "COLLECTIVE_TIMEOUT", f"{rank_or(peer, 'a rank')} reached "
                        f"monitored_barrier but got errors from rank {format_ranks(p)}: rank "
                        f"{format_ranks(p)} failed or its log names the late rank", peer,
                        ranks=p)]
    if not evs:
        return []
    crashed = _crashed_before(ix, evs)
    if crashed is not None:
        return [crashed]
    w = ix.of(K.NCCL_WATCHDOG)
    ev: dict[str, object] = {"hint": "no rank in these logs failed first: a rank is hung, slower, "
                          "or calls a different collective; rerun with TORCH_DISTRIBUTED_DEBUG="
                          "DETAIL (mismatch) or TORCH_NCCL_DESYNC_DEBUG=1, or use ddpdoctor "
                          "attach/run on the live job to see where each rank waits",
                          "ranks_reporting": fmt(evs)}
    if w:
        ev["collective"] = {k: w[0].data[k] for k in ("op", "seq", "timeout_ms", "ran_ms")
                            if k in w[0].data}
    seqs = {e.get_int("seq") for e in w} - {None}
    if seqs == {1}:
        # not one collective ever completed: no rank is late, the GPUs never exchanged data
        ev["hint"] = ("the first collective never completed on any rank: the path between "
                      "the GPUs does not work. On one node, peer-to-peer between GPUs (IOMMU "
                      "or ACS on, a consumer GPU, a VM): try NCCL_P2P_DISABLE=1 and check "
                      "`nvidia-smi topo -p2p r`; across nodes, the network (NCCL_SOCKET_IFNAME, "
                      "NCCL_IB_DISABLE=1 to test without InfiniBand)")
    elif _is_barrier(w):
        # seen from the ranks that timed out alone, a barrier says only that someone was late
        ev["hint"] = ("a barrier (a one-element all-reduce) timed out: a process that never "
                      "came to it, most often one still preparing data (downloading, "
                      "tokenizing, building a cache) longer than the process-group timeout, "
                      "or a link that hangs; the other ranks' logs say which: raise the "
                      "timeout or prepare the data before launching")
    # torch before 1.12 printed no SeqNum in the watchdog's line
    seq = f" #{w[0].data['seq']}" if w and "seq" in w[0].data else ""
    op = f" ({w[0].data['op']}{seq})" if w and "op" in w[0].data else ""
    return [verdict(ix, "COLLECTIVE_TIMEOUT", f"a collective timed out{on_rank(evs)}"
                    f"{op}; the logs name no culprit", evs, ev, ranks=[])]


def _crashed_before(ix: EventIndex, timeouts: list[Event]) -> Verdict | None:
    """A Python traceback whose exception line was lost (cut, or run into another rank's
    output) that ends in work, not in a wait, from a process other than those that timed
    out: that process failed and the others waited for it until their timeout."""
    waiting = {e.rank for e in timeouts if e.rank is not None}
    for tb in ix.of(K.TRACEBACK):
        raised = tb.get_str("raised_at")
        later = any(e.source == tb.source and e.lineno < tb.lineno for e in timeouts)
        if not raised or WAITING_FRAME.search(raised) or tb.rank in waiting or later:
            continue
        who = f"rank {tb.rank}" if tb.rank is not None else "a process"
        return verdict(ix, "RANK_CRASHED", f"{who} failed at {raised} (its traceback's "
                       "exception line is not in the log) before "
                       f"{rank_or(timeouts, 'the others')} timed out waiting for it: the "
                       "timeout is its fallout", [tb, *timeouts],
                       {"where": raised, "hint": "the failed process's exception line was cut "
                        "or mixed into another rank's output: its own log file (torchrun "
                        "--log-dir, --tee 3) has it"},
                       ranks=[tb.rank] if tb.rank is not None else [])
    return None


_NCCL_PROC = re.compile(r"(?P<proc>[A-Za-z0-9][\w.\-]*:\d+):\d+ \[\d+\] NCCL INFO")


def stale_communicator(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A process that starts a communicator under the unique id of one it started before,
    while another starts a new id: it joined an old communicator (its process group made
    twice, e.g. by a library; a stale store) and the others wait in the new one. Every
    ncclCommInitRank of a healthy job gets a fresh id. Only with a failure in the log."""
    starts = ix.of(K.NCCL_COMM_INIT)
    if len(starts) < 3 or not any(e.is_failure for e in ix.events):
        return []
    ids: dict[str, list[tuple[str, Event]]] = {}
    for e in starts:
        m = _NCCL_PROC.search(e.text)
        key = m["proc"] if m else f"rank {e.typed('nccl_rank', int)}"
        ids.setdefault(key, []).append((e.typed("comm_id", str), e))
    stale = [seq[-1][1] for seq in ids.values()
             if len(seq) > 1 and seq[-1][0] in {i for i, _ in seq[:-1]}]
    everyone = [i for seq in ids.values() for i, _ in seq]
    fresh = [seq[-1][1] for seq in ids.values() if everyone.count(seq[-1][0]) == 1]
    if not stale or not fresh:
        return []
    bad = sorted({e.typed("nccl_rank", int) for e in stale})
    new = sorted({e.typed("nccl_rank", int) for e in fresh})
    return [verdict(ix, "HANG_COLLECTIVE_MISMATCH", f"rank {format_ranks(bad)} started a "
                    f"communicator again under the id of one it had ({stale[0].data['comm_id']}) "
                    f"while rank {format_ranks(new)} started a new one "
                    f"({fresh[0].data['comm_id']}): the ranks do not create the same process "
                    "groups in the same order (one initialised twice, e.g. by a library, or a "
                    "group made on some ranks only)", [*stale, *fresh],
                    {"stale_comm_id": stale[0].data["comm_id"]}, ranks=bad)]


def stack_dump(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """A py-spy dump in the log: the hang its processes add up to (diagnose/stackdump.py).
    A dump names no rank; the evidence says where each dumped process was."""
    out = []
    for e in ix.of(K.STACK_DUMP):
        if e.data.get("finding"):
            out.append(verdict(ix, e.typed("finding", str), e.text, [e],
                               {"processes": e.texts("described") if "described" in e.data
                                              else [],
                                "hint": "a py-spy dump names no rank: dump with `ddpdoctor "
                                        "attach` (or py-spy with the rank in the file name) "
                                        "to have the culprit named"},
                               ranks=[e.rank] if e.rank is not None else []))
    return out


def _unreached_host(ix: EventIndex, evs: list[Event]) -> bool:
    """The store's host waited, and a rank says it could not reach it: that rank's
    connection is the cause (the rendezvous rules name it), not ranks stuck in start-up."""
    return all(e.data.get("store_host") for e in evs) and \
        bool(ix.of(K.CONNECT_TIMEOUT, K.CONN_REFUSED))


def store_barrier(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """init_process_group's store barrier (torch < 2.1) waiting: fewer workers than the
    world joined (ranks stuck in start-up, named when every other rank says it waits),
    or more (two jobs, or one launched twice, on one rendezvous address and port)."""
    evs = ix.of(K.STORE_BARRIER_WAIT)
    if not evs or _unreached_host(ix, evs):
        return []
    last = evs[-1]
    world, joined = last.get_int("world_size", 0), last.get_int("worker_count", 0)
    if joined > world:
        return [verdict(ix, "ENV_PORT_IN_USE", f"{joined} processes joined a process group "
                        f"of {world}: two jobs (or one launched twice) share its rendezvous "
                        "address and port", evs, {"world_size": world, "worker_count": joined},
                        ranks=[])]
    if joined >= world:
        return []
    waiting = {e.typed("rank", int) for e in evs if "rank" in e.data
               and e.get_int("world_size", 0) == world}
    # the store's host waiting for its clients: rank 0 where its line names no rank
    host = [e for e in evs if e.data.get("store_host")]
    waiting |= {e.rank if e.rank is not None else 0 for e in host}
    missing = sorted(set(range(world)) - waiting)
    named = missing if len(missing) == world - joined else []
    who = f": rank {format_ranks(named)}" if named else ""
    # at the barrier's deadline the waiting ranks raise: the missing ones never entered a
    # collective the others timed out in; still waiting, they are stuck (or never started).
    # The store's host timing out waits for ranks that never reached the store at all.
    timed_out = any(e.data.get("timed_out") for e in evs)
    where = (f"the store's host waited {host[-1].data['seconds']} s for them "
             f"({joined}/{world} clients joined)" if host else
             f"the others {'timed out' if timed_out else 'wait'} in its store barrier "
             f"(worker_count={joined})")
    fid = "HANG_RANK_MISSING_COLLECTIVE" if timed_out and not host else "RANK_UNRESPONSIVE"
    return [verdict(ix, fid,
                    f"{world - joined} of {world} ranks never reached init_process_group{who}; "
                    f"{where}", evs,
                    {"waiting_ranks": sorted(waiting), "world_size": world,
                     "worker_count": joined,
                     "hint": "the missing rank is stuck before init_process_group (an import, "
                             "a download, a lock, a logger's login) or was never started: "
                             "`ddpdoctor attach` on it shows where"}, ranks=named)]


RULES = (
    Rule("stale_communicator", stale_communicator, _TIMEOUTS | {
        K.NCCL_REMOTE, K.NCCL_DETAIL, K.NCCL_SOCKET, K.CONN_REFUSED, K.EXCEPTION, K.ERROR_LINE,
        K.NCCL_WARN, K.NCCL_SYSTEM}),
    Rule("stack_dump", stack_dump),
    Rule("store_barrier", store_barrier),
    Rule("mismatch", mismatch, _TIMEOUTS | {K.NCCL_WARN, K.NCCL_DETAIL}),
    Rule("named_culprits", named_culprits, _TIMEOUTS | {K.NCCL_DETAIL}),
)
ALONE = (
    Rule("silent_rank", silent_rank, _TIMEOUTS, alone=True),
    Rule("timeouts", timeouts, _TIMEOUTS, alone=True),
)
