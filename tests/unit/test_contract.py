"""ddpdoctor/core/contract.py is the one place for names two processes agree on (issue #17)."""

import re

from jobs import REPO

from ddpdoctor.core import contract
from ddpdoctor.core.errors import DoctorError, ExitCode, decide_exit_code
from ddpdoctor.core.findings import Finding
from ddpdoctor.core.report import Check, Report
from ddpdoctor.core.signames import killed_by, signal_name

_ENV_LITERAL = re.compile(r"[\"']DDPDOCTOR_[A-Z_]+[\"']")
# Runs at interpreter start in every rank, before ddpdoctor can be imported: it keeps its
# own spelling, and a test below holds it equal to contract.WATCH.
SITECUSTOMIZE = "watch/bootstrap/sitecustomize.py"


def test_design_contract_table_is_generated_from_contract_py():
    text = (REPO / "docs" / "design.md").read_text()
    table = text.split("<!-- contract:begin -->\n", 1)[1].split("\n<!-- contract:end -->", 1)[0]
    assert table == contract.markdown_table(), \
        "docs/design.md is stale: python -m ddpdoctor.core.contract"


def test_every_env_variable_is_spelled_only_in_contract_py():
    strays = []
    for path in sorted((REPO / "ddpdoctor").rglob("*.py")):
        rel = path.relative_to(REPO / "ddpdoctor")
        if rel.as_posix() in ("core/contract.py", SITECUSTOMIZE):
            continue
        for n, line in enumerate(path.read_text().splitlines(), 1):
            if _ENV_LITERAL.search(line):
                strays.append(f"{rel}:{n}: {line.strip()}")
    assert strays == []


def test_the_bootstrap_reads_the_contracts_watch_variable():
    text = (REPO / "ddpdoctor" / SITECUSTOMIZE).read_text()
    assert _ENV_LITERAL.findall(text) == [f'"{contract.WATCH}"']


def test_every_contract_env_name_is_a_declared_constant():
    declared = {v for k, v in vars(contract).items() if k.isupper() and isinstance(v, str)}
    for c in contract.CONTRACTS:
        if c.kind == "env":
            assert c.name in declared and c.name.startswith(contract.ENV_PREFIX)
    assert contract.fr_dump_file(3) == "ddpdoctor-fr-rank3.json"


def test_one_function_decides_the_exit_code():
    assert decide_exit_code([], []) == ExitCode.HEALTHY
    assert decide_exit_code(["warning", "info"], ["ok", "warning"]) == ExitCode.HEALTHY
    assert decide_exit_code(["error"], ["ok"]) == ExitCode.FINDINGS
    assert decide_exit_code([], ["ok", "error"]) == ExitCode.FINDINGS  # red, undiagnosed
    assert decide_exit_code(["error"], [], doctor_error="no rank") == ExitCode.DOCTOR_FAILED
    assert decide_exit_code(["error"], [], doctor_error="x", override=7) == 7
    report = Report("check")
    report.checks.append(Check("shm", "1 GiB free"))
    report.add(Finding("ENV_SHM_TOO_SMALL", "tiny", ranks=[1]), check="shm")
    assert report.exit_code == 1 and report.check_status(report.checks[0]) == "error"


def test_the_error_type_carries_its_exit_code():
    assert DoctorError("no such pid").exit_code == 3
    assert DoctorError("bad pid", ExitCode.USAGE).exit_code == 2
    assert str(DoctorError("one line")) == "one line"


def test_finding_check_is_a_field_and_the_json_keeps_it_under_evidence():
    f = Finding("ENV_SHM_TOO_SMALL", "tiny", ranks=[1], evidence={"free": 1})
    report = Report("check")
    report.add(f, check="shm")
    assert f.check == "shm" and f.evidence == {"free": 1}  # no bookkeeping in evidence
    data = f.to_dict()
    assert data["evidence"] == {"free": 1, "check": "shm"}
    back = Finding.from_dict(data)
    assert back.check == "shm" and back.evidence == {"free": 1}


def test_signal_names_are_decoded_in_one_place():
    assert signal_name(9) == "SIGKILL" and signal_name(1000) is None
    assert killed_by(-7) == "SIGBUS" and killed_by(-1000) == "signal 1000"
    assert killed_by(0) is None and killed_by(1) is None
