"""Blind run 85's lessons, two committed Slurm logs of one 2-node DDP job on Perlmutter
(URLs in their sidecars).

- Ranks 3 and 7 warned "Call to ibv_create_cq failed" and died; ranks 0 and 4 then saw
  "Connection closed by remote peer". The connection failure began where a rank warned of
  something else before any peer closed: called with no rank before.
- torch before 1.11 printed NCCL 2.9.8 as "NCCL version 20.9.8" in its error messages
  (pytorch#63445) beside NCCL's own "NCCL version 2.9.8" banner: called a version mismatch
  between nodes."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.diagnose.kb.nccl import nccl_version

REAL = Path("tests/fixtures/reallogs")
CQ = REAL / "XE6_ibv_create_cq_failed_ddp_init_2node_perlmutter.log"
SHIFTER = REAL / "XE6_ibv_create_cq_failed_ddp_init_shifter_nccl298.log"


def test_the_ranks_that_failed_before_any_peer_closed_are_named():
    lead = findings_of(CQ)[0]
    assert (lead.id, lead.ranks) == ("COMM_CONNECTIVITY", [3, 7])
    assert "ibv_create_cq" in lead.title and "rank 0,4" in lead.title


def test_a_warning_the_closed_on_ranks_print_too_starts_nothing(tmp_path):
    # rank 0 prints the same warning before its peer closes: it is the job's noise
    lines = CQ.read_text().splitlines(keepends=True)
    warn = next(line for line in lines if "ibv_create_cq failed" in line)
    text = "".join([warn.replace("3: ", "0: ", 1)] + lines)
    lead = findings_in(tmp_path, text)[0]
    assert (lead.id, lead.ranks) == ("COMM_CONNECTIVITY", [])


def test_torchs_misprinted_nccl_version_is_read_as_nccl_numbers_it():
    assert nccl_version("20.9.8") == "2.9.8"
    assert nccl_version("21.0.3") == "2.10.3"  # pytorch#63445's example
    assert nccl_version("2.7.8") == "2.7.8"
    found = findings_of(SHIFTER)
    assert "ENV_VERSION_MISMATCH" not in {f.id for f in found}
    assert (found[0].id, found[0].ranks) == ("COMM_CONNECTIVITY", [3, 7])


def test_a_process_that_prints_two_versions_is_not_compared(tmp_path):
    # rank 0 now prints 2.9.8 (its banner) and 2.10.3; ranks 3, 4, 7 only 2.10.3
    text = SHIFTER.read_text().replace("NCCL version 20.9.8", "NCCL version 21.0.3")
    assert "ENV_VERSION_MISMATCH" not in {f.id for f in findings_in(tmp_path, text)}
