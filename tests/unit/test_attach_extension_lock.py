"""Ranks stuck on torch's C++ extension build lock: classified as waiting for the lock,
and a stale lock (no rank building) is named, never a hang run stops the job for.

The frames are those py-spy showed of two real DeepSpeed ranks (deepspeed 0.19.8, torch
2.13, 2 CPU ranks) after a build was killed and left its lock file, 2026-11-27; the same
start-up hang is OpenRLHF/OpenRLHF#208 (the corpus' K1_jit_extension_lock_hang_*)."""

from __future__ import annotations

from attach_helpers import TORCH, f, rank, thread

from ddpdoctor.attach import classify as c
from ddpdoctor.attach.analyze import analyze
from ddpdoctor.hang.verdict import judge

DS = "/venv/lib/python3.11/site-packages/deepspeed"
SCRIPT = "/w/tests/fixtures/deepspeed/ds_train.py"


def _waiting_for_lock() -> list:
    return [f("FileBaton.wait", f"{TORCH}/utils/file_baton.py", 50),
            f("_jit_compile", f"{TORCH}/utils/cpp_extension.py", 2400),
            f("load", f"{TORCH}/utils/cpp_extension.py", 1927),
            f("OpBuilder.jit_load", f"{DS}/ops/op_builder/builder.py", 613),
            f("OpBuilder.load", f"{DS}/ops/op_builder/builder.py", 566),
            f("build_shm_op", f"{DS}/comm/torch.py", 51),
            f("TorchBackend.__init__", f"{DS}/comm/torch.py", 207),
            f("init_distributed", f"{DS}/comm/comm.py", 910),
            f("<module>", SCRIPT, 21)]


def _building() -> list:
    return [f("_run_ninja_build", f"{TORCH}/utils/cpp_extension.py", 2600),
            f("_write_ninja_file_and_build_library", f"{TORCH}/utils/cpp_extension.py", 2500),
            *_waiting_for_lock()[1:]]


def test_a_rank_on_the_build_lock_is_classified_as_waiting_for_it():
    s = c.classify(rank(0, thread(_waiting_for_lock())))
    assert (s.kind, s.op) == (c.IDLE, c.EXTENSION_LOCK)
    assert "extension build lock" in s.detail


def test_every_rank_on_the_lock_and_none_building_is_a_stale_lock():
    states = [c.classify(rank(r, thread(_waiting_for_lock()))) for r in (0, 1)]
    [finding] = analyze(states)
    assert (finding.id, finding.ranks) == ("RANK_UNRESPONSIVE", [0, 1])
    assert "stale lock" in finding.title and "torch_extensions" in finding.evidence["fix"]
    # run says it and keeps watching: another job may be building the same extension
    v = judge(_Diagnosis(states, [finding]), "", active=set())
    assert not v.confirmed and "stale lock" in v.reason


def test_ranks_waiting_while_one_builds_are_no_finding():
    states = [c.classify(rank(0, thread(_building(), active=True))),
              c.classify(rank(1, thread(_waiting_for_lock())))]
    assert analyze(states) == []


class _Diagnosis:
    def __init__(self, states, findings):
        self.states, self.findings = states, findings
        self.headline = findings[0].title if findings else ""
        self.fr_verdicts = []
