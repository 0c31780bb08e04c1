"""Two families found among the development set's misses (real logs, URLs in the
sidecars): DeepSpeed's multi-node runner that cannot reach a hostfile host over ssh (exit
status 255 of its `ssh HOST hostname` check) is a node the launcher cannot reach, whatever
exception carries it; and a launcher's bare "exits with return code = 1" is the last
resort: a rank's own failure to reach the store (behind pdsh's host prefix) explains it."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

REAL = Path("tests/fixtures/reallogs")


def test_a_hostfile_host_ssh_cannot_reach_is_an_unreachable_node():
    lead = findings_of(REAL / "G1_deepspeed_launcher_hostfile_node_not_reachable_ssh.log")[0]
    assert lead.id == "ENV_RENDEZVOUS_UNREACHABLE"
    assert "could not reach a node of its hostfile over ssh" in lead.title


def test_the_ssh_check_alone_is_enough(tmp_path):
    # https://github.com/deepspeedai/DeepSpeed/issues/4907
    text = ("subprocess.CalledProcessError: Command 'ssh -o PasswordAuthentication=no "
            "192.168.3.100 hostname' returned non-zero exit status 255.\n")
    assert findings_in(tmp_path, text)[0].id == "ENV_RENDEZVOUS_UNREACHABLE"


def test_a_store_that_cannot_be_reached_explains_the_launchers_bare_exit():
    log = REAL / "c_deepspeed_pdsh_master_addr_wrong_nic_no_route.log"
    lead = findings_of(log)[0]
    assert lead.id == "ENV_RENDEZVOUS_UNREACHABLE", lead.title
    assert "113" in lead.evidence["errno"]


def test_a_bare_exit_with_nothing_else_is_still_a_crash(tmp_path):
    # the same log without the rank's own lines: only DeepSpeed's report of the exit
    log = REAL / "c_deepspeed_pdsh_master_addr_wrong_nic_no_route.log"
    text = "".join(x for x in log.read_text().splitlines(True)
                   if "exits with return code" in x)
    lead = findings_in(tmp_path, text)[0]
    assert lead.id == "RANK_CRASHED" and "its own error is not in the logs" in lead.title
