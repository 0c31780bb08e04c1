"""Who came to the process group's start-up: a log that ends there with ranks missing.

Frameworks print one line per rank as the process group starts, naming the rank and the
world it expects (Lightning's "initializing ddp: GLOBAL_RANK: 1, MEMBER: 2/4"). A job whose
log ends among those lines, with only the low ranks of that world announced (0 to k-1, some
perhaps twice) and nothing saying every member came, is stuck in start-up waiting for
ranks that never started (a batch script that runs ``python`` without ``srun``) or that
another process took (each node numbering its own ranks from 0: the same rank announced
twice, the high ranks never). No
line says so: the census is the evidence. It only speaks when nothing else was found, and
never when the log goes on past start-up (a loss, a trainer's progress, NCCL's first
communicator) or a start-up line says every member registered.
"""

from __future__ import annotations

from collections import Counter

from ddpdoctor.core.findings import format_ranks
from ddpdoctor.diagnose.events import Event
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, verdict

# A start-up that got past the process group: what only a job that started prints
_PAST_STARTUP = (K.LOSS_VALUE, K.BUSY, K.JOB_DONE, K.LAUNCH_SUCCEEDED, K.NCCL_COMM_INIT)
# The log ends "at" the census when at most this many lines follow its last announcement
# (a framework's banner or two; a pasted excerpt's closing line)
ENDS_WITHIN = 2


def rank_census(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    """Ranks of the announced world that never announced themselves, in a log that ends in
    start-up: HANG_RANK_MISSING_COLLECTIVE naming no rank (the missing ones never ran)."""
    claims = [e for e in ix.of(K.RANK_ANNOUNCE) if "announced" in e.data]
    if not claims or _past_startup(ix, claims):
        return []
    last = claims[-1]
    world = last.get_int("world_size", 0)
    if last.get_int("tail", ENDS_WITHIN + 1) > ENDS_WITHIN or world < 2:
        return []
    if any(e.repeats for e in claims):  # the scanner's cap folded some: no full census
        return []
    seen = Counter(e.get_int("announced", -1) for e in claims
                   if e.get_int("world_size", 0) == world)
    missing = sorted(set(range(world)) - set(seen))
    # a launch that started too few processes, or numbered each node's from 0, leaves the
    # low ranks and no others; an excerpt cut mid-start-up of a job that started shows
    # whichever ranks printed first (14, 1, 10, 11 of 16)
    if not missing or missing[0] != len(seen):
        return []
    twice = sorted(r for r, n in seen.items() if n > 1)
    title = (f"The log ends in the process group's start-up: {_ranks(sorted(seen))} of "
             f"{world} announced {'itself' if len(seen) == 1 else 'themselves'}, "
             f"{_ranks(missing)} never did")
    if twice:
        why = (f"; {_ranks(twice)} announced more than once: several processes "
               "took the same rank (each node or launch numbered its own ranks from 0), so "
               "the higher ranks do not exist")
        hint = ("start one process per rank with its own global rank: under Slurm, "
                "--ntasks-per-node equal to the GPUs per node (SLURM_NTASKS = nodes x GPUs); "
                "with a launcher, its --nnodes and --node-rank on every node")
    else:
        why = ("; they were never started (a batch script that runs python without srun, a "
               "launcher started on one node only) or are stuck before the process group")
        hint = ("check that the launch starts every rank of the world (srun in the batch "
                "script, the launcher on every node); if they did start, `ddpdoctor attach` "
                "on one shows where it waits")
    return [verdict(ix, "HANG_RANK_MISSING_COLLECTIVE", title + why, claims,
                    {"family": "rank_census", "world_size": world, "announced": sorted(seen),
                     "missing": missing, "announced_twice": twice, "hint": hint},
                    ranks=[])]


def _ranks(ranks: list[int]) -> str:
    return f"rank{'s' if len(ranks) > 1 else ''} {format_ranks(ranks)}"


def _past_startup(ix: EventIndex, claims: list[Event]) -> bool:
    start = ix.pos(claims[0])
    registered = [e for e in ix.of(K.RANK_ANNOUNCE) if "registered" in e.data]
    return any(ix.pos(e) > start for e in ix.of(*_PAST_STARTUP) + registered)


RULE = Rule("rank_census", rank_census, alone=True)
