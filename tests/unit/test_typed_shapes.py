"""Typed shapes that spell out, for the type checker, names the code builds elsewhere:
each must stay in step with its source (a unit test, no processes)."""

from __future__ import annotations

import dataclasses
import typing


def test_watch_settings_are_the_watch_config_fields():
    from ddpdoctor.watch.config import ConfigSettings, WatchConfig, WatchSettings

    fields = {f.name for f in dataclasses.fields(WatchConfig)}
    own = set(typing.get_type_hints(WatchSettings)) - set(typing.get_type_hints(ConfigSettings))
    # watch() takes these three as parameters of its own; every other field is a setting
    assert own == {"every", "checks", "events_path"}
    assert set(typing.get_type_hints(ConfigSettings)) == fields - own


def test_the_trainers_step_record_names_every_stat_per_rank():
    from ddpdoctor.train import loop

    keys = [k for k in loop.StepRecord.__annotations__ if k.startswith("rank_")]
    assert keys == [f"rank_{s}" for s in loop.STATS]
