"""Flight Recorder: the dump contract, the parser (real gloo dumps), the comparison."""

import json
import os
import threading
import time

import pytest
from attach_helpers import recorded_fr_path

from ddpdoctor.attach import flight_recorder as fr


def _load(name, r):
    with open(recorded_fr_path(name, r), "rb") as fh:
        return fr.parse_fr_trace(fh.read(), r)


def test_parse_real_gloo_dump():
    t = _load("missing-3ranks", 0)
    assert t.last_enqueued == {"0": 3}
    last = t.entries[-1]
    assert (last.pg, last.seq, last.op, last.retired) == ("0", 3, "all_reduce", False)
    assert t.pg_desc["0"] == "default_pg"


def test_compare_names_the_rank_behind():
    traces = {r: _load("missing-3ranks", r) for r in range(3)}
    (v,) = fr.compare_traces(traces)
    assert (v.front_seq, v.behind, v.front_op) == (3, {1: 2}, "all_reduce [[]]")
    assert "rank 1 is behind, last enqueued #2" in "\n".join(v.describe())


def test_compare_names_the_mismatched_collective():
    traces = {r: _load("mismatch-3ranks", r) for r in range(3)}
    (v,) = fr.compare_traces(traces)
    assert v.mismatch and not v.behind
    assert v.pending == {"all_reduce [[]]": [0, 2], "broadcast [[]]": [1]}


def test_compare_in_step_gives_no_verdict():
    traces = {r: _load("p2p-2ranks", r) for r in range(2)}
    assert fr.compare_traces(traces) == []


def test_sizes_mismatch_is_found():
    base = {"pg_status": {"0": {"last_enqueued_collective": "5"}}}
    def dump(sizes):
        entry = {"process_group": ["0", "default_pg"], "collective_seq_id": 5,
                 "profiling_name": "gloo:all_reduce", "input_sizes": sizes}
        return json.dumps({**base, "entries": [entry]})
    traces = {0: fr.parse_fr_trace(dump([[1024]]), 0), 1: fr.parse_fr_trace(dump([[512]]), 1)}
    (v,) = fr.compare_traces(traces)
    assert v.pending == {"all_reduce [[1024]]": [0], "all_reduce [[512]]": [1]}


@pytest.mark.parametrize("data", [b"", b"\x00\xff garbage", b"[1, 2]", b'{"x": 1}',
                                  b'{"entries": [{"collective_seq_id": "x"}]}'])
def test_bad_dumps_raise_a_clear_error(data):
    with pytest.raises(fr.FrParseError, match="rank 3"):
        fr.parse_fr_trace(data, 3)


def test_contract_request_and_collect(tmp_path):
    """A stand-in rank: answers a touched request file as the watch hook must."""
    d = str(tmp_path)
    with open(os.path.join(d, fr.ready_name(0)), "w") as fh:
        json.dump({"pid": os.getpid()}, fh)
    assert fr.serving_ranks(d, {0: os.getpid(), 1: 12345}) == [0]
    real = open(recorded_fr_path("missing-3ranks", 0), "rb").read()

    def serve():
        req = os.path.join(d, fr.REQUEST_FILE)
        while not os.path.exists(req):
            time.sleep(0.01)
        tmp = os.path.join(d, fr.dump_name(0) + ".tmp")
        with open(tmp, "wb") as fh:
            fh.write(real)
        os.replace(tmp, os.path.join(d, fr.dump_name(0)))

    server = threading.Thread(target=serve)
    server.start()
    since = fr.request_dumps(d)
    traces, problems = fr.collect_dumps(d, [0, 1], since, timeout=1.0)
    server.join()
    assert list(traces) == [0] and traces[0].last_enqueued == {"0": 3}
    assert problems == ["no Flight Recorder dump from ranks [1] within 1 s"]


def test_stale_dump_is_not_used(tmp_path):
    d = str(tmp_path)
    stale = os.path.join(d, fr.dump_name(0))
    with open(stale, "wb") as fh:
        fh.write(open(recorded_fr_path("missing-3ranks", 0), "rb").read())
    os.utime(stale, (1, 1))
    t0 = time.monotonic()
    traces, problems = fr.collect_dumps(d, [0], fr.request_dumps(d), timeout=0.3)
    assert traces == {} and problems and time.monotonic() - t0 < 1.0
