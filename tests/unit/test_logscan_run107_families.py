"""Evidence families learned from locked run 107 (batch XH9_ + XI1_, scored blind first:
10/11, the miss a set-up helper's error taken for the job's). Real logs (URLs in the
sidecars).

- A batch script's `conda activate` refused by a conda that has no such command
  ("conda: error: argument COMMAND: invalid choice: 'activate'"), after which the script
  went on, DeepSpeed's launchers started and every rank printed: the helper's refusal is
  not the job's failure; the job's own failure (NCCL's socket connect aborted in
  bootstrap, both nodes) is the finding.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of, lines_of

R = Path("tests/fixtures/reallogs")
CONDA = R / "XH9_megatron_ds_2node_nccl_socket_abort.log"


def test_a_helpers_refusal_before_the_job_ran_is_not_the_jobs_failure():
    [f, *_] = findings_of(CONDA)
    assert (f.id, f.severity) == ("COMM_CONNECTIVITY", "error")
    assert "Software caused connection abort" in f.title
    assert all("conda" not in x.title for x in findings_of(CONDA))


def test_the_same_refusal_with_nothing_after_it_is_the_failure(tmp_path):
    # the script stopped there (set -e): the helper's refusal is all that failed
    assert errors_of(findings_in(tmp_path, lines_of(CONDA, 1, 3)))[0][0] == "RANK_CRASHED"


def test_a_python_scripts_own_refusal_stays_the_ranks_failure(tmp_path):
    # the trainer's argparse error (train.py: error: ...) is the ranks' own, whatever
    # printed after it
    text = lines_of(CONDA, 1, 3).replace("conda: error:", "pretrain_gpt.py: error:")
    text += lines_of(CONDA, 4, 2100)
    found = findings_in(tmp_path, text)
    assert any("pretrain_gpt.py" in f.title for f in found if f.severity == "error")
