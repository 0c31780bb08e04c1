"""``ddpdoctor attach --job ENDPOINT``: the whole job's stacks through its store, stopping
nothing. Every ``ddpdoctor run`` of the job answers the request as it answers its leader;
the merge and the analysis are the leader's (merge.py). No verdict is posted: no node
acts on what attach sees.
"""

from __future__ import annotations

import time

from ddpdoctor.core.report import Check, Report
from ddpdoctor.jobview import keys
from ddpdoctor.jobview.agent import read_nodes
from ddpdoctor.jobview.merge import decide
from ddpdoctor.jobview.report import hang_findings
from ddpdoctor.jobview.snapshot import NodeSnap, Request, StackReply, Verdict
from ddpdoctor.jobview.store import JobStore, StoreLost

RECHECK_S = 1.0
STORE_CONNECT_S = 15.0


class ObserveError(Exception):
    """No job view to ask: one line, exit 3."""


def observe(endpoint: keys.Endpoint, timeout: float) -> tuple[Verdict, list[NodeSnap]]:
    try:
        # the store's host is the rendezvous agent of a busy job: a connect that takes a
        # few seconds is a loaded host, not a lost store (5 s failed under load)
        st = JobStore.connect(endpoint, max(timeout, STORE_CONNECT_S))
        nodes = [s for s in read_nodes(st) if not s.ended]
        if not nodes:
            raise ObserveError(f"no `ddpdoctor run` of a running job has joined the job "
                               f"view at {endpoint}")
        rid = f"a{st.add(keys.ATTACH_COUNT, 1)}-{int(time.time())}"
        st.set(keys.ATTACH_REQUEST, Request(rid, "ddpdoctor attach --job", RECHECK_S,
                                            observe_only=True).to_json())
        replies = _collect(st, rid, nodes, time.monotonic() + timeout + RECHECK_S + 5)
    except StoreLost as e:
        raise ObserveError(str(e)) from e
    answered = {r.node for r in replies}
    missing = [f"{s.host} (node {s.node})" for s in nodes if s.node not in answered]
    return decide(rid, replies, missing, moved=False), nodes


def _collect(st: JobStore, rid: str, nodes: list[NodeSnap], deadline: float
             ) -> list[StackReply]:
    names = [keys.reply_key(rid, s.node) for s in nodes]
    present: list[str] = []
    while time.monotonic() < deadline:
        present = st.existing(names)
        if len(present) == len(names):
            break
        time.sleep(0.2)
    return st.records(present, StackReply.from_json)


def add_to(report: Report, v: Verdict, nodes: list[NodeSnap], endpoint: keys.Endpoint
           ) -> None:
    report.world.update({"job_endpoint": str(endpoint),
                         "nodes": {str(s.node): s.host for s in nodes}})
    report.checks.append(Check(
        "job view", f"{len(nodes)} node(s) via the job's store {endpoint}: "
        + ", ".join(f"{s.host} (node {s.node})" for s in nodes)
        + (f"; no answer from {', '.join(v.missing)}" if v.missing else ""),
        status="warning" if v.missing else "ok", group="attach",
        data={"answered": list(v.nodes), "missing": list(v.missing)}))
    report.checks.append(Check(
        "hang analysis", ("a hang the stacks confirm: " if v.confirmed else "") + v.reason,
        group="attach", data={"groups": list(v.groups),
                              "culprits": [c.__dict__ for c in v.culprits]}))
    for f in hang_findings(v):
        report.add(f, check="hang analysis")
