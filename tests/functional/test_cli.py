import json
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from ddpdoctor import __version__
from ddpdoctor.cli import COMMANDS, main
from ddpdoctor.commands.common import not_implemented
from ddpdoctor.core.report import EXIT_DOCTOR_FAILED, EXIT_USAGE


def test_version():
    res = CliRunner().invoke(main, ["--version"])
    assert res.exit_code == 0 and __version__ in res.output


def test_help_lists_every_command_with_one_line():
    res = CliRunner().invoke(main, ["--help"])
    assert res.exit_code == 0
    for name in ["check", "attach", "run", "diagnose", "train", "playbook"]:
        assert name in COMMANDS
        assert f"  {name} " in res.output


def test_every_command_has_help():
    for name in COMMANDS:
        res = CliRunner().invoke(main, [name, "--help"])
        assert res.exit_code == 0, (name, res.output)
        assert "Usage:" in res.output


def test_unknown_command_is_a_usage_error():
    res = CliRunner().invoke(main, ["frobnicate"])
    assert res.exit_code == EXIT_USAGE


def test_an_unknown_run_option_is_a_usage_error_not_a_command_to_start():
    # run passes what follows `--` unprocessed, so a misspelt option of run's own reached
    # the job's command line: "cannot start '--hang-timeot': command not found"
    res = CliRunner().invoke(main, ["run", "--hang-timeot", "5", "--", "python", "t.py"])
    assert res.exit_code == EXIT_USAGE
    assert "No such option '--hang-timeot'" in res.output and "--hang-timeout" in res.output
    res = CliRunner().invoke(main, ["scale", "--nproc-lst", "1,2", "--", "python", "t.py"])
    assert res.exit_code == EXIT_USAGE and "No such option '--nproc-lst'" in res.output


def test_not_implemented_commands_exit_3_and_say_so():
    group = click.Group(commands={"later": not_implemented("later")})
    res = CliRunner().invoke(group, ["later", "--x", "y"])
    assert res.exit_code == EXIT_DOCTOR_FAILED
    assert "ddpdoctor later: not implemented yet" in res.output


def test_playbook_list_and_render():
    res = CliRunner().invoke(main, ["playbook"])
    assert res.exit_code == 0
    assert "HANG_RANK_MISSING_COLLECTIVE" in res.output and "ENV_SHM_TOO_SMALL" in res.output
    res = CliRunner().invoke(main, ["playbook", "env_shm_too_small"])
    assert res.exit_code == 0
    assert "Symptoms" in res.output and "Verify" in res.output


def test_playbook_json(tmp_path):
    out = tmp_path / "pb.json"
    res = CliRunner().invoke(main, ["playbook", "OOM", "--json", str(out)])
    assert res.exit_code == 0
    data = json.loads(out.read_text())
    assert data[0]["id"] == "OOM" and set(data[0]["sections"]) >= {"Symptoms", "Fix"}


def test_unknown_playbook_is_a_usage_error_with_a_hint():
    res = CliRunner().invoke(main, ["playbook", "HANG_TYPO"])
    assert res.exit_code == EXIT_USAGE
    assert "no playbook 'HANG_TYPO'" in res.output and "HANG_DATALOADER" in res.output


@pytest.mark.slow  # starts a process (tests/lib/spawn_report.py)
@pytest.mark.parametrize("argv", [["--help"], ["playbook"], ["playbook", "OOM"]])
def test_torch_free_commands_do_not_import_torch(argv):
    code = ("import sys\nfrom ddpdoctor.cli import main\n"
            f"try:\n    main({argv!r}, standalone_mode=False)\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, 'torch was imported'\n")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
