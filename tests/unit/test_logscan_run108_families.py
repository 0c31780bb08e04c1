"""Evidence families learned from locked run 108 (batch XI2_, Slurm outputs of HPC sites,
scored blind first: 4/7), and from the review of the rules written before it. Real logs
(URLs in the sidecars).

- TCPStore's server waiting for its clients at start-up ("Timed out after 1801 seconds
  waiting for clients. 1/16 clients joined."): the process that hosts the store (rank 0
  of an env:// rendezvous) waited for ranks that never reached init_process_group; with
  only the host joined they are every other rank (RANK_UNRESPONSIVE, rank 1-15).
- A script the rank's own Python cannot open ("can't open file ... [Errno 2]", every rank
  of a torchrun job exit code 2) is the rank's process failing, RANK_CRASHED; a program
  the scheduler cannot exec stays UNRECOGNIZED_FAILURE (nothing of the job ran).
- From the review: a launcher's own command-line refusal stays the failure whatever
  printed after it (one node's launcher refusing while another's ranks start); a
  completion line followed by a new start does not make a later stop a warning; a loss in
  another file of the job makes a FloatingPointError the numbers.
"""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of, lines_of

from ddpdoctor.diagnose import LogInput, diagnose_logs

R = Path("tests/fixtures/reallogs")
STORE = R / "XI2_anemoi_4node_16rank_tcpstore_1of16_joined.log"
CANT_OPEN = R / "XI2_jureca_torchrun_4rank_script_path_exitcode2.log"
EXECVE = R / "L1_srun_execve_torchrun_not_found_mahti.log"


def test_the_store_host_waiting_for_its_clients_names_the_ranks_that_never_came():
    [f, *_] = findings_of(STORE)
    assert (f.id, f.ranks) == ("RANK_UNRESPONSIVE", list(range(1, 16)))
    assert "the store's host waited 1801 s for them (1/16 clients joined)" in f.title


def test_some_clients_joined_names_no_rank(tmp_path):
    # which of the others joined cannot be told: the count alone
    text = STORE.read_text().replace("1/16 clients joined", "3/16 clients joined")
    [f, *_] = findings_in(tmp_path, text)
    assert (f.id, f.ranks) == ("RANK_UNRESPONSIVE", [])
    assert f.title.startswith("13 of 16 ranks never reached init_process_group;")


def test_a_script_the_ranks_python_cannot_open_is_the_ranks_failure():
    [f, *_] = findings_of(CANT_OPEN)
    assert f.id == "RANK_CRASHED"
    assert f.title.startswith("the rank's Python could not open the script it was told to run")


def test_a_program_the_scheduler_cannot_exec_is_no_ranks_failure():
    [f, *_] = findings_of(EXECVE)
    assert f.id == "UNRECOGNIZED_FAILURE"
    assert f.title.startswith("the launcher could not start what it was told to run")


def test_a_launchers_own_refusal_stays_the_failure_whatever_printed_after(tmp_path):
    refused = lines_of(R / "XF6_accelerate_fsdp_launch_empty_machine_rank.log", 79, 79)
    ranks = lines_of(R / "XA6_healthy_accelerate_ddp_find_unused_warning_vla.log", 1, 40)
    [f, *_] = findings_in(tmp_path, refused + ranks)
    assert f.id == "UNRECOGNIZED_FAILURE"
    assert f.title.startswith("the launcher (Accelerate launch command) refused its command")


def test_a_stop_after_a_second_start_is_not_after_the_completion(tmp_path):
    # a Lightning run to `Trainer.fit` stopped, the same job started again (its set-up
    # lines), then a bare cancel before the second run finished
    done = R / "X79_lightning_ddp_slurm_2node_8rank_healthy.log"
    cancel = lines_of(R / "XG9_mmdet_4gpu_slurm_job_cancelled_mid_epoch.log", 410, 410)
    text = done.read_text() + lines_of(done, 1, 19) + cancel
    assert errors_of(findings_in(tmp_path, text))[0][0] == "UNRECOGNIZED_FAILURE"


def test_a_loss_in_another_file_of_the_job_makes_a_floating_point_error_the_numbers(tmp_path):
    losses = "".join(line + "\n" for line in (
        R / "P1_megatron_benchmark_slurm_cancelled.log").read_text().splitlines()
        if line.startswith((" iteration      190/", " iteration      200/")))
    (tmp_path / "rank0.log").write_text(losses)
    # numpy 2.4.6's own traceback, produced here (np.seterr(all="raise"); x / 0.0)
    (tmp_path / "rank1.log").write_text(
        'Traceback (most recent call last):\n  File "<string>", line 2, in <module>\n'
        "FloatingPointError: divide by zero encountered in divide\n")
    found = diagnose_logs([LogInput(str(tmp_path / "rank0.log")),
                           LogInput(str(tmp_path / "rank1.log"))])[0]
    assert errors_of(found)[0] == ("GRAD_NONFINITE", [1])
