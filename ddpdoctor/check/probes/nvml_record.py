"""The NVML part of a probe's record: the host's snapshot, or why NVML cannot be read."""

from __future__ import annotations

from ddpdoctor import nvml
from ddpdoctor.check.probes.records import RankIdentity
from ddpdoctor.nvml import NvmlSnapshot, NvmlUnavailable


def snapshot_into(data: RankIdentity, topology: bool, xids: bool) -> NvmlSnapshot | None:
    """A probe's NVML part: ``data["nvml"]`` gets the snapshot, or None with
    ``data["skipped"]`` saying why NVML cannot be used here (then None is returned)."""
    try:
        snap = nvml.read_snapshot(topology=topology, xids=xids)
    except NvmlUnavailable as e:
        data["skipped"] = str(e)
        data["nvml"] = None
        return None
    data["nvml"] = snap.to_dict()
    return snap

