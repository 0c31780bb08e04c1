"""The knowledge base: every signature's real examples go through it and give its fields."""

from __future__ import annotations

from pathlib import Path

import pytest

from ddpdoctor.core.catalog import CATALOG
from ddpdoctor.diagnose import KEYWORDS
from ddpdoctor.diagnose.events import EventKind
from ddpdoctor.diagnose.kb import SIGNATURES, match_line
from ddpdoctor.diagnose.reader import split_rank_prefix
from ddpdoctor.diagnose.scanner import LineScanner

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = [(sig, ex) for sig in SIGNATURES for ex in sig.examples]


def body(line: str) -> str:
    return split_rank_prefix(line)[1].strip()


@pytest.mark.parametrize("sig,ex", EXAMPLES, ids=[f"{s.name}-{i}" for i, (s, _) in
                                                  enumerate(EXAMPLES)])
def test_every_example_matches_its_signature_with_its_fields(sig, ex):
    data = sig.match(body(ex.line))
    assert data is not None, f"{sig.name} does not match its own example"
    for key, value in ex.fields.items():
        assert data.get(key) == value, (sig.name, key, data.get(key))
    # and the full scanner path (prefilter, fallbacks) yields that signature's event kind
    assert any(k.decode() in ex.line for k in KEYWORDS), "the prefilter would skip the line"
    assert sig in [s for s, _ in match_line(body(ex.line))] or sig.fallback


@pytest.mark.parametrize("sig,ex", EXAMPLES, ids=[f"{s.name}-{i}" for i, (s, _) in
                                                  enumerate(EXAMPLES)])
def test_every_example_names_where_it_was_seen(sig, ex):
    if ex.source.startswith("https://"):
        return
    path = ROOT / ex.source
    assert path.is_file(), f"{sig.name}: {ex.source} is neither a URL nor a recorded log"
    text = path.read_bytes().replace(b"\x00", b"").decode("utf-8", "replace")
    assert ex.line[:120] in text, f"{sig.name}: the example is not in {ex.source}"


def test_every_signature_is_complete():
    names = [s.name for s in SIGNATURES]
    assert len(names) == len(set(names)), "signature names must be unique"
    for sig in SIGNATURES:
        assert sig.examples, sig.name
        assert sig.finding in CATALOG, (sig.name, sig.finding)
        assert sig.versions, sig.name
        for needle in sig.needles:
            assert any(k.decode() in needle for k in KEYWORDS), sig.name


def test_fallback_signatures_only_fire_alone():
    # "CUDA error: uncorrectable ECC error" is GPU health, not a generic CUDA error
    got = [s.name for s, _ in match_line("RuntimeError: CUDA error: uncorrectable ECC error "
                                         "encountered")]
    assert got == ["cuda.uncorrectable_ecc"]
    got = [s.name for s, _ in match_line("RuntimeError: CUDA error: device-side assert "
                                         "triggered")]
    assert got == ["cuda.error"]


def test_scanner_takes_the_rank_from_an_unprefixed_nccl_line():
    from ddpdoctor.diagnose.reader import RawLine

    sc = LineScanner("x.log")
    sc.feed(RawLine(3, "[rank0]:[E1206 18:44:16.994932383 ProcessGroupNCCL.cpp:1709] [PG 1 "
                       "Rank 0] Timeout at NCCL work: 7753, last enqueued NCCL work: 7755, last "
                       "completed NCCL work: 7752."))
    sc.feed(RawLine(4, "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective "
                       "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, "
                       "NumelOut=1, Timeout(ms)=1800000) ran for 1800328 milliseconds"))
    assert [(e.kind.value, e.rank) for e in sc.events] == [("nccl_work_state", 0),
                                                           ("nccl_watchdog", 2)]


@pytest.mark.parametrize("sig,ex", EXAMPLES, ids=[f"{s.name}-{i}" for i, (s, _) in
                                                  enumerate(EXAMPLES)])
def test_every_failure_example_alone_gives_an_error_finding(sig, ex):
    import io

    from ddpdoctor.diagnose import scan_stream, triage

    events, _ = scan_stream(io.BytesIO(ex.line.encode() + b"\n"), "one.log")
    findings = triage(events)
    if any(e.is_failure for e in events):
        assert any(f.severity == "error" for f in findings), (sig.name, findings)
    elif sig.kind is EventKind.ADVICE:  # a framework's advice: its finding, never an error
        assert [f.id for f in findings] == [sig.finding]
        assert findings[0].severity in ("warning", "info")
    elif sig.kind is EventKind.LAUNCHER_SIGNALLED:  # a Ctrl-C: said, as information
        assert [(f.id, f.severity) for f in findings] == [("UNRECOGNIZED_FAILURE", "info")]
    elif sig.kind is EventKind.RANK_ANNOUNCE and ex.fields.get("world_size", 1) != 1:
        # a log that is nothing but rank 0 announcing itself to a larger world ends in a
        # start-up the other ranks never came to (rules_census)
        assert [(f.id, f.severity) for f in findings] == [("HANG_RANK_MISSING_COLLECTIVE",
                                                           "error")]
    else:
        assert findings == []


def test_all_examples_together_triage_without_error():
    import io

    from ddpdoctor.diagnose import scan_stream, triage

    text = "".join(ex.line + "\n" for _, ex in EXAMPLES)
    events, _ = scan_stream(io.BytesIO(text.encode()), "all.log")
    assert triage(events)
    # every one of them with a per-rank file rank, too
    events, _ = scan_stream(io.BytesIO(text.encode()), "rank3.log", rank=3)
    assert triage(events)


def test_nccl_global_rank_beats_the_file_name_but_a_subgroup_rank_does_not():
    from ddpdoctor.diagnose.reader import RawLine

    sc = LineScanner("job_rank0.log", file_rank=0)
    sc.feed(RawLine(1, "[E ProcessGroupNCCL.cpp:475] [Rank 2] Watchdog caught collective "
                       "operation timeout: WorkNCCL(SeqNum=2, OpType=ALLREDUCE, NumelIn=1, "
                       "NumelOut=1, Timeout(ms)=1800000) ran for 1800328 milliseconds"))
    sc.feed(RawLine(2, "[E1206 18:44:16.994932383 ProcessGroupNCCL.cpp:1709] [PG 1 Rank 1] "
                       "Timeout at NCCL work: 7753, last enqueued NCCL work: 7755, last "
                       "completed NCCL work: 7752."))
    assert [e.rank for e in sc.events] == [2, 0]
