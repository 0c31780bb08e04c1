"""srun's ``--label`` in front of a launcher: the task a line came from is a node's agent
(torchrun, the DeepSpeed or accelerate launcher), not a rank.

``srun -l python train.py`` starts one task per rank, and "3: ValueError" is rank 3's.
``srun -l torchrun --nproc-per-node 4 train.py`` starts one task per node, whose launcher
starts the ranks: every rank of node 0 prints behind "0: ", and the agent's own report of
node 0's rank 1 dying says "0: ... local_rank: 1". Read as a rank, the label named node 1's
agent losing the store "rank 1" and the node-0 rank that died "rank 0" (XE8_ulysses_rank1_
sigbus_peer_node_store_lost.log, Slurm job 1114, 2 nodes x 4 ranks).

Told by the input's first lines, never guessed per line: under one label a launcher's agent
speaks (its log lines, its failure report), or ranks name themselves two different ways
("0: [Rank 1] ...", "0: [Rank 2] ..."). Then the label is taken off as an envelope: a line
keeps the rank it names itself (torchrun's "[rank1]:" prefix, a failure report's
"rank : 1") and is no one's otherwise, which is true, where the node index was not.
"""

from __future__ import annotations

import re
from collections import defaultdict

from ddpdoctor.diagnose.envelope import Envelope

# srun --label (-l): every line of task N starts "N: " (the reader reads the task as a
# rank by it, reader.split_rank_prefix); as an envelope, the indentation after it stays
# the job's
LABEL = re.compile(r" {0,4}(\d{1,5}): (?=\S)")
LABEL_PATTERN = r" {0,4}\d{1,5}: "
# a launcher's agent, not a rank: torchrun's elastic agent and its failure report, the
# DeepSpeed launcher (launcher/launch.py logs as "[launch.py:NNN:main]"), accelerate's
_AGENT = re.compile(
    r"torch/distributed/(?:elastic/|run\.py|launcher/)|torch\.distributed\.elastic\."
    r"|ChildFailedError|Root Cause \(first observed failure\)"
    r"|\[launch\.py:\d+:(?:main|sigkill_handler)\]|accelerate/commands/launch\.py")
# a rank naming itself in what it printed: "[Rank 1]" (a trainer's or c10d's, not a
# subgroup's "[PG 2 Rank 1]"), torchrun's "[rank1]:" prefix
_SELF_NAMED = re.compile(r"(?<!PG )(?<!\d )\[(?:Rank|rank|RANK)[ :]?(\d+)\]|\[rank(\d+)\]:")


def sniff(lines: list[str]) -> Envelope | None:
    """srun's label as an envelope where ``lines`` (an input's first lines) show it names a
    launcher's task, not a rank; else None."""
    named: defaultdict[str, set[int]] = defaultdict(set)
    for line in lines:
        m = LABEL.match(line)
        if m is None:
            continue
        rest = line[m.end():]
        if _AGENT.search(rest):
            return Envelope(m.group(0), LABEL_PATTERN)
        for s in _SELF_NAMED.finditer(rest):
            named[m.group(1)].add(int(s.group(1) or s.group(2)))
            if len(named[m.group(1)]) > 1:
                return Envelope(m.group(0), LABEL_PATTERN)
    return None
