"""A rank numbered by its own command line (no launcher's variable in its environment):
`python main.py --rank N --world-size W --dist-url tcp://...`, one command per rank."""

from __future__ import annotations

import pytest

from ddpdoctor.attach.diagnosis import _states_for_gone
from ddpdoctor.attach.rankproof import COMMAND_LINE, argv_mark
from ddpdoctor.attach.stacks import DEAD
from ddpdoctor.core.rankclaim import argv_rank, script_args


@pytest.mark.parametrize(("cmdline", "rank", "local"), [
    # the per-rank launch of pytorch#18689 and the ImageNet example's --dist-url
    (["python", "main.py", "--rank", "1", "--world-size", "2"], 1, None),
    (["/usr/bin/python3.11", "-u", "main.py", "--dist-url", "tcp://10.0.0.1:23456",
      "--rank=3", "--world_size=4"], 3, None),
    (["python3", "-m", "pkg.train", "--global_rank", "2", "--master_addr", "n1"], 2, None),
    # torch.distributed.launch's own option: a rank on its own
    (["python", "-X", "dev", "train.py", "--local-rank=1"], None, 1),
    (["python", "train.py", "--local_rank", "0", "--rank", "5", "--init-method", "env://"],
     5, 0),
])
def test_the_command_line_numbers_the_rank(cmdline, rank, local):
    said = argv_rank(cmdline)
    assert said is not None and (said.rank, said.local_rank) == (rank, local)


@pytest.mark.parametrize("cmdline", [
    ["python", "finetune.py", "--rank", "16", "--lr", "1e-4"],  # a LoRA rank, no group
    ["python", "-c", "import x", "--rank", "1", "--world-size", "2"],  # -c: no script args
    ["bash", "run.sh", "--rank", "1", "--world-size", "2"],  # not a Python
    ["python", "main.py", "--rank", "one", "--world-size", "2"],
    ["python", "main.py"],
    [],
])
def test_no_rank_without_a_process_group_on_the_command_line(cmdline):
    assert argv_rank(cmdline) is None


def test_a_pythons_own_options_are_not_the_scripts():
    assert script_args(["python", "-W", "ignore", "-m", "mod", "--rank", "1"]) == [
        "--rank", "1"]
    assert script_args(["python", "-mmod", "a"]) == ["a"]


def test_the_mark_says_where_its_number_came_from():
    mark = argv_mark(["python", "main.py", "--rank", "1", "--world-size", "2"])
    assert mark is not None
    assert (mark.number, mark.world_size, mark.source) == (1, 2, COMMAND_LINE)
    assert mark.argv == "--rank 1, --world-size 2 on its command line"


def test_a_rank_run_saw_go_is_dead_only_where_no_process_stands_for_it():
    from ddpdoctor.attach.classify import RankState

    live = [RankState(0, 100, "collective")]
    gone = _states_for_gone({0: "exited", 1: "pid 7 exited 10 s before"}, live)
    assert [(s.rank, s.kind, s.detail) for s in gone] == [
        (1, DEAD, "pid 7 exited 10 s before")]
