"""Triage rule for DeepSpeed refusing its config at ``deepspeed.initialize``.

Every rank asserts on the same config, so the finding is the job's (no culprit rank); the
ranks' exits, the launcher's report and torchrun's summary are its fallout.
"""

from __future__ import annotations

from ddpdoctor.diagnose.events import CASCADE
from ddpdoctor.diagnose.events import EventKind as K
from ddpdoctor.diagnose.index import EventIndex, Rule, Verdict, cut, verdict


def ds_config(ix: EventIndex, earlier: tuple[Verdict, ...]) -> list[Verdict]:
    evs = ix.of(K.DS_CONFIG)
    if not evs:
        return []
    first = evs[0]
    ev: dict[str, object] = {k: v for k, v in first.data.items()
                          if k in ("setting", "train_batch_size", "micro_batch", "grad_acc",
                                   "world_size")}
    ev["hint"] = "ddpdoctor check --ds-config FILE --world-size N names every contradiction"
    return [verdict(ix, "DS_CONFIG_INVALID", "DeepSpeed refused its config: "
                    f"{cut(first.text, 200)}", evs, ev, ranks=[])]


RULE = Rule("ds_config", ds_config,
            frozenset({K.EXCEPTION, K.TRACEBACK, K.PROCESS_EXIT, K.AGENT_FAILED,
                       K.TORCHRUN_FAILURE, K.FLOOR, K.TEARDOWN}) | CASCADE)
