"""The streaming reader and the rules, on bytes no real run produced on purpose."""

from __future__ import annotations

import gzip
import io
import shutil

import pytest

from ddpdoctor.diagnose import KEYWORDS, EventKind, scan_stream
from ddpdoctor.diagnose.kb import SIGNATURES, match_line
from ddpdoctor.diagnose.reader import (
    ReadStats,
    iter_picked,
    rank_from_path,
    sniff_binary,
    split_rank_prefix,
)
from ddpdoctor.diagnose.scanner import LineScanner


def picked(data: bytes, **kw):
    stats = ReadStats("t")
    return list(iter_picked(io.BytesIO(data), KEYWORDS, stats, **kw)), stats


def test_every_signature_needle_passes_the_prefilter():
    for sig in SIGNATURES:
        for needle in sig.needles:
            assert any(k.decode() in needle for k in KEYWORDS), sig.name


def test_line_numbers_nul_bytes_and_bad_utf8():
    data = (b"step 1 loss 2.0\n"
            b"ERROR: Unexpected bus error encountered in worker. This might be caused by "
            b"insufficient shared memory (shm).\x00\n"
            b"\xff\xfe garbage \xc3\x28\n"
            b"[rank1]: RuntimeError: bad \xe2\x82 thing\n")
    lines, stats = picked(data)
    assert [ln.lineno for ln in lines] == [2, 4]
    assert "\x00" not in lines[0].text
    assert lines[1].text.startswith("[rank1]: RuntimeError: bad")
    assert stats.nul_bytes and stats.lines == 4


def test_carriage_return_progress_bar_with_error_glued_on():
    bar = b"".join(b"\rEpoch 0: %d%%|####|" % i for i in range(2000))
    data = b"first\n" + bar + b"[E ProcessGroupNCCL.cpp:458] [Rank 3] Watchdog caught " \
        b"collective operation timeout: WorkNCCL(SeqNum=9, OpType=ALLREDUCE, " \
        b"Timeout(ms)=1800000) ran for 1802212 milliseconds before timing out.\nlast\n"
    lines, stats = picked(data, chunk_bytes=4096)
    hits = [ln for ln in lines if "Watchdog" in ln.text]
    assert len(hits) == 1 and hits[0].lineno == 2
    # only the last redraw of the bar stays on the line, not 2000 of them
    assert hits[0].text.startswith("Epoch 0: 1999%|####|[E ProcessGroupNCCL")
    assert stats.lines == 3


def test_overlong_line_is_cut_and_memory_stays_bounded():
    data = b"a" * 300_000 + b" RuntimeError: in the middle " + b"b" * 300_000 + b"\nok Error\n"
    lines, stats = picked(data, chunk_bytes=65536, max_line=4096)
    assert all(len(ln.text) <= 4096 for ln in lines)
    assert lines[-1].lineno == 2 and lines[-1].text == "ok Error"
    assert stats.truncated_lines >= 1


def test_line_numbers_across_chunk_boundaries():
    body = b"".join(b"line %d\n" % i for i in range(1, 5001))
    body = body.replace(b"line 4321\n", b"line 4321 RuntimeError: x\n")
    lines, _ = picked(body, chunk_bytes=777)
    assert [ln.lineno for ln in lines] == [4321]


def test_binary_and_empty_inputs(tmp_path):
    ls = shutil.which("ls")
    with open(ls, "rb") as f:
        events, stats = scan_stream(f, ls)
    assert events == [] and stats.binary == "ELF executable"
    events, stats = scan_stream(io.BytesIO(b""), "empty")
    assert events == [] and stats.bytes_read == 0 and not stats.binary
    noise = bytes(range(256)) * 400
    events, stats = scan_stream(io.BytesIO(noise), "noise")
    assert events == [] and stats.binary.startswith("binary data")


def test_gzip_logs_are_read(tmp_path):
    raw = b"x\n[rank1]: ValueError: boom\n"
    events, stats = scan_stream(io.BytesIO(gzip.compress(raw)), "train.log.gz")
    assert stats.compressed and [(e.kind, e.rank, e.lineno) for e in events] == [
        (EventKind.EXCEPTION, 1, 2)]
    events, stats = scan_stream(io.BytesIO(gzip.compress(raw)[:20]), "cut.gz")
    assert stats.notes  # a truncated archive ends the input with a note, not a crash


@pytest.mark.parametrize("path,rank", [
    ("logs/rank1.log", 1), ("node0-rank-3.txt", 3), ("worker_rank_12.err", 12),
    ("/x/job_abc/attempt_0/2/stderr.log", 2), ("train.log", None), ("frank5.log", None),
])
def test_rank_from_path(path, rank):
    assert rank_from_path(path) == rank


def test_rank_prefixes():
    assert split_rank_prefix("[rank1]: ValueError: x") == (1, "ValueError: x")
    assert split_rank_prefix("[default3]:hello") == (3, "hello")
    assert split_rank_prefix("[80746] [rank0]:[E321 x") == (0, "[E321 x")
    assert split_rank_prefix("loss [rank1]: not a prefix") == (None, "loss [rank1]: not a prefix")
    scanner = LineScanner("t")
    from ddpdoctor.diagnose.reader import RawLine

    scanner.feed(RawLine(1, "[default1]:[rank5]: ValueError: x"))
    assert scanner.events[0].rank == 5  # the global rank wins over the local one


def test_sniff_allows_a_stray_nul():
    assert sniff_binary(b"hello\x00 world\n" * 100) == ""


def test_watchdog_rule_extracts_fields():
    line = ("[rank4]:[E1206 18:44:12.755262105 ProcessGroupNCCL.cpp:607] [Rank 4] Watchdog "
            "caught collective operation timeout: WorkNCCL(SeqNum=7753, "
            "OpType=_REDUCE_SCATTER_BASE, NumelIn=544997376, NumelOut=68124672, "
            "Timeout(ms)=600000) ran for 600099 milliseconds before timing out.")
    (sig, d), = match_line(line)
    assert (d["seq"], d["op"], d["timeout_ms"], d["ran_ms"]) == (
        7753, "_REDUCE_SCATTER_BASE", 600000, 600099)


def test_old_cuda_oom_format():
    line = ("RuntimeError: CUDA out of memory. Tried to allocate 20.00 MiB (GPU 0; 1.96 GiB total "
            "capacity; 1.24 GiB already allocated; 2.88 MiB free; 1.25 GiB reserved in total by "
            "PyTorch)")
    (sig, d), = match_line(line)
    assert d["tried_to_allocate"] == "20.00 MiB" and d["total_old"] == "1.96 GiB"
    assert d["gpu"] == 0 and d["free_old"] == "2.88 MiB"
