"""Evidence families learned from locked run 30 (batch X11_, scored blind first: 1/2, the
miss a rank): a C++/CUDA extension that does not compile when a rank first needs it
(torch.utils.cpp_extension's JIT build: DeepSpeed's cpu_adam) is the rank's failure, told
by ninja's stop and the compiler's first error, and its next step is the toolchain; and
DeepSpeed's launcher names the failed process by its local rank, a global rank on one node
only (its layout line says which node a log is). Real logs (URLs in the sidecars)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.core.next_step import Action, decide

REAL = Path("tests/fixtures/reallogs")
GCC = REAL / "X11_deepspeed_cpu_adam_jit_build_gcc_too_old.log"


def test_an_extension_that_does_not_compile_is_the_failure_and_the_toolchain_the_fix():
    found = findings_of(GCC)
    lead = found[0]
    assert lead.id == "RANK_CRASHED" and "failed to build at start-up" in lead.title
    assert "We need GCC 9 or later" in lead.evidence["compiler_error"]
    assert decide(found).action is Action.FIX_CONFIG


def test_two_nodes_launchers_reports_of_local_rank_0_name_both_ranks():
    # srun started one DeepSpeed launcher per node, each with one process: both reports say
    # --local_rank=0, which is rank 0 on one node and rank 1 on the other; which report is
    # whose cannot be told, but every node's launcher reported it: rank 0 and rank 1
    # (a single report of the two is left unnamed: test_logscan_same_error_everywhere.py)
    assert findings_of(GCC)[0].ranks == [0, 1]


def test_one_nodes_log_maps_its_local_rank_to_the_global_one(tmp_path):
    # the same log as node 1's launcher alone printed it: its layout line and its report
    lines = GCC.read_text().splitlines(True)
    node0 = [i for i, x in enumerate(lines) if "node_rank=0" in x]
    exits = [i for i, x in enumerate(lines) if "exits with return code" in x]
    text = "".join(x for i, x in enumerate(lines) if i not in node0 and i != exits[0])
    assert findings_in(tmp_path, text)[0].ranks == [1]


def test_the_runtime_error_names_the_extension(tmp_path):
    # https://github.com/codefuse-ai/MFTCoder/issues/27, behind torchrun's prefix
    text = ("[rank0]: RuntimeError: Error building extension 'fused_adam'\n"
            "ERROR:torch.distributed.elastic.multiprocessing.api:failed (exitcode: 1) "
            "local_rank: 0 (pid: 24533) of binary: /opt/conda/envs/MFTCoder/bin/python\n")
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])
    assert "the extension 'fused_adam' failed to build" in lead.title
