"""NCCL_* / TORCH_NCCL_* / GLOO_* settings users copy from recipes, judged against the table
of what NCCL and torch really read (ddpdoctor/distenv/table.py). Planted env dicts in,
exact ENV_NCCL_CONFIG findings (severity, ranks) out; one real 2-rank `check --probe env`."""

import json

import pytest

from ddpdoctor.check.analysis import env
from ddpdoctor.distenv import judge as nccl_env
from ddpdoctor.distenv import table as nccl_vars

CPU_P2P = {"skipped": "NVML: no NVIDIA driver (NVML Shared Library Not Found)"}


def _rank(env_vars=None, nccl="2.27.7", torch="2.13.0", infiniband=None, p2p=None,
          host="node-a"):
    return {
        "hostname": host, "pid": 1, "local_rank": 0,
        "versions": {"python": "3.11.7", "torch": torch, "cuda": "12.8", "nccl": nccl},
        "env": {"MASTER_ADDR": "10.0.0.1", **(env_vars or {})},
        "interfaces": {"lo": ["127.0.0.1"], "eth0": ["10.0.0.2"]},
        "infiniband": infiniband or [],
        "p2p": p2p if p2p is not None else {},
        "shm": {"total": 8 << 30, "free": 8 << 30},
        "ulimit": {"nofile": [1048576, 1048576], "memlock": [None, None]},
        "cpu_count": 64, "affinity": list(range(16)), "numa_nodes": {"node0": "0-63"},
        "torch_threads": 4, "torch_interop_threads": 4, "local_world_size": 2,
    }


def _config(per_rank):
    """(title, severity, ranks) of every ENV_NCCL_CONFIG finding, and the checks."""
    checks, findings = env.analyze(per_rank, len(per_rank))
    got = [f for f in findings if f.id == "ENV_NCCL_CONFIG"]
    return got, {c.name: c for c in checks}


def _same_everywhere(n=2, **kw):
    return {r: _rank(**kw) for r in range(n)}


def _one(per_rank):
    got, _ = _config(per_rank)
    assert len(got) == 1, [(f.title, f.severity, f.ranks) for f in got]
    return got[0]


# -- the recipe settings of issue #29 --

def test_nccl_timeout_is_not_a_variable():
    f = _one(_same_everywhere(env_vars={"NCCL_TIMEOUT": "1800"}))
    assert (f.severity, f.ranks, f.evidence["problem"]) == ("warning", [0, 1], "not_a_variable")
    assert "init_process_group(timeout=...)" in f.evidence["replacement"]
    assert f.evidence["source"].startswith("https://docs.nvidia.com/")


def test_nccl_min_nrings_is_an_old_alias():
    f = _one(_same_everywhere(env_vars={"NCCL_MIN_NRINGS": "4"}))
    assert (f.severity, f.evidence["problem"]) == ("warning", "renamed")
    assert f.evidence["replacement"] == "NCCL_MIN_CTAS"
    assert "deprecated alias" in f.title


def test_nccl_tree_threshold_is_obsolete_unless_the_rank_runs_nccl_2_4():
    per = {0: _rank({"NCCL_TREE_THRESHOLD": "0"}), 1: _rank({"NCCL_TREE_THRESHOLD": "0"}),
           2: _rank({"NCCL_TREE_THRESHOLD": "0"}, nccl="2.4.8")}
    f = _one(per)
    assert (f.severity, f.ranks, f.evidence["problem"]) == ("warning", [0, 1], "obsolete")
    assert f.evidence["since"] == "2.5" and "NCCL_ALGO" in f.evidence["replacement"]


@pytest.mark.parametrize("old", ["NCCL_BLOCKING_WAIT", "NCCL_ASYNC_ERROR_HANDLING"])
def test_torch_renamed_nccl_prefixed_variables(old):
    f = _one(_same_everywhere(env_vars={old: "1"}))
    assert (f.severity, f.evidence["problem"], f.evidence["owner"]) == \
        ("warning", "renamed", "torch")
    assert f.evidence["replacement"] == "TORCH_" + old
    assert f.evidence["source"] == "https://github.com/pytorch/pytorch/pull/114077"


def test_torch_rename_is_no_problem_on_torch_before_2_2():
    assert _config(_same_everywhere(env_vars={"NCCL_BLOCKING_WAIT": "1"},
                                    torch="2.1.2"))[0] == []


def test_renamed_alias_shadowed_by_the_new_name():
    f = _one(_same_everywhere(env_vars={"NCCL_ASYNC_ERROR_HANDLING": "1",
                                        "TORCH_NCCL_ASYNC_ERROR_HANDLING": "3"}))
    assert "is set too and wins" in f.title and f.evidence["replacement_also_set"] is True


def test_ib_disable_on_a_host_with_infiniband_devices():
    ib = [{"name": "mlx5_0", "ports": {"1": {"link_layer": "InfiniBand", "state": "4: ACTIVE"}}}]
    per = {0: _rank({"NCCL_IB_DISABLE": "1"}, infiniband=ib),
           1: _rank({"NCCL_IB_DISABLE": "1"}, infiniband=ib),
           2: _rank({"NCCL_IB_DISABLE": "1"}, host="node-b")}  # no IB there: fine
    f = _one(per)
    assert (f.severity, f.ranks, f.evidence["problem"]) == \
        ("warning", [0, 1], "ib_disabled_with_ib")
    assert f.check == "socket config" and "mlx5_0" in f.title


def test_ib_disable_true_is_read_as_zero():
    ib = [{"name": "mlx5_0", "ports": {}}]
    f = _one(_same_everywhere(env_vars={"NCCL_IB_DISABLE": "true"}, infiniband=ib))
    assert (f.severity, f.evidence["problem"], f.evidence["read_as"]) == \
        ("warning", "bad_value", 0)  # and no "IB disabled" finding: NCCL keeps IB on


def test_typo_gets_did_you_mean():
    f = _one(_same_everywhere(env_vars={"NCCL_SOCKET_IFNAM": "eth0"}))
    assert f.severity == "warning" and f.evidence["suggestion"] == "NCCL_SOCKET_IFNAME"
    assert "did you mean NCCL_SOCKET_IFNAME?" in f.title


def test_torch_variable_spelled_with_the_nccl_prefix():
    f = _one(_same_everywhere(env_vars={"NCCL_TRACE_BUFFER_SIZE": "2000"}))
    assert f.evidence["replacement"] == "TORCH_NCCL_TRACE_BUFFER_SIZE"


def test_unknown_name_without_a_close_one_is_info():
    f = _one(_same_everywhere(env_vars={"NCCL_SOMEPLUGIN_QUEUE_DEPTH": "8"}))
    assert (f.severity, f.evidence["problem"]) == ("info", "unknown")


def test_build_and_container_variables_are_no_mistake():
    # NVIDIA's containers export NCCL_VERSION; torch's build reads NCCL_ROOT / NCCL_LIB_DIR.
    assert _config(_same_everywhere(env_vars={"NCCL_VERSION": "2.27.7",
                                              "NCCL_LIB_DIR": "/usr/lib"}))[0] == []


def test_deprecated_but_working_is_info():
    f = _one(_same_everywhere(env_vars={"NCCL_MIN_NCHANNELS": "4"}))
    assert (f.severity, f.evidence["replacement"]) == ("info", "NCCL_MIN_CTAS")


def test_value_that_breaks_is_an_error():
    f = _one(_same_everywhere(env_vars={"TORCH_DISTRIBUTED_DEBUG": "VERBOSE"}))
    assert (f.severity, f.evidence["problem"]) == ("error", "bad_value")
    assert _config(_same_everywhere(env_vars={"TORCH_DISTRIBUTED_DEBUG": "detail"}))[0] == []


def test_p2p_level_is_case_sensitive():
    f = _one(_same_everywhere(env_vars={"NCCL_P2P_LEVEL": "nvl"}, p2p=CPU_P2P))
    assert (f.severity, f.evidence["suggestion"]) == ("warning", "NCCL_P2P_LEVEL=NVL")


def test_only_the_rank_that_differs_is_named():
    per = _same_everywhere(4)
    per[2] = _rank({"NCCL_ASYNC_ERROR_HANDLING": "1"})
    _, findings = env.analyze(per, 4)
    assert sorted((f.id, f.ranks) for f in findings) == \
        [("ENV_NCCL_CONFIG", [2]), ("ENV_VAR_MISMATCH", [2])]


def test_secret_looking_values_never_show():
    digest = "sha256:0123456789abcdef"
    f = _one(_same_everywhere(env_vars={"NCCL_SOMEPLUGIN_TOKEN": digest}))
    assert digest not in repr(f.to_dict())


# -- NCCL_P2P_LEVEL against the measured topology --

def _pairs(path, n=4, p2p_read="OK"):
    return {"gpus": n, "pairs": [{"a": a, "b": b, "path": path, "p2p_read": p2p_read}
                                 for a in range(n) for b in range(a + 1, n)]}


def test_p2p_level_that_turns_p2p_off_between_gpus_that_have_it():
    f = _one(_same_everywhere(env_vars={"NCCL_P2P_LEVEL": "PIX"}, p2p=_pairs("SYS")))
    assert (f.severity, f.ranks, f.evidence["problem"]) == \
        ("warning", [0, 1], "p2p_level_topology")
    assert len(f.evidence["pairs_turned_off"]) == 6 and "6 of 6" in f.title
    assert f.check == "p2p level"


def test_p2p_level_nvl_on_nvlink_pairs_agrees():
    got, checks = _config(_same_everywhere(env_vars={"NCCL_P2P_LEVEL": "NVL"},
                                           p2p=_pairs("NVL")))
    assert got == [] and checks["p2p level"].status == "ok"


def test_p2p_level_ignores_pairs_without_p2p_support():
    got, _ = _config(_same_everywhere(env_vars={"NCCL_P2P_LEVEL": "PIX"},
                                      p2p=_pairs("SYS", p2p_read="CHIPSET_NOT_SUPPORTED")))
    assert got == []


def test_p2p_level_on_cpu_is_skipped_with_the_reason():
    got, checks = _config(_same_everywhere(env_vars={"NCCL_P2P_LEVEL": "NVL"}, p2p=CPU_P2P))
    assert got == []
    assert checks["p2p level"].status == "skipped"
    assert "NVML Shared Library Not Found" in checks["p2p level"].summary


def test_no_p2p_level_no_check_line():
    _, checks = _config(_same_everywhere())
    assert "p2p level" not in checks


def test_p2p_disable_overrides_p2p_level():
    f = _one(_same_everywhere(env_vars={"NCCL_P2P_LEVEL": "SYS", "NCCL_P2P_DISABLE": "1"},
                              p2p=_pairs("SYS")))
    assert f.evidence["problem"] == "contradiction"


def test_legacy_integer_p2p_level():
    assert nccl_env.p2p_level("0") == "LOC" and nccl_env.p2p_level("9") == "SYS"
    assert nccl_env.p2p_level("nvl") is None and nccl_env.p2p_level("PHB") == "PHB"


# -- the table itself --

@pytest.mark.parametrize("text,value", [("1", 1), ("true", None), ("0x10", 16), (" -3", -3),
                                        ("010", 8), ("08", 0), ("1abc", 1), ("", None)])
def test_strtoll_as_nccl_reads_integers(text, value):
    assert nccl_env.strtoll(text) == value


def test_every_entry_names_its_source_and_replacements_exist():
    for name, var in nccl_vars.TABLE.items():
        assert var.name == name and var.source.startswith("https://"), name
        if var.status == "renamed":
            assert nccl_vars.lookup(var.replacement) is not None, name
        assert nccl_vars.judged(name), name
    assert nccl_vars.TABLE["NCCL_SOCKET_IFNAME"].status == "valid"
    assert nccl_vars.TABLE["NCCL_IB_DISABLE"].integer


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_two_ranks_one_with_a_misspelt_variable():
    from ddpdoctor.check.run import run_check

    report = run_check(2, ["env"], "gloo", 60, rank_env={1: {"NCCL_SOCKET_IFNAM": "eth0"}})
    got = sorted((f.id, f.ranks) for f in report.findings)
    assert got == [("ENV_NCCL_CONFIG", [1]), ("ENV_VAR_MISMATCH", [1])], report.findings
    f = next(f for f in report.findings if f.id == "ENV_NCCL_CONFIG")
    assert f.severity == "warning" and f.evidence["suggestion"] == "NCCL_SOCKET_IFNAME"
    assert f.evidence["variable"] == "NCCL_SOCKET_IFNAM"


def test_a_value_that_breaks_torch_distributed_import_is_found_before_any_rank_starts():
    from ddpdoctor.distenv.judge import import_breakers

    found = import_breakers({"TORCH_DISTRIBUTED_DEBUG": "VERBOSE", "NCCL_DEBUG": "INFO",
                             "PATH": "/usr/bin"})
    assert [(f.id, f.severity, f.ranks) for f in found] == [("ENV_NCCL_CONFIG", "error", [])]
    assert found[0].title.startswith("TORCH_DISTRIBUTED_DEBUG=VERBOSE is not a value torch "
                                     "accepts (OFF, INFO, DETAIL)")
    assert import_breakers({"TORCH_DISTRIBUTED_DEBUG": "DETAIL"}) == []


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_check_with_such_a_value_reports_it_instead_of_an_internal_error():
    import os
    import subprocess

    from jobs import ddpdoctor_cmd

    env = {**os.environ, "TORCH_DISTRIBUTED_DEBUG": "VERBOSE"}
    proc = subprocess.run(ddpdoctor_cmd() + ["check", "--nproc", "2", "--json", "-"], env=env,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    assert [(f["id"], f["evidence"]["variable"]) for f in report["findings"]] == [
        ("ENV_NCCL_CONFIG", "TORCH_DISTRIBUTED_DEBUG")]
    assert "internal error" not in proc.stderr
