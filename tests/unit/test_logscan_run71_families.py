"""Blind run 71 (batches XA1 and XA2) was 4/4; two lessons from how one was read:

- An exception line whose message is a traceback frame (`IsADirectoryError:   File
  "x.py", line 16, in __init__`) is two processes' output run into one line: the
  exception's own message is on another line and is read there (it was quoted as the
  message).
- A path that is a directory where a file was wanted, or the reverse (IsADirectoryError,
  NotADirectoryError), is the launch's configuration, as a missing path is: next step fix
  the config.

The real log's URL is in its sidecar."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

from ddpdoctor.core.next_step import Action, decide

LOG = Path("tests/fixtures/reallogs/XA1_yaml_config_is_a_directory.log")


def test_an_exception_line_holding_a_frame_is_not_its_message():
    found = findings_of(LOG)
    assert (found[0].id, found[0].ranks) == ("RANK_CRASHED", [1])
    assert "IsADirectoryError: [Errno 21] Is a directory" in found[0].title
    assert 'File "' not in found[0].title
    assert decide(found).action is Action.FIX_CONFIG


def test_a_directory_where_a_file_was_wanted_is_the_config(tmp_path):
    for exc in ("IsADirectoryError: [Errno 21] Is a directory: '/data/run1'",
                "NotADirectoryError: [Errno 20] Not a directory: '/data/cfg.yaml/x'"):
        text = ("[rank0]: Traceback (most recent call last):\n"
                '[rank0]:   File "/home/u/train.py", line 9, in <module>\n'
                f"[rank0]: {exc}\n")
        found = findings_in(tmp_path, text)
        assert (found[0].id, found[0].ranks) == ("RANK_CRASHED", [0]), exc
        assert decide(found).action is Action.FIX_CONFIG, exc
