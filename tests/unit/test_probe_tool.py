"""tools/probe.py: the corpus re-written as other launchers, collectors, shells and
platforms write it reads the same; and the probe reports a log whose reading changed."""

from __future__ import annotations

import shutil
from pathlib import Path

from tools import probe

DIR = Path("tests/fixtures/reallogs")


def test_a_seeded_sample_of_the_corpus_reads_the_same_in_every_style(capsys):
    assert probe.main(["--sample", "30", "--seed", "7"]) == 0, capsys.readouterr().out
    out = capsys.readouterr().out
    assert "| kubectl |" in out and "Changed:" not in out


def test_a_changed_reading_is_reported_with_its_kind(tmp_path, monkeypatch, capsys):
    name = "X72_cuda_oom_ddp_vit_40gb_a100_tutorial"
    for ext in (".log", ".json"):
        shutil.copy(DIR / f"{name}{ext}", tmp_path / f"{name}{ext}")
    # a style that loses the lines (what a reader that skipped the input would see)
    monkeypatch.setitem(probe.STYLES, "blank", lambda t: b"\n" * len(t.splitlines()))
    assert probe.main([str(tmp_path), "--styles", "blank,crlf"]) == 1
    out = capsys.readouterr().out
    assert "| blank | 0 | 1 |" in out and "| crlf | 1 | 0 |" in out
    assert f"- blank: {name}: OOM [] -> (none) [] (failed job called healthy)" in out
