"""`ddpdoctor check` at the cost of a bare script (issue #31): ranks forked from a zygote
that imported torch once, DataLoader workers forked as under torchrun, a sweep whose trials
fit a time budget, and the --quick / --full depths."""

import sys

import fast_start_fns
import psutil
import pytest
from click.testing import CliRunner

from ddpdoctor.check.options import CheckOptions, OptionsError
from ddpdoctor.cli import main


def test_depths_change_only_what_grows_with_what_a_probe_moves():
    quick, default, full = (CheckOptions.at_depth(d) for d in ("quick", "default", "full"))
    assert default == CheckOptions()
    assert (quick.collectives, quick.link_iters, quick.dl_batches) == (("all_reduce",), 1, 2)
    assert [quick.bandwidth_max_bytes(b) for b in ("gloo", "nccl")] == [1 << 20, 16 << 20]
    assert [default.bandwidth_max_bytes(b) for b in ("gloo", "nccl")] == [16 << 20, 256 << 20]
    assert [full.bandwidth_max_bytes(b) for b in ("gloo", "nccl")] == [64 << 20, 1 << 30]
    assert (full.warmup, full.iters, full.trial_budget_s) == (2, 5, None)
    assert (default.warmup, default.iters, default.trial_budget_s) == (1, 5, 0.025)
    # An explicit --max-bytes wins over the depth; the depth travels to the ranks.
    assert CheckOptions.at_depth("quick", max_bytes=1 << 30).bandwidth_max_bytes("gloo") == 1 << 30
    assert CheckOptions.from_json(quick.to_json()) == quick
    with pytest.raises(OptionsError, match="depth"):
        CheckOptions.at_depth("deep")
    with pytest.raises(OptionsError, match="depth"):
        CheckOptions.from_dict({"depth": "deep"})
    with pytest.raises(OptionsError, match="trial_budget_s"):
        CheckOptions(trial_budget_s=-1.0)


def test_quick_and_full_together_is_a_usage_error():
    r = CliRunner().invoke(main, ["check", "--quick", "--full"])
    assert r.exit_code == 2, r.output
    assert "choose one of --quick and --full" in r.output


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_ranks_fork_from_the_zygote_which_is_gone_after_the_launch(monkeypatch):
    from multiprocessing import forkserver

    from ddpdoctor.check.launcher import launch

    monkeypatch.setenv("DDPDOCTOR_TEST_PLANTED", "first")
    res = launch(fast_start_fns.start_facts, nproc=2, backend="gloo", deadline_s=60)
    assert res.ok, [(o.rank, o.status, o.error) for o in res.outcomes]
    for facts in res.values().values():
        assert "multiprocessing.forkserver" in facts["parent_cmdline"]
        if sys.platform == "linux" and sys.version_info < (3, 14):
            # What a rank started by torchrun has (not spawn's): DataLoader workers fork.
            assert facts["start_method"] == "fork"
        assert facts["planted"] == "first"
    assert forkserver._forkserver._forkserver_pid is None
    # The server carried the environment of its start: a later launch needs a new one.
    monkeypatch.setenv("DDPDOCTOR_TEST_PLANTED", "second")
    res = launch(fast_start_fns.start_facts, nproc=2, backend="gloo", deadline_s=60)
    assert [v["planted"] for v in res.values().values()] == ["second", "second"]
    # Nothing of the launch is left behind.
    leftover = [c for c in psutil.Process().children(recursive=True)
                if c.is_running() and c.status() != psutil.STATUS_ZOMBIE
                and "multiprocessing.forkserver" in " ".join(c.cmdline())]
    assert leftover == []


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sweep_trials_fit_the_budget_and_every_rank_runs_the_same_count():
    from ddpdoctor.check.launcher import launch

    res = launch(fast_start_fns.sweep_iters, nproc=2, backend="gloo", deadline_s=60)
    assert res.ok, [(o.rank, o.status, o.error) for o in res.outcomes]
    # A zero budget: one call per trial; a huge one or none: `iters` (4). Both ranks ran
    # the same number of collectives, else the sweep would have hung to the deadline.
    assert res.values() == {r: {"zero": [1], "huge": [4], "none": [4]} for r in (0, 1)}
