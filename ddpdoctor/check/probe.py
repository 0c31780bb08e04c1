"""``Probe``: what every module under ``ddpdoctor/check/probes`` declares as ``PROBE``.

A probe is one module: its rank side (``collect``: plain, JSON-serialisable facts about
this rank, never a verdict) and its declaration (name, report group, the stage it runs in,
what a rank stuck inside it at the deadline means). Its pure parent side (``analyze``:
every rank's facts -> check lines and findings) lives under ``ddpdoctor/check/analysis``,
is named by the declaration, and is tested without processes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Generic, Literal, Protocol, TypedDict, TypeVar

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Check

if TYPE_CHECKING:
    from ddpdoctor.check.launcher.outcome import RankContext

# "pre_init": inside every rank, before the process group exists (its evidence survives a
# failed init); "rank": inside every rank, with the process group; "parent": once, in the
# doctor's own process.
Stage = Literal["pre_init", "rank", "parent"]


# One probe's data: the JSON shape its ``collect`` writes on every rank and its ``analyze``
# reads back (a TypedDict defined next to the writer, in ``check/probes/records.py``).
D = TypeVar("D", bound=Mapping[str, object])
D_co = TypeVar("D_co", bound=Mapping[str, object], covariant=True)
D_contra = TypeVar("D_contra", bound=Mapping[str, object], contravariant=True)


class ProbeResult(TypedDict, total=False):
    """One probe's result on one rank (``run._run``): its data, or why it has none."""

    data: Mapping[str, object]  # what ``collect`` returned (its probe's TypedDict)
    error: str
    traceback: str
    seconds: float


class Collect(Protocol[D_co]):
    def __call__(self, ctx: RankContext, opts: CheckOptions) -> D_co:
        """Rank side (a parent-stage probe accepts None for ``ctx``: it runs in no rank)."""
        ...


class Analyze(Protocol[D_contra]):
    def __call__(self, per_rank: Mapping[int, D_contra], world_size: int,
                 opts: CheckOptions | None = None
                 ) -> tuple[Check | list[Check], list[Finding]]:
        """Parent side, pure: every rank's data -> check line(s) and findings."""
        ...


@dataclass(frozen=True)
class Probe(Generic[D]):
    name: str
    group: str  # the report heading its check lines go under
    stage: Stage
    collect: Collect[D]
    analyze: Analyze[D]
    # What a rank still inside this probe at the deadline means (analysis/launch.py).
    stall_finding: str = "RANK_UNRESPONSIVE"
