"""Evidence family learned from locked run 14 (batch R1_, scored blind first): NCCL's own
list of the interfaces its sockets use. A connection NCCL could not make from a host whose
list holds container bridges or veths beside a real interface is the interface choice
(NCCL_SOCKET_IFNAME), not a network fault. Lines from real logs (their thread URLs in the
sidecars: tests/fixtures/reallogs/R1_nccl_socket_*, M1_healthy_ray_aws_veth_*)."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")
WRAPPED = REAL / "R1_nccl_socket_all_docker_bridges_two_nodes_torchrun.log"
RAY = REAL / "M1_healthy_ray_aws_veth_ibverbs_warn_nccl248.log"
_ERROR = [x for x in WRAPPED.read_text().splitlines(True) if not x.lstrip().startswith("[")
          and "Using" not in x]
_ONE_LINE = next(x for x in RAY.read_text().splitlines(True) if "NET/Socket : Using" in x)


def test_a_wrapped_interface_list_of_docker_bridges_is_the_interface_choice():
    lead = findings_of(WRAPPED)[0]
    assert (lead.id, lead.ranks) == ("ENV_NCCL_CONFIG", [])
    assert "NCCL_SOCKET_IFNAME=bond0" in lead.title and "15 of them" in lead.title
    assert lead.evidence["virtual"][:2] == ["br-05ab815fa14e", "br-d5d80d7dbbad"]


def test_one_nccl_line_listing_a_veth_beside_the_real_interface(tmp_path):
    assert len(_ERROR) == 3 and "veth" in _ONE_LINE
    lead = findings_in(tmp_path, _ONE_LINE + "".join(_ERROR))[0]
    assert lead.id == "ENV_NCCL_CONFIG" and "NCCL_SOCKET_IFNAME=ens5" in lead.title


def test_the_same_list_in_a_healthy_run_is_no_finding():
    assert not [f for f in findings_of(RAY) if f.severity == "error"]


def test_a_failure_from_real_interfaces_only_stays_a_connection_failure(tmp_path):
    real_only = _ONE_LINE.split(" [1]")[0] + "\n"
    lead = findings_in(tmp_path, real_only + "".join(_ERROR))[0]
    assert lead.id == "COMM_CONNECTIVITY"
