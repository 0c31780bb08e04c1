"""One node's side of the job view: a thread that talks to the job's store.

The supervision loop (run/runner.py) never touches the network: it hands this
thread its node's state (``update``), takes stack requests and verdicts from it
(``take_request``, ``take_verdict``) and hands back replies and failures. Every store call
has a deadline; when the store goes away (the node that hosted it ended, the network) the
thread says so once (``lost``) and stops, and run carries on with its own node's view.

Per interval a node writes one key (its snapshot) and reads four (failure count, request,
attach request, verdict); the leader also reads the nodes' snapshots in one multi_get:
O(nodes) keys per interval for the whole job.
"""

from __future__ import annotations

import itertools
import threading
import time
from collections import deque
from dataclasses import dataclass, field, replace

from ddpdoctor.hang.verdict import SpellMemory, looking_again
from ddpdoctor.jobview import keys
from ddpdoctor.jobview.leader import Policy, ProgressClock, should_look, threshold
from ddpdoctor.jobview.snapshot import (
    Failure,
    JobSummary,
    NodeSnap,
    Request,
    StackReply,
    Verdict,
)
from ddpdoctor.jobview.store import JobStore, StoreLost

INTERVAL_S = 0.5
FAILURE_POLL_S = 0.1  # one counter read: cheap, and a failure crosses in time
LEADER_GRACE_S = 5.0  # a node not on the store's host claims the lead after this long
CONNECT_WAIT_S = 120.0  # the node hosting the store may start its launcher this much later
STORE_TIMEOUT_S = 5.0


@dataclass
class _Look:
    """The leader's outstanding request."""

    request: Request
    sent: float
    deadline: float
    moved_marker: float
    stalled_s: float
    threshold_s: float
    how: str


@dataclass
class _Shared:
    snap: NodeSnap
    requests: deque = field(default_factory=deque)
    replies: deque = field(default_factory=deque)
    failures_out: deque = field(default_factory=deque)
    failures: list[Failure] = field(default_factory=list)
    verdicts: deque = field(default_factory=deque)
    summary: JobSummary | None = None
    nodes_seen: dict[int, str] = field(default_factory=dict)


class JobView:
    def __init__(self, endpoint: keys.Endpoint, host: str, leader: bool, policy: Policy,
                 reply_timeout_s: float = 20.0, interval: float = INTERVAL_S,
                 connect_wait_s: float = CONNECT_WAIT_S, store: JobStore | None = None
                 ) -> None:
        self.endpoint = endpoint
        self.host = host
        self.leader = leader
        self.policy = policy
        self.interval = interval
        self.reply_timeout_s = reply_timeout_s
        self.connect_wait_s = connect_wait_s
        self.index = -1
        self.connected_at: float | None = None
        self.lost = ""  # why the job view was lost (empty while it works)
        self.lost_at: float | None = None  # monotonic
        self._store = store
        self._lock = threading.Lock()
        self._sh = _Shared(NodeSnap(-1, host, 0, 0))
        self._stop = threading.Event()
        # set by report_failure: a failure is published at once, not at the next interval.
        # The store usually lives in torchrun on the first node, which exits soon after its
        # ranks see the connection to the failed rank close: every 100 ms counts.
        self._wake = threading.Event()
        self._thread = threading.Thread(target=self._run, name="ddpdoctor-jobview",
                                        daemon=True)
        self._seen: dict[str, str] = {}  # key -> last request id handled
        self._fail_read = 0
        self._verdict_id = ""
        self._look: _Look | None = None
        self._next_look = 0.0
        self._ids = itertools.count(1)
        self._spell = SpellMemory()
        self._known: set[int] = set()
        self._claimed = False
        self.clock = ProgressClock(time.monotonic())

    # ---- the supervision loop's side (no I/O)

    def start(self) -> JobView:
        self._thread.start()
        return self

    @property
    def active(self) -> bool:
        return self.connected_at is not None and not self.lost

    def update(self, progress: int, last_what: str, step_times: list[float],
               ranks: tuple = (), ended: bool = False) -> None:
        with self._lock:
            s = self._sh.snap
            self._sh.snap = replace(s, progress=progress, last_what=last_what[:200],
                                    step_times=tuple(step_times[-32:]), ranks=ranks,
                                    ended=ended)

    def take_request(self) -> Request | None:
        with self._lock:
            return self._sh.requests.popleft() if self._sh.requests else None

    def put_reply(self, request_id: str, reply: StackReply) -> None:
        with self._lock:
            self._sh.replies.append((request_id, replace(reply, node=self.index)))

    def take_verdict(self) -> Verdict | None:
        with self._lock:
            return self._sh.verdicts.popleft() if self._sh.verdicts else None

    def report_failure(self, f: Failure) -> None:
        with self._lock:
            self._sh.failures_out.append(f)
        self._wake.set()

    def failures(self) -> list[Failure]:
        with self._lock:
            return list(self._sh.failures)

    def summary(self) -> JobSummary | None:
        with self._lock:
            return self._sh.summary

    def nodes_seen(self) -> dict[int, str]:
        with self._lock:
            return dict(self._sh.nodes_seen)

    def stop(self, wait_s: float = 2.0) -> None:
        self._stop.set()
        self._wake.set()
        self._thread.join(wait_s)

    # ---- the thread

    def _run(self) -> None:
        t0 = time.monotonic()
        while not self._stop.is_set():
            try:
                if self._store is None:
                    self._store = JobStore.connect(self.endpoint, STORE_TIMEOUT_S)
                if self.index < 0:
                    self.index = self._store.add(keys.NODE_COUNT, 1) - 1
                    self.connected_at = time.monotonic()
                self._step(time.monotonic())
                self._poll_failures(time.monotonic() + self.interval)
            except StoreLost as e:
                if self.connected_at is None and time.monotonic() - t0 < self.connect_wait_s:
                    self._store = None
                    self._stop.wait(1.0)
                    continue
                self.lost_at = time.monotonic()
                self.lost = str(e) if self.connected_at is not None else (
                    f"{e} (for {self.connect_wait_s:g} s)")
                return

    def _poll_failures(self, until: float) -> None:
        """Between steps, read the failure counter every FAILURE_POLL_S: another node's
        failure must be read before the store's host (torchrun on the first node) exits,
        which it does within a second of its ranks feeling that failure."""
        assert self._store is not None
        while not self._stop.is_set():
            left = until - time.monotonic()
            if left <= 0:
                return
            if self._wake.wait(min(FAILURE_POLL_S, left)):
                self._wake.clear()
                return
            self._read_failures(self._store)

    def _step(self, now: float) -> None:
        st = self._store
        assert st is not None
        with self._lock:
            snap = self._sh.snap = replace(self._sh.snap, node=self.index,
                                           beat=self._sh.snap.beat + 1)
            out = list(self._sh.failures_out)
            self._sh.failures_out.clear()
            replies = list(self._sh.replies)
            self._sh.replies.clear()
        st.set(keys.node_key(self.index), snap.to_json())
        for f in out:
            n = st.add(keys.FAIL_COUNT, 1)
            st.set(keys.failure_key(n - 1), replace(f, node=self.index).to_json())
        for rid, reply in replies:
            st.set(keys.reply_key(rid, self.index), reply.to_json())
        self._read_failures(st)
        self._read_requests(st)
        self._read_verdict(st)
        self._claim_lead(st, now)
        if self.leader:
            self._lead(st, now)
        else:
            raw = st.get_if_set(keys.JOB)
            if raw is not None:
                summary = JobSummary.from_json(raw)
                with self._lock:
                    self._sh.summary = summary

    def _read_failures(self, st: JobStore) -> None:
        n = st.add(keys.FAIL_COUNT, 0)
        if n <= self._fail_read:
            return
        got = st.records([keys.failure_key(i) for i in range(self._fail_read, n)],
                         Failure.from_json)
        self._fail_read = n
        with self._lock:
            self._sh.failures.extend(got)

    def _read_requests(self, st: JobStore) -> None:
        for key in (keys.REQUEST, keys.ATTACH_REQUEST):
            raw = st.get_if_set(key)
            if raw is None:
                continue
            try:
                req = Request.from_json(raw)
            except ValueError:
                continue
            if self._seen.get(key) != req.id:
                self._seen[key] = req.id
                with self._lock:
                    self._sh.requests.append(req)

    def _read_verdict(self, st: JobStore) -> None:
        raw = st.get_if_set(keys.VERDICT)
        if raw is None:
            return
        try:
            v = Verdict.from_json(raw)
        except ValueError:
            return
        if v.id != self._verdict_id:
            self._verdict_id = v.id
            with self._lock:
                self._sh.verdicts.append(v)

    # ---- the leader

    def _claim_lead(self, st: JobStore, now: float) -> None:
        """One node leads: a node on the store's host claims the lead at once; where none
        is (the endpoint is a service name, a load balancer), the first node to claim it
        after a grace period does. A claim is a compare-and-set: never two leaders (two
        runs on one host, or the host's run starting after another node claimed)."""
        if self._claimed:
            return
        me = f"{self.host}/{self.index}"
        if self.leader or (self.connected_at is not None
                           and now - self.connected_at >= LEADER_GRACE_S):
            self.leader = st.claim(keys.LEADER, me)
            self._claimed = True

    def _lead(self, st: JobStore, now: float) -> None:
        snaps = read_nodes(st, self._known)
        self.clock.observe(snaps, now)
        with self._lock:
            self._sh.nodes_seen = {s.node: s.host for s in self.clock.snaps.values()}
        limit, how = threshold(self.clock.step_times(), self.policy)
        summary = JobSummary(limit, how, self._silent(now, self.policy.node_timeout_s),
                             self._silent(now, 4 * self.interval))
        st.set(keys.JOB, summary.to_json())
        with self._lock:
            self._sh.summary = summary
        if self._look is not None:
            self._collect(st, now)
            return
        d = should_look(self.clock, now, self.policy, busy=False)
        if d.look and now >= self._next_look:
            rid = f"h{next(self._ids)}-{int(time.time())}"
            recheck = max(1.0, min(10.0, d.threshold_s / 4))
            req = Request(rid, f"no rank made progress for {d.stalled_s:.1f} s "
                          f"(threshold {d.how})", recheck)
            self._look = _Look(req, now, now + self.reply_timeout_s + recheck,
                               self.clock.last_move, d.stalled_s, d.threshold_s, d.how)
            st.set(keys.REQUEST, req.to_json())

    def _silent(self, now: float, after_s: float) -> list[str]:
        return [f"{s.host} (node {s.node}): no update for "
                f"{now - self.clock.nodes[s.node].beat_at:.1f} s"
                for s in self.clock.lost(now, after_s) if s.node != self.index]

    def _collect(self, st: JobStore, now: float) -> None:
        look = self._look
        assert look is not None
        live = self.clock.live(now, self.policy.node_timeout_s)
        wanted = {s.node: s.host for s in live}
        present = st.existing([keys.reply_key(look.request.id, n) for n in wanted])
        if len(present) < len(wanted) and now < look.deadline:
            return
        replies = st.records(present, StackReply.from_json)
        answered = {r.node for r in replies}
        missing = [f"{h} (node {n})" for n, h in wanted.items() if n not in answered]
        from ddpdoctor.jobview.merge import decide

        v = decide(look.request.id, replies, missing,
                   moved=self.clock.last_move > look.moved_marker)
        steps = self.clock.rank_steps()
        v = replace(v, no_progress_s=round(look.stalled_s, 1),
                    threshold_s=round(look.threshold_s, 1), threshold_how=look.how,
                    steps=tuple(sorted(steps.items())),
                    culprits=tuple(replace(c, step=steps.get(c.rank, -1)) for c in v.culprits))
        again = self._spell.look_again(look.moved_marker, v.confirmed,
                                       [(c.rank, c.where) for c in v.culprits], v.working)
        if again:
            where = next(c.where for c in v.culprits if c.rank == again[0])
            v = replace(v, confirmed=False, reason=looking_again(v.reason, again, where))
        st.set(keys.VERDICT, v.to_json())
        self._look = None
        # not confirmed: look again after another full threshold of quiet
        self._next_look = now + look.threshold_s


def read_nodes(st: JobStore, known: set[int] | None = None) -> list[NodeSnap]:
    """Every node's latest snapshot: one counter read and one multi_get (plus one check
    per node not seen before: multi_get would wait for a missing key)."""
    known = set() if known is None else known
    n = st.add(keys.NODE_COUNT, 0)
    new = [i for i in range(n) if i not in known]
    known.update(int(k.rsplit("/", 1)[1]) for k in st.existing([keys.node_key(i) for i in new]))
    names = [keys.node_key(i) for i in sorted(known) if i < n]
    return st.records(names, NodeSnap.from_json)
