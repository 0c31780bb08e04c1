"""Failures to reach something, in the wordings the development set's misses showed:
c10d's client socket naming its endpoint as ``host:port`` (torch 2.0) as well as
``(host, port)``, torchelastic's ``RendezvousConnectionError`` (the agent never reached
its store), musl's ``Name does not resolve`` (Alpine, busybox's nslookup in a launch
script), and libmlx5's own dump of an InfiniBand completion error (the same failure as
NCCL's ``NET/IB : Got completion``, seen below it). Real logs, URLs in their sidecars."""

from __future__ import annotations

from pathlib import Path

import pytest
from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")


@pytest.mark.parametrize(("name", "fid", "words"), [
    ("F1_rdzv_connection_timeout_c10d_multinode", "ENV_RENDEZVOUS_UNREACHABLE",
     "rendezvous store at 192.0.0.1:1234"),
    ("F3_rendezvous_master_dns_unresolved_swift_dlc", "ENV_RENDEZVOUS_UNREACHABLE",
     "did not resolve"),
    ("H1_ib_mlx5_completion_error_weight_sync_openrlhf", "COMM_CONNECTIVITY",
     "completion with error (libmlx5, host host_unknown)"),
])
def test_the_family_names_the_failure(name: str, fid: str, words: str) -> None:
    lead = findings_of(REAL / f"{name}.log")[0]
    assert lead.id == fid and words in lead.title, lead.title


def test_the_rendezvous_error_alone_is_an_unreachable_store(tmp_path) -> None:
    text = ("torch.distributed.elastic.rendezvous.api.RendezvousConnectionError: The "
            "connection to the C10d store has failed. See inner exception for details.\n")
    assert findings_in(tmp_path, text)[0].id == "ENV_RENDEZVOUS_UNREACHABLE"


def test_other_rendezvous_errors_are_not_this_family(tmp_path) -> None:
    # the rendezvous closed (a peer ended it): not a store out of reach
    text = ("torch.distributed.elastic.rendezvous.api.RendezvousClosedError\n")
    assert findings_in(tmp_path, text)[0].id != "ENV_RENDEZVOUS_UNREACHABLE"


def test_a_host_that_resolves_is_not_this_family(tmp_path) -> None:
    text = "nslookup: resolved 'master-0' to 10.0.0.4\nRuntimeError: something else\n"
    assert findings_in(tmp_path, text)[0].id != "ENV_RENDEZVOUS_UNREACHABLE"


def test_an_mlx5_device_name_in_nccl_info_is_no_error(tmp_path) -> None:
    text = ("c4140-01:147406:148900 [0] NCCL INFO NET/IB: [0] mlx5_0:1/IB\n"
            "step 10 loss 1.0\n")
    assert not [f for f in findings_in(tmp_path, text) if f.severity == "error"]
