"""Triage: events read from a crashed job's logs -> findings, root cause first.

When one rank dies, every other rank reports something too: gloo "Connection closed by
peer", NCCL watchdog timeouts, torchrun sending SIGTERM. Those lines are louder and more
numerous than the one that matters. Triage sorts events into root causes (a specific error
on a rank: a DataLoader worker killed, unused parameters, an exception in user code, a
SIGKILL) and cascade (what the others felt), reports the root causes with the rank and
the file:line, and folds the cascade into counts on the first root cause. Only when the logs
hold nothing but cascade does the cascade itself become the finding (a timeout with no
culprit in sight, an unreachable rendezvous).

Pure: a list of events in, a list of findings out; no files, no processes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from ddpdoctor.findings import Finding, format_ranks
from ddpdoctor.logscan.rules import Event

# Events that other ranks report when one rank goes away (or a collective never completes).
CASCADE_KINDS = {
    "conn_reset", "conn_closed", "broken_pipe", "nccl_remote", "nccl_system", "gloo_timeout",
    "nccl_watchdog", "conn_refused", "connect_timeout", "cpp_abort", "dl_exited",
    "agent_failed", "nccl_detail",
}
_CASCADE_LABELS = {
    "conn_reset": "'Connection reset by peer'",
    "conn_closed": "'Connection closed by peer'",
    "broken_pipe": "'Broken pipe'",
    "nccl_remote": "NCCL 'remote process exited or there was a network error'",
    "nccl_system": "NCCL 'unhandled system error'",
    "gloo_timeout": "gloo collective timeout(s)",
    "nccl_watchdog": "NCCL watchdog timeout(s)",
    "conn_refused": "'Connection refused'",
    "connect_timeout": "store connect timeout(s)",
    "store_timeout": "store wait timeout(s)",
    "cpp_abort": "C++ abort(s)",
    "dl_exited": "'DataLoader worker exited unexpectedly'",
    "exception": "exception(s)",
}
_MAX_LINES = 6
_CAUSE_BEFORE_EFFECT = [("ENV_SHM_TOO_SMALL", "DATALOADER_WORKER_FAILURE"),
                        ("DDP_REDUCTION_NOT_FINISHED", "DDP_UNUSED_PARAMETERS")]
_EFFECT_ORDER = {effect: 1 for _, effect in _CAUSE_BEFORE_EFFECT}


@dataclass
class _Candidate:
    finding: Finding
    first: int  # index of its earliest event: the order in which the failures appeared
    events: list[Event] = field(default_factory=list)


def triage(events: Iterable[Event]) -> list[Finding]:
    """Findings for ``events`` (in log order), the first root cause first."""
    return _Triage(list(events)).run()


class _Triage:
    def __init__(self, events: list[Event]) -> None:
        self.events = events
        self.index = {id(e): i for i, e in enumerate(events)}
        self.by_kind: dict[str, list[Event]] = defaultdict(list)
        for e in events:
            self.by_kind[e.kind].append(e)
        self.used: set[int] = set()
        self.candidates: list[_Candidate] = []
        failures = self.by_kind["torchrun_failure"]
        self.root_failures = [e for e in failures if e.data.get("first")]
        if not failures and self.by_kind["agent_failed"]:
            # No summary block (cut log): the agent's "failed (exitcode: N) local_rank: R"
            # line names the first rank it saw die.
            first = self.by_kind["agent_failed"][0]
            first.data.setdefault("first", True)
            first.rank = first.data["local_rank"] if first.rank is None else first.rank
            self.root_failures = [first]
        self.root_rank = self.root_failures[0].rank if self.root_failures else None

    # --- the pass ---

    def run(self) -> list[Finding]:
        self._attribute_unprefixed()
        self._ddp()
        self._dataloader_and_shm()
        self._oom()
        self._mismatch()
        self._named_culprits()
        self._nonfinite()
        self._port_in_use()
        self._exceptions()
        self._dead_ranks()
        if not self.candidates:
            self._cascade_only()
        return self._ordered()

    def _attribute_unprefixed(self) -> None:
        """Give torchrun's first failed rank the root-cause lines that carry no rank.

        A C++ abort or an error before init_process_group prints no ``[rankN]:`` prefix.
        When torchrun says rank R failed first and no prefixed line blames R, those lines
        are R's.
        """
        if self.root_rank is None:
            return
        rootish = [e for e in self.events
                   if e.kind not in CASCADE_KINDS and e.kind != "torchrun_failure"]
        if any(e.rank == self.root_rank for e in rootish):
            return
        for e in self.events:
            # Desync reports name their ranks in the text; kernel lines are the host's.
            if e.rank is None and e.kind not in ("torchrun_failure", "host_oom") \
                    and not e.kind.startswith("desync_"):
                e.rank = self.root_rank
                e.data["rank_from"] = "torchrun summary (line carries no rank prefix)"

    # --- root causes ---

    def _ddp(self) -> None:
        red = self.by_kind["ddp_reduction"]
        unused = self.by_kind["unused_names"] + self.by_kind["unused_indices"]
        if red:
            ev = self._evidence(red)
            if any(e.data.get("static_graph") for e in red):
                ev["note"] = "static_graph=True and the graph changed between iterations"
            self._add("DDP_REDUCTION_NOT_FINISHED",
                      f"DDP reduction did not finish on rank {_fmt(red)}: some parameters got "
                      "no gradient in the previous iteration", red, ev)
        if unused:
            per_rank: dict[str, dict[str, Any]] = {}
            for e in unused:
                r = e.data.get("param_rank", e.rank)
                slot = per_rank.setdefault(str(r), {})
                if "names" in e.data:
                    slot["names"] = e.data["names"]
                if "indices" in e.data:
                    slot["indices"] = e.data["indices"]
            ev = self._evidence(unused)
            ev["parameters"] = per_rank
            names = sorted({n for s in per_rank.values() for n in s.get("names", [])})
            idx = sorted({i for s in per_rank.values() for i in s.get("indices", [])})
            what = ", ".join(names) if names else "indices " + " ".join(map(str, idx))
            if not names:
                ev["hint"] = ("set TORCH_DISTRIBUTED_DEBUG=INFO to have DDP print the "
                              "parameter names")
            ranks = [int(r) for r in per_rank if r != "None"]
            self._add("DDP_UNUSED_PARAMETERS",
                      f"parameters that received no gradient: {what}", unused, ev, ranks=ranks)

    def _dataloader_and_shm(self) -> None:
        killed = self.by_kind["dl_killed"]
        bus = [e for e in killed if "bus" in e.data.get("signal", "").lower()]
        bus_worker = self.by_kind["bus_error_worker"]
        shm = self.by_kind["shm_alloc"]
        worker_exc = [e for e in self.by_kind["exception"] if "in_dataloader_worker" in e.data]
        if bus or bus_worker or shm:
            shm_events = bus + shm + bus_worker
            ev = self._evidence(shm_events)
            if shm:
                ev["shm_error"] = shm[0].data.get("reason", "")
            if bus or bus_worker:
                ev["signal"] = "SIGBUS (Bus error) in a DataLoader worker"
            self._add("ENV_SHM_TOO_SMALL",
                      "shared memory (/dev/shm) ran out"
                      + (" — DataLoader worker died of a bus error" if bus or bus_worker else ""),
                      shm_events, ev, ranks=_ranks_of(bus + shm) or None)
        # A worker that dies mid-send shows up in the rank as ConnectionResetError raised
        # inside the DataLoader's own frames: the worker died, not a peer rank.
        lost = [e for k in ("conn_reset", "conn_closed", "broken_pipe") for e in self.by_kind[k]
                if e.data.get("in_dataloader")]
        dl = (killed + self.by_kind["dl_exit"] + self.by_kind["dl_timeout"]
              + self.by_kind["dl_worker_exception"] + worker_exc
              + [e for e in shm if "in_dataloader_worker" in e.data] + bus_worker + lost)
        if not dl:
            return
        dl.sort(key=self._pos)
        ev = self._evidence(dl)
        rank_of_kind = ["dl_killed", "dl_exit", "dl_timeout", "dl_worker_exception",
                        "exception", "shm_alloc", "bus_error_worker"]
        first = min(dl, key=lambda e: (rank_of_kind.index(e.kind)
                                       if e.kind in rank_of_kind else 99, self._pos(e)))
        if first.kind == "dl_killed":
            ev["signal"] = first.data["signal"]
            title = f"a DataLoader worker was killed by signal: {first.data['signal']}"
            if first.data["signal"] == "Killed":
                ev["hint"] = "SIGKILL: most often the host's OOM killer (check dmesg)"
        elif first.kind == "dl_exit":
            ev["exit_code"] = first.data["exit_code"]
            title = f"a DataLoader worker exited with code {first.data['exit_code']}"
        elif first.kind == "dl_timeout":
            ev["timeout_s"] = first.data["timeout_s"]
            title = f"DataLoader timed out after {first.data['timeout_s']:g} s waiting for a batch"
        elif first.kind == "bus_error_worker":
            ev["signal"] = "SIGBUS"
            title = "a DataLoader worker died of a bus error (SIGBUS)"
        elif first.kind not in ("dl_worker_exception", "exception", "shm_alloc"):
            title = "a DataLoader worker died (the rank lost its connection to it)"
        else:
            errs = [e for e in dl if e.kind in ("exception", "shm_alloc")]
            msg = errs[0].data.get("exception", errs[0].text) if errs else first.text
            title = f"a DataLoader worker raised {msg}"
            if errs and errs[0].data.get("where"):
                ev["where"] = errs[0].data["where"]
        self.used.update(id(e) for e in self.by_kind["dl_exited"])
        ranks = _ranks_of([e for e in dl if e.kind != "bus_error_worker"])
        self._add("DATALOADER_WORKER_FAILURE", title, dl, ev, ranks=ranks or None)

    def _oom(self) -> None:
        cuda = self.by_kind["cuda_oom"]
        if cuda:
            ev = self._evidence(cuda)
            sizes = {k: v for k, v in cuda[0].data.items()
                     if k not in ("exception", "where", "raised_at") and v is not None}
            ev.update(sizes)
            ev["kind"] = "CUDA"
            msg = f"CUDA out of memory: tried to allocate {sizes.get('tried_to_allocate', '?')}"
            if sizes.get("total_capacity"):
                msg += (f" on GPU {sizes.get('gpu', '?')} ({sizes.get('free', '?')} free of "
                        f"{sizes['total_capacity']})")
            self._add("OOM", msg, cuda, ev)
        cpu = self.by_kind["cpu_oom"]
        if cpu:
            ev = self._evidence(cpu)
            asked = cpu[0].data["tried_to_allocate_bytes"]
            ev.update(kind="host (allocator)", tried_to_allocate_bytes=asked)
            self._add("OOM", f"host out of memory: the CPU allocator could not get "
                      f"{asked / 2**30:.2f} GiB", cpu, ev)
        host = self.by_kind["host_oom"]
        killed9 = [e for e in self.root_failures if e.data.get("exit_code") == -9]
        if host:
            ev = self._evidence(host + killed9)
            ev["kind"] = "host"
            pids = {e.data.get("pid") for e in host} & {e.data.get("pid") for e in killed9}
            if pids - {None}:
                ev["pid_match"] = (f"the kernel killed pid {min(pids - {None})}, the pid "
                                   "torchrun reports for that rank")
            ranks = _ranks_of(killed9)
            self._add("OOM", "the host's OOM killer killed a rank"
                      + (f" (rank {format_ranks(ranks)}, SIGKILL)" if ranks else ""),
                      host + killed9, ev, ranks=ranks)

    def _mismatch(self) -> None:
        detail = self.by_kind["mismatch_detail"]
        if detail:
            colls: dict[str, Any] = {}
            for e in detail:
                for r, fp in e.data["collectives"].items():
                    colls.setdefault(str(r), fp)
            ev = self._evidence(detail)
            ev["collectives"] = colls
            desc = "; ".join(f"rank {r}: {fp.get('op', '?')} shape [{fp.get('shape', '')}]"
                             for r, fp in sorted(colls.items()))
            self._add("HANG_COLLECTIVE_MISMATCH", f"ranks called different collectives ({desc})",
                      detail, ev, ranks=[int(r) for r in colls])
        size = self.by_kind["size_mismatch"]
        if size:
            ev = self._evidence(size + self.by_kind["cpp_abort"])
            d = size[0].data
            if d.get("received_bytes") is not None:
                ev["received_bytes"] = d["received_bytes"]
                ev["expected_bytes"] = d["expected_bytes"]
            ev["hint"] = ("the ranks passed tensors of different sizes to the same collective; "
                          "rerun with TORCH_DISTRIBUTED_DEBUG=DETAIL to see both shapes")
            self.used.update(id(e) for e in self.by_kind["cpp_abort"])
            self._add("HANG_COLLECTIVE_MISMATCH",
                      "a collective received a different amount of data than it expected "
                      f"(detected on rank {_fmt(size) or '?'})", size, ev)
        started = self.by_kind["desync_started"]
        ops = {e.data["op"] for e in started}
        if len(ops) > 1 and not detail:
            ev = self._evidence(started + self.by_kind["desync_timeout_at"])
            ev["collectives"] = {format_ranks(sorted(e.data["ranks"])): e.data["op"]
                                 for e in started}
            minority = min(started, key=lambda e: len(e.data["ranks"]))
            self._add("HANG_COLLECTIVE_MISMATCH",
                      "ranks are in different collectives: " + ", ".join(
                          f"[{format_ranks(sorted(e.data['ranks']))}] {e.data['op']}"
                          for e in started),
                      started, ev, ranks=minority.data["ranks"])

    def _named_culprits(self) -> None:
        """Timeouts whose report names the rank that never came (desync, barrier, store)."""
        lagging = (self.by_kind["desync_missing"] + self.by_kind["desync_unjoined"]
                   + self.by_kind["desync_unfinished"])
        if lagging and not any(c.finding.id == "HANG_COLLECTIVE_MISMATCH"
                               for c in self.candidates):
            ranks = sorted({r for e in self.by_kind["desync_missing"]
                            + self.by_kind["desync_unjoined"] for r in e.data["ranks"]})
            if not ranks:
                ranks = sorted({r for e in lagging for r in e.data["ranks"]})
            extra = self.by_kind["desync_timeout_at"] + self.by_kind["desync_header"]
            ev = self._evidence(extra[:1] + lagging)
            ev["desync_report"] = [e.text for e in lagging]
            self.used.update(id(e) for e in extra + self.by_kind["desync_started"])
            self._add("COLLECTIVE_TIMEOUT",
                      f"collective timed out; the desync report names rank {format_ranks(ranks)} "
                      "as lagging/dead", lagging, ev, ranks=ranks)
        barrier = self.by_kind["monitored_barrier"]
        if barrier:
            ranks = sorted({r for e in barrier for r in e.data["missing_ranks"]})
            ev = self._evidence(barrier)
            ev["timeout_ms"] = barrier[0].data["timeout_ms"]
            self._add("COLLECTIVE_TIMEOUT",
                      f"rank {format_ranks(ranks)} did not reach monitored_barrier within "
                      f"{barrier[0].data['timeout_ms']} ms", barrier, ev, ranks=ranks)
        store = [e for e in self.by_kind["store_timeout"] if e.data.get("missing_ranks")]
        if store and not self._has_connect_failure():
            ranks = sorted({r for e in store for r in e.data["missing_ranks"]})
            ev = self._evidence(store)
            ev["timeout_ms"] = store[0].data["timeout_ms"]
            ev["keys"] = store[0].data["keys"]
            ev["hint"] = (f"rank {format_ranks(ranks)} never reached init_process_group / the "
                          "store barrier: it crashed, hung earlier, or was never started")
            self._add("COLLECTIVE_TIMEOUT",
                      f"rank {format_ranks(ranks)} never joined the process group (store wait "
                      f"timed out after {store[0].data['timeout_ms']} ms)", store, ev, ranks=ranks)

    def _nonfinite(self) -> None:
        nan = self.by_kind["grad_nan"] + self.by_kind["grad_nonfinite_norm"]
        if not nan:
            return
        nan.sort(key=self._pos)
        ev = self._evidence(nan)
        first = nan[0]
        if first.kind == "grad_nan":
            ev["function"] = first.data["function"]
            title = f"backward of {first.data['function']} produced NaN (anomaly detection)"
        else:
            title = "the gradient norm is non-finite (NaN/Inf) in clip_grad_norm_"
        self._add("GRAD_NONFINITE", title, nan, ev, ranks=_ranks_of(nan[:1]))

    def _port_in_use(self) -> None:
        busy = self.by_kind["addr_in_use"]
        if not busy:
            return
        ev = self._evidence(busy)
        port = next((e.data["port"] for e in busy if e.data.get("port")), None)
        if port:
            ev["port"] = port
        self._add("ENV_PORT_IN_USE",
                  f"the rendezvous port {port or ''} is already in use".replace("  ", " "),
                  busy, ev, ranks=[])

    def _exceptions(self) -> None:
        """A Python exception on a rank that no specific rule explains: that rank crashed."""
        explained = {e.rank for c in self.candidates for e in c.events}
        first_per_rank: dict[int | None, Event] = {}
        for e in self.by_kind["exception"]:
            if id(e) in self.used or "in_dataloader_worker" in e.data:
                continue
            if e.rank in explained or self._follows_cascade(e):
                self.used.add(id(e))
                continue
            if e.rank not in first_per_rank:
                first_per_rank[e.rank] = e  # Python prints the original cause first
            else:
                self.used.add(id(e))
        groups: dict[str, list[Event]] = defaultdict(list)
        for e in first_per_rank.values():
            groups[e.data.get("exception", e.text)].append(e)
        for msg, evs in groups.items():
            ev = self._evidence(evs)
            ev["exception"] = msg
            where = next((e.data["where"] for e in evs if e.data.get("where")), "")
            if where:
                ev["where"] = where
            self._attach_exit(ev, evs)
            at = f" at {_short(where)}" if where else ""
            ranks = _ranks_of(evs)
            who = f"rank {format_ranks(ranks)}" if ranks else "the job"
            self._add("RANK_CRASHED", f"{who} raised {_cut(msg, 160)}{at}", evs, ev, ranks=ranks)

    def _dead_ranks(self) -> None:
        """torchrun's first failure that no line above explains: a signal or a bare exit."""
        explained = {e.rank for c in self.candidates for e in c.events}
        felt = {e.rank for e in self.events if e.kind in CASCADE_KINDS}
        for e in self.root_failures:
            code = e.data.get("exit_code")
            if e.rank in explained:
                self.used.add(id(e))
                continue
            if e.rank in felt and code is not None and (code > 0 or code == -6):
                # It exited on an error it felt (a timeout, a reset; NCCL aborts with
                # SIGABRT after a watchdog timeout): cascade, not a crash of its own.
                continue
            ev = self._evidence([e])
            ev["exit_code"] = code
            if e.data.get("host"):
                ev["host"] = e.data["host"]
            if e.data.get("traceback"):
                ev["traceback"] = e.data["traceback"]
            if code == -9:
                ev["hint"] = ("SIGKILL with no message is most often the host's OOM killer: "
                              "check `dmesg -T | grep -i oom` on that host (or pass that output "
                              "to ddpdoctor diagnose too)")
                title = f"rank {e.rank} was killed by SIGKILL (exit code -9)"
            elif code is not None and code < 0:
                title = f"rank {e.rank} died of {e.data.get('signal', 'a signal')} " \
                        f"(exit code {code})"
            else:
                title = f"rank {e.rank} exited with code {code} (its traceback is not in the logs)"
            self._add("RANK_CRASHED", title, [e], ev, ranks=[e.rank] if e.rank is not None else [])

    # --- nothing but cascade ---

    def _cascade_only(self) -> None:
        timeouts = self.by_kind["nccl_watchdog"] + self.by_kind["gloo_timeout"]
        connect = self.by_kind["connect_timeout"] + self.by_kind["conn_refused"]
        store = self.by_kind["store_timeout"]
        comm = self.by_kind["nccl_remote"] + self.by_kind["nccl_system"]
        peer = (self.by_kind["conn_reset"] + self.by_kind["conn_closed"]
                + self.by_kind["broken_pipe"])
        if connect:
            ev = self._evidence(connect)
            target = next((f"{e.data['host']}:{e.data['port']}" for e in connect
                           if e.data.get("host")), "")
            if target:
                ev["endpoint"] = target
            who = f"rank {_fmt(connect)}" if _fmt(connect) else "a rank"
            self._add("ENV_RENDEZVOUS_UNREACHABLE",
                      f"{who} could not reach the rendezvous store"
                      + (f" at {target}" if target else ""), connect, ev)
        elif timeouts or store:
            evs = timeouts + store
            ev = self._evidence(evs)
            w = self.by_kind["nccl_watchdog"]
            if w:
                ev["collective"] = {k: w[0].data[k] for k in ("op", "seq", "timeout_ms", "ran_ms")}
            ev["hint"] = ("no rank in these logs failed first: a rank is hung, slower, or "
                          "calls a different collective; rerun with TORCH_DISTRIBUTED_DEBUG="
                          "DETAIL (mismatch) or TORCH_NCCL_DESYNC_DEBUG=1, or use ddpdoctor "
                          "attach/run on the live job to see where each rank waits")
            ev["ranks_reporting"] = format_ranks(_ranks_of(evs))
            op = f" ({w[0].data['op']} #{w[0].data['seq']})" if w else ""
            self._add("COLLECTIVE_TIMEOUT", f"a collective timed out on rank {_fmt(evs) or '?'}"
                      f"{op}; the logs name no culprit", evs, ev, ranks=[])
        elif comm:
            ev = self._evidence(comm)
            ev["hint"] = ("a peer exited or the network failed; if no rank crashed, rerun "
                          "with NCCL_DEBUG=INFO and check the interface (NCCL_SOCKET_IFNAME)")
            self._add("COMM_CONNECTIVITY", "NCCL lost a connection on rank "
                      f"{_fmt(comm) or '?'}: {comm[0].text[:120]}", comm, ev, ranks=[])
        elif peer:
            ev = self._evidence(peer)
            ev["hint"] = ("the peer that closed the connection crashed first; its log is not "
                          "among the inputs: pass every rank's log")
            self._add("RANK_CRASHED", "another rank went away (connection reset/closed by peer "
                      f"on rank {_fmt(peer) or '?'}); its own error is not in these logs",
                      peer, ev, ranks=[])

    # --- helpers ---

    def _follows_cascade(self, e: Event) -> bool:
        """An exception printed right after a cascade error of the same rank continues it
        (NCCL's "ncclRemoteError: ..." / "Last error:" lines under a DistBackendError)."""
        i = self._pos(e)
        for prev in self.events[max(0, i - 8):i]:
            if (prev.kind in CASCADE_KINDS and prev.rank == e.rank and prev.source == e.source
                    and 0 <= e.lineno - prev.lineno <= 8):
                return True
        return False

    def _has_connect_failure(self) -> bool:
        return bool(self.by_kind["connect_timeout"] or self.by_kind["conn_refused"]) and not \
            self.by_kind["exception"]

    def _evidence(self, evs: list[Event]) -> dict[str, Any]:
        return _evidence_of(sorted(evs, key=self._pos))

    def _pos(self, e: Event) -> int:
        return self.index.get(id(e), 0)

    def _attach_exit(self, ev: dict[str, Any], evs: list[Event]) -> None:
        ranks = set(_ranks_of(evs))
        for f in self.root_failures:
            if f.rank in ranks:
                ev["exit_code"] = f.data.get("exit_code")
                self.used.add(id(f))

    def _add(self, fid: str, title: str, evs: list[Event], evidence: dict[str, Any],
             ranks: list[int] | None = None) -> None:
        ranks = _ranks_of(evs) if ranks is None else ranks
        if "exit_code" not in evidence:
            for f in self.root_failures:
                if f.rank in ranks:
                    evidence["exit_code"] = f.data.get("exit_code")
                    if f.data.get("signal"):
                        evidence["signal"] = evidence.get("signal") or f.data["signal"]
        self.used.update(id(e) for e in evs)
        first = min((self._pos(e) for e in evs), default=0)
        self.candidates.append(_Candidate(Finding(fid, title, ranks=ranks, evidence=evidence),
                                          first, list(evs)))

    def _ordered(self) -> list[Finding]:
        """Root causes in the order they happened; torchrun's first failure leads.

        The cascade (events no finding used) is folded into counts on the first finding.
        """
        firsts = {c.finding.id: c.first for c in self.candidates}
        for cause, effect in _CAUSE_BEFORE_EFFECT:
            # Findings of one fault stay together, the cause first (shm ran out, so the
            # DataLoader worker died), whichever line came first in the log.
            if cause in firsts and effect in firsts:
                for c in self.candidates:
                    if c.finding.id == cause:
                        c.first = min(firsts[cause], firsts[effect])

        def key(c: _Candidate) -> tuple[int, int, int]:
            leads = self.root_rank is not None and self.root_rank in c.finding.ranks
            return (0 if leads else 1, c.first, _EFFECT_ORDER.get(c.finding.id, 0))

        ordered = sorted(self.candidates, key=key)
        fallout = self._fallout()
        if ordered and fallout:
            ordered[0].finding.evidence["fallout"] = fallout
        return [c.finding for c in ordered]

    def _fallout(self) -> list[str]:
        groups: dict[str, list[Event]] = defaultdict(list)
        for e in self.events:
            if id(e) in self.used:
                continue
            if e.kind == "torchrun_failure":
                if e.data.get("first"):
                    continue
                groups["torchrun_failure"].append(e)
            elif e.kind in CASCADE_KINDS or e.kind in ("store_timeout", "exception"):
                if e.kind in ("agent_failed", "nccl_detail"):
                    continue
                groups[e.kind].append(e)
        out = []
        for kind, evs in groups.items():
            ranks = _ranks_of(evs)
            on = f" on rank {format_ranks(ranks)}" if ranks else ""
            count = sum(1 + e.data.get("repeats", 0) for e in evs)
            if kind == "torchrun_failure":
                sigs = sorted({e.data.get("signal") or str(e.data.get("exit_code")) for e in evs})
                out.append(f"torchrun then stopped rank {format_ranks(ranks)} "
                           f"({', '.join(sigs)}): fallout")
                continue
            verb = "was" if count == 1 else "were"
            out.append(f"{count} {_CASCADE_LABELS.get(kind, kind)}{on} {verb} fallout "
                       f"(first at {evs[0].where})")
        return out


def _ranks_of(evs: Iterable[Event]) -> list[int]:
    return sorted({e.rank for e in evs if e.rank is not None})


def _fmt(evs: Iterable[Event]) -> str:
    return format_ranks(_ranks_of(evs))


def _cut(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n] + " ..."


def _short(where: str) -> str:
    """``/long/path/train.py:88 in step`` -> ``train.py:88``."""
    loc = where.split(" in ")[0]
    return loc.rsplit("/", 1)[-1]


def _evidence_of(evs: list[Event]) -> dict[str, Any]:
    seen: set[str] = set()
    lines = []
    for e in evs:
        q = e.quote()
        if q not in seen:
            seen.add(q)
            lines.append(q)
    ev: dict[str, Any] = {"first_seen": evs[0].where if evs else ""}
    ev["lines"] = lines[:_MAX_LINES]
    if len(lines) > _MAX_LINES:
        ev["more_lines"] = len(lines) - _MAX_LINES
    where = next((e.data["where"] for e in evs if e.data.get("where")), "")
    if where:
        ev["where"] = where
    return ev
