"""Blind run 88's lessons (committed run logs, URLs in their sidecars):

- NCCL's "Failed to initialize any NET plugin" on the four ranks of one node while 52
  other ranks of the same srun launch did not: one launch has one setting, so it is that
  node's network (plugin, NIC, driver), not NCCL_NET: COMM_CONNECTIVITY on those ranks,
  drain the node. Where every rank fails, or the lines do not say whose they are, it stays
  a setting (ENV_NCCL_CONFIG).
- Two identical tracebacks with no rank prefix, and torchrun's summary naming two ranks
  that exited with an error code of their own (the others got its SIGTERM): one each, one
  finding naming both; a config check in the script's argument file is fixed in the config.
- Inductor's legacy TF32 read after the new API set it (pytorch#166387): a known bug."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import errors_of, findings_in, findings_of

from ddpdoctor.core.next_step import decide

REAL = Path("tests/fixtures/reallogs")
NET = REAL / "XE9_megatron_nccl_net_plugin_init_fail_one_node.log"
TWO = REAL / "XE9_swift_fsdp2_sharded_state_dict_config_error.log"


def test_a_net_plugin_failing_on_one_nodes_ranks_is_that_node():
    found = findings_of(NET)
    assert errors_of(found)[0] == ("COMM_CONNECTIVITY", [40, 41, 42, 43])
    assert "nid006742" in found[0].title
    assert decide(found).action.value == "drain_node"


def test_a_net_plugin_failing_on_every_rank_is_the_setting():
    found = findings_of(REAL / "V1_nccl_net_shm_invalid_plugin_init_fails_torchrun.log")
    assert errors_of(found)[0][0] == "ENV_NCCL_CONFIG"


def test_the_same_failure_on_most_ranks_is_no_node_of_its_own(tmp_path):
    # every one of the 56 ranks fails the same way: no "other ranks did"
    lines = NET.read_text().splitlines(keepends=True)
    failing = [ln for ln in lines if ln.startswith("40: Failed to initialize any NET plugin")]
    assert failing
    text = "".join(lines) + "".join(f"{r}: Failed to initialize any NET plugin\n"
                                    for r in range(56) if r not in (40, 41, 42, 43))
    assert errors_of(findings_in(tmp_path, text))[0][0] == "ENV_NCCL_CONFIG"


def test_identical_unranked_tracebacks_go_one_to_each_rank_that_exited_with_an_error():
    found = findings_of(TWO)
    assert errors_of(found) == [("RANK_CRASHED", [3, 7])]
    assert decide(found).action.value == "fix_config"  # raised in sft_args.py's check


def test_one_traceback_for_two_failed_ranks_names_the_first(tmp_path):
    text = TWO.read_text()
    first = text.index("Traceback (most recent call last):")
    second = text.index("Traceback (most recent call last):", first + 1)
    end = text.index("\n", text.index("ValueError: FSDP2", second)) + 1
    found = findings_in(tmp_path, text[:second] + text[end:])
    assert errors_of(found)[0] == ("RANK_CRASHED", [3])


def test_inductors_legacy_tf32_read_is_a_known_bug():
    found = findings_of(REAL / "XE9_fsdp2_torch_compile_tf32_api_inductor_bug.log")
    assert found[0].id == "KNOWN_UPSTREAM_BUG"
    assert found[0].evidence.get("bug") == "inductor-legacy-tf32-read"


def test_a_title_never_says_rank_question_mark():
    # gloo's size check aborts the rank that received too much, printing no rank prefix
    # (tests/fixtures/logs/README.md): the title says what it knows, the sizes included
    found = findings_of(Path("tests/fixtures/logs/gloo_size_mismatch_unprefixed_abort.log"))
    lead = found[0]
    assert lead.id == "HANG_COLLECTIVE_MISMATCH"
    assert lead.title.endswith("(a transfer of 64 bytes where 48 were expected)")
    assert "?" not in lead.title


def test_a_checkpoint_exception_gives_each_named_rank_its_own_error():
    # torch.distributed.checkpoint's "CheckpointException ranks:dict_keys([0, 1, 6])" on
    # rank 7, then one "(RANK N)" traceback per rank: a full disk under every writer
    found = findings_of(REAL / "XE9_torchtitan_pp_final_ckpt_disk_full.log")
    inner = [f for f in found if "unexpected pos" in f.title]
    assert [(f.id, f.ranks) for f in inner] == [("RANK_CRASHED", [0, 1, 6])]


def test_a_save_short_of_its_bytes_is_a_full_disk_to_free():
    from ddpdoctor.core.findings import Finding

    lead = Finding("RANK_CRASHED", "rank 0-1,6 raised RuntimeError: [enforce fail at "
                   "inline_container.cc:664] . unexpected pos 704 vs 598", ranks=[0, 1, 6])
    step = decide([lead])
    assert step.action.value == "fix_config" and "full" in step.reason
