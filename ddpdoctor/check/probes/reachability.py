"""Reachability: every rank connects to every other rank over TCP, in one round, before
the process group exists (``ddpdoctor/check/mesh.py``).

It names the pair, the rank or the node, where the init failure would name only the rank
that gave up first; on gloo (whose init connects every pair) a mesh that found a pair that
cannot connect skips the process group, so the check ends in seconds, not at its deadline.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ddpdoctor.check.analysis.reachability import analyze
from ddpdoctor.check.options import CheckOptions
from ddpdoctor.check.probe import Probe

if TYPE_CHECKING:
    from ddpdoctor.check.launcher.outcome import RankContext
    from ddpdoctor.check.mesh import MeshRow, MeshSkipped

NAME = "reachability"


def budget(deadline_s: float, connect_timeout_s: float) -> float:
    """The mesh's share of the check's deadline: enough for every rank to publish its
    address and for a dead peer's connection to time out, never most of the deadline."""
    return min(deadline_s / 3, 20.0 + 2 * connect_timeout_s)


def collect(ctx: RankContext, opts: CheckOptions) -> MeshRow | MeshSkipped:
    from ddpdoctor.check.mesh import run_mesh

    if ctx.world_size < 2:
        return {"skipped": "one rank"}
    if ctx.store is None:
        return {"skipped": "no store to exchange addresses"}
    timeout = opts.p2p_timeout_s or max(2.0, min(5.0, ctx.deadline_s / 20))
    ctx.progress(f"{NAME}: mesh")
    row = run_mesh(ctx.store, ctx.rank, ctx.world_size, ctx.backend, timeout,
                   budget(ctx.deadline_s, timeout))
    if row["cut"] and ctx.backend == "gloo":
        # gloo's init connects every pair before it returns: with one pair that cannot
        # connect it hangs on every rank until the deadline. Every rank saw the same flag
        # (after the mesh's barrier), so all of them skip it together.
        ctx.skip_init = ("the reachability mesh found ranks that cannot connect, "
                         "so gloo's process group cannot form")
    return row


PROBE = Probe(NAME, "Communication", "pre_init", collect, analyze,
              stall_finding="COMM_CONNECTIVITY")
