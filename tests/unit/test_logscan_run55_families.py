"""Blind run 55 (batches X55, X56): run 53's family, a program stopping itself with a chosen
exit code on every rank, met a case it had not seen: VILA's timeout callback saves and
calls exit(124) on every rank, and this excerpt has one summary record (rank 1) and the
agent's "failed (exitcode: 124) local_rank: 0" line for another process. Processes are
told apart by pid (the agent's line and the summary's record of one process are one), so
two processes with one chosen code are the program's own stop here too.

Not learned: a collective mismatch whose only error line names two ranks (rank 2 and
rank 0) where the thread names rank 2 alone (the other ranks' lines were cut).

Real logs, URLs in their sidecars; the variants are cut from them."""

from __future__ import annotations

from pathlib import Path

from logscan_helpers import findings_in, findings_of

DIR = Path("tests/fixtures/reallogs")
EXIT124 = DIR / "X55_vila_timeout_callback_exit124_all_ranks_planned_stop.log"


def test_an_agent_line_and_a_record_of_two_processes_with_one_chosen_code():
    lead = findings_of(EXIT124)[0]
    assert (lead.id, lead.ranks) == ("UNRECOGNIZED_FAILURE", [])
    assert (lead.evidence["family"], lead.evidence["exit_code"]) == ("own_exit", 124)


def test_the_agent_line_and_the_record_of_one_process_are_one_process(tmp_path):
    # the same pid in both: one process, whose death is its own
    text = EXIT124.read_text().replace("(pid: 94384)", "(pid: 94385)")
    found = findings_in(tmp_path, text)
    assert all(f.evidence.get("family") != "own_exit" for f in found)
    assert found[0].severity == "error"
