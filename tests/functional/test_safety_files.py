"""Nothing ddpdoctor writes follows a symlink planted by a job's user, and check's own
rendezvous store listens on loopback only. Each test plants a real symlink where the file
would go (the target must stay untouched) or reads a real listening socket."""

import os
import subprocess
import sys
import textwrap
import time

import psutil
import pytest
from jobs import ddpdoctor_cmd, kill_tree

from ddpdoctor.attach.flight_recorder import REQUEST_FILE, request_dumps
from ddpdoctor.check.launcher import launch
from ddpdoctor.watch import flight_recorder as watch_fr

import launch_fns

ORIGINAL = "root-owned content\n"


def _victim(tmp_path, name="victim"):
    target = tmp_path / name
    target.write_text(ORIGINAL)
    os.utime(target, (1_000_000, 1_000_000))
    return target


def _untouched(target):
    assert target.read_text() == ORIGINAL
    assert target.stat().st_mtime == 1_000_000


def test_attach_request_does_not_follow_a_symlink(tmp_path):
    fr_dir = tmp_path / "fr"
    fr_dir.mkdir()
    target = _victim(tmp_path)
    (fr_dir / REQUEST_FILE).symlink_to(target)
    with pytest.raises(OSError):
        request_dumps(str(fr_dir))
    _untouched(target)
    # a dangling link must not make root create its target either
    (fr_dir / REQUEST_FILE).unlink()
    missing = tmp_path / "etc-cron-d-evil"
    (fr_dir / REQUEST_FILE).symlink_to(missing)
    with pytest.raises(OSError):
        request_dumps(str(fr_dir))
    assert not missing.exists()


def test_attach_request_still_touches_a_regular_file(tmp_path):
    before = time.time() - 1
    since = request_dumps(str(tmp_path))
    assert (tmp_path / REQUEST_FILE).stat().st_mtime >= before
    assert since <= time.time()


def test_flight_recorder_dump_replaces_a_planted_symlink(tmp_path):
    target = _victim(tmp_path)
    path = watch_fr.fr_path(str(tmp_path), 0)
    os.symlink(target, path)
    # the old predictable temp name, planted too
    os.symlink(target, f"{path}.tmp{os.getpid()}")
    assert watch_fr.dump(str(tmp_path), 0) == path
    _untouched(target)
    assert not os.path.islink(path)
    assert b"pg_status" in open(path, "rb").read()
    assert os.stat(path).st_mode & 0o077 == 0


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
def test_stack_and_ready_files_do_not_follow_symlinks(tmp_path):
    """install() and serve_requests() in a fresh process (they own signal handlers)."""
    fr_dir = tmp_path / "fr"
    fr_dir.mkdir()
    stacks, ready = _victim(tmp_path, "stacks-victim"), _victim(tmp_path, "ready-victim")
    (fr_dir / "ddpdoctor-stacks-rank0.txt").symlink_to(stacks)
    (fr_dir / "ddpdoctor-fr-rank0.ready").symlink_to(ready)
    code = textwrap.dedent(f"""
        from ddpdoctor.watch import flight_recorder as fr
        print(fr.install({str(fr_dir)!r}, 0), fr.serve_requests({str(fr_dir)!r}, 0))
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["True", "True"]
    _untouched(stacks)
    _untouched(ready)
    assert (fr_dir / "ddpdoctor-fr-rank0.ready").read_text().startswith('{"pid"')


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_launcher_results_do_not_follow_symlinks_in_its_log_dir(tmp_path):
    log_dir = tmp_path / "logs"
    (log_dir / "results").mkdir(parents=True)
    targets = []
    for r in (0, 1):
        for name in (f"rank{r}.tmp", f"rank{r}.pkl"):
            t = _victim(tmp_path, f"victim-{name}")
            (log_dir / "results" / name).symlink_to(t)
            targets.append(t)
    res = launch(launch_fns.allreduce, nproc=2, backend="gloo", deadline_s=60,
                 log_dir=str(log_dir))
    assert res.values() == {0: {"rank": 0, "sum": 3.0}, 1: {"rank": 1, "sum": 3.0}}
    for t in targets:
        _untouched(t)


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_check_rendezvous_store_listens_on_loopback_only(tmp_path):
    out = tmp_path / "report.json"
    proc = subprocess.Popen(ddpdoctor_cmd() + ["check", "--nproc", "2", "--probe", "connectivity",
                                               "--json", str(out)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            start_new_session=True)
    listening = set()
    try:
        start = time.monotonic()
        while proc.poll() is None and time.monotonic() - start < 90:
            try:
                conns = psutil.Process(proc.pid).net_connections(kind="inet")
            except psutil.NoSuchProcess:
                break
            listening |= {(c.laddr.ip, c.laddr.port) for c in conns
                          if c.status == psutil.CONN_LISTEN}
            time.sleep(0.05)
        proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            kill_tree(proc.pid)
    assert proc.returncode == 0
    assert listening, "the check never listened (store not seen)"
    assert {ip for ip, _ in listening} == {"127.0.0.1"}, listening
    import json

    report = json.loads(out.read_text())
    ip, port = report["world"]["store_listen"].rsplit(":", 1)
    assert (ip, int(port)) in listening
