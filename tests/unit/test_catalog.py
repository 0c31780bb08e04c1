import pytest

from ddpdoctor.core import playbook
from ddpdoctor.core.catalog import CATALOG, spec
from ddpdoctor.core.findings import Finding, format_ranks

DESIGN_IDS = {
    "ENV_VERSION_MISMATCH", "ENV_SHM_TOO_SMALL", "ENV_PORT_IN_USE", "ENV_RENDEZVOUS_UNREACHABLE",
    "ENV_NCCL_CONFIG", "ENV_LIMITS", "GPU_DEVICE_MAPPING", "GPU_HEALTH", "GPU_MEMORY_OCCUPIED",
    "TOPO_NO_P2P", "COMM_CONNECTIVITY", "COMM_BANDWIDTH_LOW", "COMM_SLOW_RANK",
    "DATALOADER_WORKER_FAILURE", "DATALOADER_BOTTLENECK", "DDP_UNUSED_PARAMETERS",
    "DDP_FIND_UNUSED_OVERHEAD", "DDP_REDUCTION_NOT_FINISHED", "GRAD_NONFINITE", "PARAM_DESYNC",
    "SAMPLER_MISSING", "SAMPLER_EPOCH_NOT_SET", "STRAGGLER", "MEMORY_GROWTH", "OOM",
    "HANG_RANK_MISSING_COLLECTIVE", "HANG_COLLECTIVE_MISMATCH", "HANG_P2P_DEADLOCK",
    "HANG_DATALOADER", "RANK_CRASHED", "COLLECTIVE_TIMEOUT",
}


def test_catalog_holds_every_design_id():
    # Ids are a public contract: none may disappear or be renamed.
    assert DESIGN_IDS <= set(CATALOG)


def test_unknown_id_is_a_programming_error():
    with pytest.raises(ValueError, match="unknown finding id 'HANG_TYPO'"):
        Finding("HANG_TYPO", "x")
    with pytest.raises(ValueError):
        spec("NOPE")


def test_finding_defaults_from_catalog():
    f = Finding("OOM", "out of memory", ranks=[3, 1, 1])
    assert f.severity == "error"
    assert f.playbook == "OOM"
    assert f.ranks == [1, 3]
    assert Finding("DDP_FIND_UNUSED_OVERHEAD", "x").severity == "info"
    with pytest.raises(ValueError, match="severity"):
        Finding("OOM", "x", severity="fatal")


def test_finding_round_trips_through_dict():
    f = Finding("STRAGGLER", "slow", ranks=[2], evidence={"ms": [1, 2]})
    assert Finding.from_dict(f.to_dict()) == f


@pytest.mark.parametrize("ranks,text", [([], ""), ([0], "0"), ([0, 1, 2, 5], "0-2,5"),
                                        ([1, 3, 4], "1,3-4")])
def test_format_ranks(ranks, text):
    assert format_ranks(ranks) == text


def test_every_catalog_id_has_a_playbook_that_parses_and_agrees():
    shipped = set(playbook.available())
    assert set(CATALOG) <= shipped, f"missing playbooks: {sorted(set(CATALOG) - shipped)}"
    assert shipped <= set(CATALOG), f"playbooks for unknown ids: {sorted(shipped - set(CATALOG))}"
    for pb in playbook.load_all():
        entry = CATALOG[pb.id]
        assert pb.severity == entry.severity, pb.id
        assert set(pb.applies_to) == set(entry.found_by), pb.id
        for section in playbook.REQUIRED_SECTIONS:
            assert len(pb.sections[section]) > 40, f"{pb.id}: section {section} is too thin"


GOOD = """---
id: OOM
title: Out of memory
severity: error
applies-to: watch, run
---
Intro.

## Symptoms
s
## Why it happens
w
## Fix
f
## Verify
v
"""


def test_playbook_parser_accepts_the_format():
    pb = playbook.parse(GOOD)
    assert pb.id == "OOM" and pb.applies_to == ["watch", "run"]
    assert pb.sections["Fix"] == "f"


@pytest.mark.parametrize("broken,message", [
    (GOOD.replace("---\nid", "id", 1), "must start"),
    (GOOD.replace("title: Out of memory\n", ""), "lacks title"),
    (GOOD.replace("## Verify\nv\n", ""), "Verify"),
    (GOOD.replace("## Fix\nf\n", "## Fix\n\n"), "Fix"),
    ("---\nid: OOM\n", "not closed"),
])
def test_playbook_parser_rejects_broken_files(broken, message):
    with pytest.raises(playbook.PlaybookError, match=message):
        playbook.parse(broken)
