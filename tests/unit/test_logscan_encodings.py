"""How a log's bytes are written does not change what it says: a terminal's colour codes
(torchtitan's coloured step lines, DeepSpeed's `[93m [WARNING] [0m`: real in
X19_torchtitan_fsdp_rank1_hf_streaming_client_closed.log and
G1_healthy_deepspeed_multinode_import_warnings.log) and UTF-16, which Windows PowerShell
5.1's `>` writes (about_Character_Encoding, powershell-5.1), and Docker's json-file
records (https://docs.docker.com/engine/logging/drivers/json-file/). A probe that re-wrote each
development-set log so found colour codes breaking about one in ten and UTF-16 skipped as
binary; these hold the lesson."""

from __future__ import annotations

import codecs
import io
import json
from pathlib import Path

import pytest
from logscan_helpers import findings_of

from ddpdoctor.diagnose import jsonlog, utf16
from ddpdoctor.diagnose.reader import ReadStats, iter_picked, sniff_binary

DIR = Path("tests/fixtures/reallogs")
LOGS = [
    "X72_cuda_oom_ddp_vit_40gb_a100_tutorial",
    "X23_torchrun_rank0_early_stop_break_allreduce_timeout",
    "X49_healthy_megatron_56rank_inductor_cache_tracebacks_clean_data_exhaustion_exit",
    "F1_fsdp_mixed_dtype_flatten_qlora_llamafactory",
    "L2_litllama_ib_port_error_node48",
    "X37_mpspawn_notebook_fn_not_picklable_4ranks",
    # a wrapped line: its continuation is the next line, past CRLF's \n
    "S1_ib_completion_error_nodes_not_colocated_azure",
]


def _lead(found) -> tuple[str, list[int]]:
    errors = [f for f in found if f.severity == "error"]
    return (errors[0].id, errors[0].ranks) if errors else ("NONE", [])


def _coloured(text: str) -> bytes:
    return "".join(f"\x1b[0m{line}\x1b[0m\n" for line in text.splitlines()).encode()


@pytest.mark.parametrize("encode", [
    pytest.param(lambda t: codecs.BOM_UTF16_LE + t.encode("utf-16-le"), id="utf16le-bom"),
    pytest.param(lambda t: codecs.BOM_UTF16_BE + t.encode("utf-16-be"), id="utf16be-bom"),
    pytest.param(lambda t: t.encode("utf-16-le"), id="utf16le"),
    pytest.param(_coloured, id="ansi"),
    pytest.param(lambda t: t.replace("\n", "\r\n").encode(), id="crlf"),
    pytest.param(lambda t: "".join(json.dumps({"log": s + "\n", "stream": "stderr", "time":
                                               "2019-01-01T11:11:11.111111111Z"}) + "\n"
                                   for s in t.splitlines()).encode(), id="docker-json"),
])
@pytest.mark.parametrize("name", LOGS)
def test_a_real_log_reads_the_same_however_its_bytes_are_written(tmp_path, name, encode):
    path = DIR / f"{name}.log"
    other = tmp_path / "job.log"
    other.write_bytes(encode(path.read_text(encoding="utf-8", errors="replace")))
    assert _lead(findings_of(other)) == _lead(findings_of(path))


def test_colour_codes_are_taken_off_the_line_read():
    line = ("[rank0]:[titan] 2026-04-29 22:07:12,611 - root - INFO - \x1b[31mstep: 12510  "
            "\x1b[32mloss:  3.12459  \x1b[38;2;180;60;0mgrad_norm:  0.0441\x1b[39m\n")
    got = list(iter_picked(io.BytesIO(line.encode()), (b"loss",), ReadStats(name="t")))
    assert got[0].text == ("[rank0]:[titan] 2026-04-29 22:07:12,611 - root - INFO - step: "
                           "12510  loss:  3.12459  grad_norm:  0.0441")


def test_utf16_is_told_from_binary_and_from_plain_text():
    text = "Traceback (most recent call last):\n  File \"train.py\", line 3\n"
    assert utf16.sniff(codecs.BOM_UTF16_LE + text.encode("utf-16-le")) == ("utf-16-le", 2)
    assert utf16.sniff(text.encode("utf-16-be")) == ("utf-16-be", 0)
    assert utf16.sniff(text.encode()) == ("", 0)
    # a binary's NULs are not every other byte
    blob = bytes(range(256)) * 4
    assert utf16.sniff(blob) == ("", 0) and sniff_binary(blob)


def test_a_utf16_log_says_how_it_was_read(tmp_path):
    log = tmp_path / "job.log"
    log.write_bytes(codecs.BOM_UTF16_LE + "RuntimeError: x\n".encode("utf-16-le"))
    stats = ReadStats(name="job.log")
    with open(log, "rb") as f:
        picked = list(iter_picked(f, (b"Error",), stats))
    assert [p.text for p in picked] == ["RuntimeError: x"]
    assert stats.notes == ["read as UTF-16-LE (Windows PowerShell's `>` writes it)"]
    assert not stats.binary and not stats.nul_bytes


def test_docker_json_records_read_as_the_containers_text():
    raw = (b'{"log":"Traceback (most recent call last):\\n","stream":"stderr","time":"2019-01-01'
           b'T11:11:11.111111111Z"}\n'
           # a line Docker split at 16 KiB: the first record has no "\\n"
           b'{"log":"  File \\"train.py\\", line 3, in \\u003cmodule\\u003e","stream":"stderr",'
           b'"time":"2019-01-01T11:11:11.2Z"}\n'
           b'{"log":" main()\\n","stream":"stderr","time":"2019-01-01T11:11:11.3Z"}\n'
           b'not a record\n')
    stats = ReadStats(name="c-json.log")
    got = [p.text for p in iter_picked(io.BytesIO(raw), (b"Traceback", b"File", b"record"),
                                       stats)]
    assert got == ["Traceback (most recent call last):",
                   '  File "train.py", line 3, in <module> main()', "not a record"]
    assert stats.notes == ["read as Docker's json-file log (each record's text)"]


def test_only_a_json_file_record_is_read_as_one():
    assert jsonlog.sniff(b'{"log":"x\\n","stream":"stdout","time":"t"}\n')
    assert not jsonlog.sniff(b'{"level": "info", "msg": "step 3"}\n')  # another JSON log
    assert not jsonlog.sniff(b'{"log": broken\n')
    assert not jsonlog.sniff(b"[rank0]: RuntimeError: x\n")
