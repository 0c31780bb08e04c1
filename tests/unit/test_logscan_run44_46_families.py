"""Blind runs 44 to 46's lessons (batches X28 to X31), each a family:

- Open MPI's ``--tag-output`` prefix (``[1,3]<stderr>:``, mpirun and horovodrun) names
  the rank of every line, as torchrun's ``[rank3]:`` does.
- mpirun's report of the first process that exited non-zero ("Process name: [[job,1],R]",
  its exit code on the next line) names rank R, as every other launcher's report does:
  an unprefixed traceback is then R's.
- A CUDA kernel's assert ("... block: [..], thread: [..] Assertion `...` failed") and
  torch < 1.5's "cuda runtime error (N) : ..." are CUDA errors of the rank that printed
  them: a device-side assert on two ranks names both.
- "Horovod has been shut down. This was caused by an exception on one of the ranks" is the
  fallout of another rank's failure, as an aborted NCCL communicator is.
- NCCL whose sockets use loopback alone, with its connections refused: loopback reaches no
  other node (a setting, not a rendezvous that is down).
- NCCL < 2.12's wording of a failed socket connect ("include/socket.h:406 NCCL WARN Connect
  to ADDR<PORT> failed : No route to host") is the same connect failure as the newer one,
  and a native crash of the ranks after it (old NCCL's error path segfaults) is its fallout.

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

DIR = Path("tests/fixtures/reallogs")
ASSERT_LOG = DIR / "X31_mpirun_2rank_embedding_index_device_assert_both_ranks.log"
HOROVOD_LOG = DIR / "X31_mpirun_horovod_4rank_rank0_json_set_typeerror_after_training.log"
SHUTDOWN_LOG = DIR / "L1_mpirun_horovod_shutdown_cuda_oom_uniter.log"
LO_LOG = DIR / "X29_nccl_socket_ifname_lo_two_nodes.log"
NO_ROUTE_LOG = DIR / "X30_shifter_2node_nccl_bootstrap_ib0_no_route_segfault.log"


def _ids(found):
    return [(f.id, f.ranks) for f in found]


def test_a_device_side_assert_on_two_mpi_ranks_names_both():
    lead = findings_of(ASSERT_LOG)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0, 1])
    assert "device-side assert" in lead.title


def test_the_kernel_assert_alone_is_its_ranks_cuda_error(tmp_path):
    line = ASSERT_LOG.read_text().splitlines(True)[1]
    assert line.startswith("[1,0]<stderr>:")
    lead = findings_in(tmp_path, line)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])
    assert "srcIndex < srcSelectDimSize" in lead.title


def test_the_mpi_tag_gives_the_rank_of_a_plain_exception(tmp_path):
    line = ASSERT_LOG.read_text().splitlines(True)[0]
    assert _ids(findings_in(tmp_path, line))[0] == ("RANK_CRASHED", [1])
    # the same line without its tag names no rank
    bare = line.split(":", 1)[1].split(">:", 1)[-1]
    assert _ids(findings_in(tmp_path, bare))[0][1] == []


def test_mpiruns_first_failed_process_owns_the_unprefixed_traceback():
    lead = findings_of(HOROVOD_LOG)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])
    assert "TypeError" in lead.title


def test_the_process_name_without_its_exit_code_line_names_no_rank(tmp_path):
    text = HOROVOD_LOG.read_text()
    cut = "".join(x for x in text.splitlines(True) if not x.strip().startswith("Exit code:"))
    tail = cut[cut.index("mpirun detected"):]
    assert all(f.ranks == [] for f in findings_in(tmp_path, tail))


def test_horovods_shutdown_is_fallout_of_the_rank_mpirun_names():
    lead = findings_of(SHUTDOWN_LOG)[0]
    assert (lead.id, lead.ranks) == ("RANK_CRASHED", [0])


def test_nccl_on_loopback_alone_with_refused_connections_is_a_setting():
    lead = findings_of(LO_LOG)[0]
    assert lead.id == "ENV_NCCL_CONFIG"
    assert "loopback" in lead.title and "NCCL_SOCKET_IFNAME" in lead.title


def test_nccl_on_loopback_with_no_failure_is_nothing(tmp_path):
    text = "".join(x for x in LO_LOG.read_text().splitlines(True) if "refused" not in x)
    assert [f for f in findings_in(tmp_path, text) if f.severity == "error"] == []


def test_refused_connections_beside_a_real_interface_are_not_loopbacks(tmp_path):
    text = LO_LOG.read_text().replace("[0]lo:127.0.0.1<0>",
                                      "[0]lo:127.0.0.1<0> [1]eth0:10.0.0.5<0>")
    assert not [f for f in findings_in(tmp_path, text) if "loopback" in f.title]


def test_the_old_connect_failure_wording_is_a_connect_failure_of_its_ranks(tmp_path):
    text = "".join(x for x in NO_ROUTE_LOG.read_text().splitlines(True)
                   if "srun: error" not in x and "slurmstepd" not in x)
    lead = findings_in(tmp_path, text)[0]
    # the ranks that could not connect are where it was seen, not the culprit: none named
    assert (lead.id, lead.ranks) == ("COMM_CONNECTIVITY", [])
    assert "rank 4-7" in lead.title and "No route to host" in lead.title


def test_a_segfault_after_the_connect_failure_is_its_fallout():
    lead = findings_of(NO_ROUTE_LOG)[0]
    assert lead.id == "COMM_CONNECTIVITY" and "rank 4-7" in lead.title


def test_a_segfault_before_any_connect_failure_is_still_a_native_crash(tmp_path):
    lines = NO_ROUTE_LOG.read_text().splitlines(True)
    crash = [x for x in lines if "Segmentation fault" in x]
    text = "".join(crash + [x for x in lines if "Connect to" in x])
    assert findings_in(tmp_path, text)[0].title.endswith("crashed in native code: "
                                                          "Segmentation fault")
