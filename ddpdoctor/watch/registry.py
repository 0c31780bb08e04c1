"""The one registry of watch checks: name -> class, in the order they run at each hook.
Imported on attach only (the checks import torch)."""

from __future__ import annotations

from collections.abc import Callable

from ddpdoctor.watch.base import WatchCheck
from ddpdoctor.watch.config import WatchConfig


def check_classes() -> dict[str, type[WatchCheck]]:
    from ddpdoctor.watch.desync import DesyncCheck
    from ddpdoctor.watch.device import DeviceCheck
    from ddpdoctor.watch.links import LinksCheck
    from ddpdoctor.watch.memory import MemoryCheck
    from ddpdoctor.watch.nonfinite import NonfiniteCheck
    from ddpdoctor.watch.sampler import SamplerCheck
    from ddpdoctor.watch.skipped_steps import SkippedStepsCheck
    from ddpdoctor.watch.straggler import StragglerCheck
    from ddpdoctor.watch.unused import UnusedCheck

    return {"unused": UnusedCheck, "nonfinite": NonfiniteCheck, "desync": DesyncCheck,
            "sampler": SamplerCheck, "straggler": StragglerCheck, "memory": MemoryCheck,
            "device": DeviceCheck, "links": LinksCheck, "skipped": SkippedStepsCheck}


def build(cfg: WatchConfig) -> list[WatchCheck]:
    """A fresh instance of every check ``cfg`` enables ("hang" is the watchdog's)."""
    checks = [cls() for name, cls in check_classes().items() if cfg.enabled(name)]
    if cfg.profile is not None:  # asked for by window, not by check name
        from ddpdoctor.watch.profile import ProfileCheck

        checks.append(ProfileCheck())
    return checks


HOOK_POINTS = ("forward_pre", "forward_out", "first_grad", "before_check", "step_end",
               "at_check")


def subscribers(checks: list[WatchCheck]) -> dict[str, list[Callable[..., None]]]:
    """Per hook point, the bound methods of the checks that act there (the hooks run every
    step: a check that does not define a hook costs nothing there)."""
    return {hook: [getattr(c, hook) for c in checks
                   if getattr(type(c), hook) is not getattr(WatchCheck, hook)
                   and hook not in c.skip]
            for hook in HOOK_POINTS}
