"""The evidence of one hang, fused: a frozen snapshot the analysis reads and never changes.

Stacks (per-rank states), Flight Recorder (per-group verdicts and the regular sequence),
source (rank guards around the ranks' user frames) and steps (per-rank step counts from
the watch heartbeats). ``collect_evidence`` is the edge that reads files; everything
downstream of a HangEvidence is pure.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from ddpdoctor.attach.classify import WAITING, RankState
from ddpdoctor.attach.flight_recorder import FrTrace, PgVerdict
from ddpdoctor.attach.fr_sequence import SequenceVerdict, compare_sequences
from ddpdoctor.attach.guards import RankGuard, find_guard
from ddpdoctor.core.contract import heartbeat_file

_EMPTY: Mapping = MappingProxyType({})


@dataclass(frozen=True)
class HangEvidence:
    states: tuple[RankState, ...]
    fr_verdicts: tuple[PgVerdict, ...] = ()
    sequences: tuple[SequenceVerdict, ...] = ()
    # rank -> the rank guard around its user frame (the source rule)
    guards: Mapping[int, RankGuard] = field(default_factory=lambda: _EMPTY)
    # rank -> steps done, from the watch heartbeats (the steps rule)
    steps: Mapping[int, int] = field(default_factory=lambda: _EMPTY)
    has_flight_recorder: bool = False

    def state(self, rank: int) -> RankState | None:
        return next((s for s in self.states if s.rank == rank), None)


def of_states(states: list[RankState], fr: list[PgVerdict] | None = None) -> HangEvidence:
    """Stacks (and FR verdicts) only: no file is read."""
    return HangEvidence(tuple(states), tuple(fr or ()), has_flight_recorder=bool(fr))


def read_heartbeat_steps(directories: Mapping[int, str]) -> dict[int, int]:
    """rank -> the step in its ``rank{R}.json`` heartbeat (written by ddpdoctor.watch)."""
    from ddpdoctor.core import safefile

    steps: dict[int, int] = {}
    for rank, directory in directories.items():
        path = os.path.join(directory, heartbeat_file(rank))
        try:
            fd = safefile.open_regular(path, os.O_RDONLY)
            with os.fdopen(fd, "rb") as f:
                beat = json.loads(f.read(65536))
            steps[rank] = int(beat["step"])
        except (OSError, ValueError, KeyError, TypeError):
            continue
    return steps


def collect_evidence(states: list[RankState], fr: list[PgVerdict] | None = None,
                     traces: Mapping[int, FrTrace] | None = None,
                     heartbeat_dirs: Mapping[int, str] | None = None) -> HangEvidence:
    """The edge: read the ranks' source files (rank guards) and heartbeats."""
    guards = {}
    for s in states:
        if s.frames and (s.kind in WAITING or s.site is not None):
            g = find_guard(s.frames)
            if g is not None:
                guards[s.rank] = g
    sequences = compare_sequences(dict(traces)) if traces else []
    steps = read_heartbeat_steps(heartbeat_dirs) if heartbeat_dirs else {}
    return HangEvidence(tuple(states), tuple(fr or ()), tuple(sequences),
                        MappingProxyType(guards), MappingProxyType(steps),
                        has_flight_recorder=bool(traces))
