"""The evidence families learned from locked run 9 (batch M1_, scored blind first): NCCL's
"Timeout at NCCL work" alone is a collective timeout, a rank's traceback cut before its
exception line is that rank's crash, and torchelastic's error record (its error_handler's
JSON) is a failure whose exception it names. Lines from the batch's real logs (thread
URLs in their sidecars, tests/fixtures/reallogs/M1_*)."""

from __future__ import annotations

from logscan_helpers import first_in


def test_timeout_at_nccl_work_alone_is_a_collective_timeout(tmp_path):
    f = first_in(tmp_path, "[rank4]:[E114 15:08:00.554388780 ProcessGroupNCCL.cpp:1709] [PG 0 "
                         "(default_pg) Rank 4] Timeout at NCCL work: 175, last enqueued NCCL "
                         "work: 175, last completed NCCL work: 174.\n")
    assert (f.id, f.severity) == ("COLLECTIVE_TIMEOUT", "error")


def test_a_ranks_traceback_cut_before_its_exception_is_that_ranks_crash(tmp_path):
    f = first_in(tmp_path, "[rank0]: Traceback (most recent call last):\n"
                         '[rank0]:   File "/workspace/examples/llm/molecule_gpt.py", line 194, '
                         "in <module>\n[rank0]:     train(\n"
                         '[rank0]:   File "/workspace/examples/llm/molecule_gpt.py", line 147, '
                         "in train\n[rank0]:     clip_grad_norm_(optimizer.param_groups[0]"
                         "['params'], 0.1)\n")
    assert (f.id, f.ranks) == ("RANK_CRASHED", [0])
    assert "molecule_gpt.py:147 in train" in f.title


def test_torchelastic_error_record_names_its_exception(tmp_path):
    f = first_in(tmp_path, "INFO:torch.distributed.elastic.agent.server.api:[default] "
                         "Rendezvous'ing worker group\n"
                         "ERROR:torch.distributed.elastic.multiprocessing.errors.error_handler:{"
                         '\n  "message": {\n    "message": "RendezvousClosedError: ",\n'
                         '    "extraInfo": {\n')
    assert f.severity == "error" and "RendezvousClosedError" in f.title
