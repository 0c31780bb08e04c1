"""diagnose on real public logs: >= 90% right first finding, no failed job called healthy.

The corpus (tests/fixtures/reallogs) was collected from public issue threads by people other
than the authors of the knowledge base; each NAME.log has a sidecar NAME.json with the
thread's URL and the finding the thread's resolution points to. Run
``python -m ddpdoctor.logscan.corpus`` for the same table; docs/diagnose.md shows it
(``python -m ddpdoctor.logscan.kbdoc --write`` regenerates it).
"""

from __future__ import annotations

import pytest

from ddpdoctor.logscan import corpus

CASES = corpus.load()


@pytest.fixture(scope="module")
def results():
    return [corpus.run(c) for c in CASES]


def test_the_corpus_is_there():
    assert len(CASES) >= 60
    assert all(c.source.startswith("https://") for c in CASES)


def test_score_at_least_90_percent(results):
    print("\n" + corpus.table(results))
    print(corpus.misses(results))
    right = sum(r.right for r in results)
    assert right / len(results) >= 0.90, corpus.misses(results)


def test_the_diagnose_page_shows_the_current_score(results):
    from ddpdoctor.logscan.kbdoc import CORPUS_BEGIN, CORPUS_END, PAGE

    text = PAGE.read_text()
    shown = text[text.index(CORPUS_BEGIN) + len(CORPUS_BEGIN):text.index(CORPUS_END)].strip()
    assert shown == corpus.table(results), ("docs/diagnose.md's corpus table is stale: run "
                                            "`python -m ddpdoctor.logscan.kbdoc --write`")


def test_no_failed_job_is_called_healthy(results):
    healthy = [r.case.name for r in results if r.case.failed and r.healthy]
    assert healthy == []


def test_cli_exit_code_is_1_on_every_failed_log():
    from click.testing import CliRunner

    from ddpdoctor.commands.diagnose import command

    for case in CASES:
        if case.failed:
            result = CliRunner().invoke(command, [str(case.log)])
            assert result.exit_code == 1, (case.name, result.output[-500:])


def test_titles_have_no_empty_slots():
    import re

    from ddpdoctor.logscan import LogInput, diagnose_logs

    empty = re.compile(r"rank\s*[:,)]|rank\s*$|\(\s*\)|\s{2,}|\bNone\b")
    for case in CASES:
        findings, _ = diagnose_logs([LogInput(str(case.log), rank_from_path=False)])
        for f in findings:
            assert not empty.search(f.title), (case.name, f.title)
