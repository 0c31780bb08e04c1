"""End to end: hangs written the way real code is (tests/fixtures/userjobs/), on 2 CPU
ranks under torchrun (gloo), diagnosed by `ddpdoctor attach <torchrun pid>` while they
hang. Every one is a 1-against-1 split, where counting ranks cannot decide: the
attribution rules must name exactly the culprit. Real Lightning and accelerate. Each
launch costs 10-30 s (the frameworks' imports)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from jobs import kill_tree
from paths import FIXTURES

from ddpdoctor.attach.classify import WAITING, classify, signature
from ddpdoctor.attach.discover import discover
from ddpdoctor.attach.stacks import collect_stacks

pytestmark = [pytest.mark.slow, pytest.mark.matrix]
JOBS = FIXTURES / "userjobs"


BOOTSTRAP = str(JOBS.parents[2] / "ddpdoctor" / "watch" / "bootstrap")


class UserJob:
    def __init__(self, script: str, tmp: Path, watched: bool = False) -> None:
        self.log = tmp / "job.log"
        env = dict(os.environ, TMPDIR=str(tmp), CKPT_DIR=str(tmp), OMP_NUM_THREADS="1")
        if watched:
            # as `ddpdoctor run` starts a job: no code change, the ranks serve Flight
            # Recorder dumps and write heartbeats
            env.update(PYTHONPATH=BOOTSTRAP, DDPDOCTOR_WATCH="1",
                       DDPDOCTOR_FR_DIR=str(tmp / "fr"), DDPDOCTOR_HEARTBEAT_DIR=str(tmp / "hb"))
        with open(self.log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, "-m", "torch.distributed.run", "--nproc-per-node", "2",
                 str(JOBS / script)], env=env, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True)

    def wait_hung(self, deadline_s: float = 100) -> None:
        """Both ranks trained a step, then two stack samples 1 s apart agree and show a
        rank waiting in a collective."""
        deadline = time.monotonic() + deadline_s
        while not all(f"rank {r} step" in self.log.read_text(errors="replace")
                      for r in (0, 1)):
            assert self.proc.poll() is None, self.log.read_text(errors="replace")
            assert time.monotonic() < deadline, "the job never trained a step"
            time.sleep(0.5)
        before = None
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")
            ranks = discover([self.proc.pid]).ranks
            states = [classify(s) for s in
                      collect_stacks([(r.rank, r.pid) for r in ranks], timeout=5)]
            now = [signature(s) for s in states]
            if len(ranks) == 2 and now == before and any(s.kind in WAITING for s in states):
                return
            before = now
            time.sleep(1.0)
        raise AssertionError("stacks never settled: " + self.log.read_text(errors="replace"))

    def attach(self, tmp: Path) -> tuple[dict, str]:
        out = tmp / "report.json"
        res = subprocess.run([sys.executable, "-m", "ddpdoctor", "attach", "--json", str(out),
                              str(self.proc.pid)], capture_output=True, text=True, timeout=60)
        assert res.returncode == 1, res.stdout + res.stderr
        return json.loads(out.read_text()), res.stdout

    def kill(self) -> None:
        kill_tree(self.proc.pid)
        self.proc.wait()


CASES = [
    # script, culprit, the rules that must have decided, the guard named in the finding;
    # the ZeRO job runs watched (Flight Recorder served), the others plain
    ("zero_checkpoint.py", 0, {"flight recorder", "stacks", "source"},
     "step % 3 == 0 and rank == 0`"),
    ("lightning_hook.py", 0, {"stacks", "source"}, "self.trainer.is_global_zero"),
    ("accelerate_metrics.py", 0, {"stacks", "source"},
     "step % 4 == 3 and accelerator.is_main_process`"),
    ("fsdp2_skip.py", 1, {"stacks"}, None),
]


@pytest.mark.timeout(180)
@pytest.mark.parametrize("script,culprit,rules,guard", CASES, ids=[c[0] for c in CASES])
def test_attach_names_exactly_the_culprit_of_a_one_sided_hang(tmp_path, script, culprit,
                                                              rules, guard):
    pytest.importorskip({"lightning_hook.py": "lightning",
                         "accelerate_metrics.py": "accelerate"}.get(script, "torch"))
    watched = "flight recorder" in rules
    job = UserJob(script, tmp_path, watched=watched)
    try:
        job.wait_hung()
        report, stdout = job.attach(tmp_path)
    finally:
        job.kill()
    assert [(f["id"], f["ranks"]) for f in report["findings"]] == [
        ("HANG_COLLECTIVE_MISMATCH", [culprit])], stdout
    finding = report["findings"][0]
    att = finding["evidence"]["attribution"]
    assert att["decided"] is True, att
    assert {v.split(" (")[0] for v in att["votes"]} == rules, att
    if guard:
        [line] = finding["evidence"]["rank guard"]
        assert line.startswith(f"rank {culprit}: ") and f"runs under `if {guard}" in line
        assert f"` at {script}:" in line
    assert f"rank {1 - culprit} waits in" in finding["title"]
    if watched:
        assert report["probes"]["flight recorder"]["status"] == "ok", stdout
        assert any("left the regular sequence" in v for v in att["votes"]), att
