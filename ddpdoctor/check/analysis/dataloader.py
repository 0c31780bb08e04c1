"""DataLoader probe evidence -> ENV_SHM_TOO_SMALL or DATALOADER_WORKER_FAILURE."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from ddpdoctor.check.options import CheckOptions
from ddpdoctor.core.findings import Finding, format_ranks
from ddpdoctor.core.report import Check

if TYPE_CHECKING:
    from collections.abc import Mapping

    from ddpdoctor.check.probes.records import DataloaderData

# Real texts (torch 2.13): the worker's "unable to allocate shared memory(shm) for file
# </torch_...>: No space left on device (28)" and the SIGBUS message "...is killed by
# signal: Bus error. It is possible that dataloader's workers are out of shared memory".
SHM_PATTERN = re.compile(r"shared memory|shm\)|Bus error|No space left on device", re.I)


def analyze(per_rank: Mapping[int, DataloaderData], world_size: int,
            opts: CheckOptions | Mapping[str, object] | None = None) -> tuple[Check, list[Finding]]:
    failed = {r: d for r, d in per_rank.items() if not d.get("ok")}
    findings = []
    shm = {r: d for r, d in failed.items()
           if SHM_PATTERN.search(" ".join(str(d.get(k) or "") for k in
                                          ("error", "error_text", "cause")))}
    other = {r: d for r, d in failed.items() if r not in shm}
    if shm:
        r0 = min(shm)
        text = " ".join(str(shm[r0].get(k) or "") for k in ("error_text", "cause"))
        detail = next((ln.strip() for ln in text.splitlines() if SHM_PATTERN.search(ln)), "")
        findings.append(Finding(
            "ENV_SHM_TOO_SMALL",
            "DataLoader workers cannot allocate batches in /dev/shm",
            ranks=sorted(shm),
            evidence={"error": shm[r0]["error"], "detail": detail,
                      "batch_bytes": shm[r0]["batch_bytes"]}))
    if other:
        r0 = min(other)
        findings.append(Finding(
            "DATALOADER_WORKER_FAILURE",
            f"DataLoader workers failed: {other[r0]['error']}",
            ranks=sorted(other),
            evidence={"error": other[r0]["error"], "cause": other[r0].get("cause") or "",
                      "workers": other[r0]["workers"], "timeout_s": other[r0]["timeout_s"]}))
    d0 = per_rank[min(per_rank)]
    mib = d0["batch_bytes"] / (1 << 20)
    if failed:
        summary = f"{d0['workers']} workers x {mib:.0f} MiB batches failed on rank(s) " \
                  f"{format_ranks(sorted(failed))}"
    else:
        summary = (f"{d0['workers']} workers moved {d0['batches']} x {mib:.0f} MiB batches "
                   f"through shared memory ({d0['seconds']:.1f} s)")
    return Check("dataloader", summary, group="Data"), findings
