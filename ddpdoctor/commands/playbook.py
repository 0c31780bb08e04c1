"""`ddpdoctor playbook [ID]`: list the playbooks or render one in the terminal."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import click

from ddpdoctor.commands.common import DoctorCommand, html_option, json_option
from ddpdoctor.core import outputs
from ddpdoctor.core.errors import DoctorError
from ddpdoctor.core.report import EXIT_USAGE

if TYPE_CHECKING:
    from ddpdoctor.core.playbook import Playbook


@click.command(name="playbook", cls=DoctorCommand)
@click.argument("finding_id", required=False, metavar="[ID]")
@click.option("--list", "list_", is_flag=True, help="List every playbook (the default with no ID).")
@json_option
@html_option
def command(finding_id: str | None, list_: bool, json_path: str | None,
            html_path: str | None) -> int:
    """Show how to fix a finding.

    \b
    ddpdoctor playbook                    list every finding id with its title
    ddpdoctor playbook ENV_SHM_TOO_SMALL  render that playbook (case-insensitive)
    ddpdoctor playbook OOM --html oom.html  the playbook as one page to share

    --json writes the playbook(s) as JSON (a list of {id, title, severity, applies_to,
    sections}), --html as one self-contained page.
    """
    from ddpdoctor.core import playbook

    pbs = [_one(finding_id)] if finding_id and not list_ else playbook.load_all()
    if json_path:
        _write_json(pbs, json_path)
    if html_path:
        _write_html(pbs, html_path)
    if json_path == outputs.STDOUT:
        return 0
    if finding_id and not list_:
        _print_one(pbs[0])
    else:
        _print_table(pbs)
    return 0


def _one(finding_id: str) -> Playbook:
    from ddpdoctor.core import playbook

    wanted = finding_id.strip().upper()
    try:
        return playbook.load(wanted)
    except KeyError:
        prefix = wanted.split("_")[0]
        close = [i for i in playbook.available() if prefix and prefix in i]
        hint = f" Did you mean: {', '.join(close[:5])}?" if close else ""
        shown = finding_id if len(finding_id) <= 60 else finding_id[:60] + "..."
        raise DoctorError(f"no playbook {shown!r}.{hint} Run 'ddpdoctor playbook' to list "
                          "them.", EXIT_USAGE) from None


def _print_one(pb: Playbook) -> None:
    from rich.console import Console
    from rich.markdown import Markdown

    console = Console(highlight=False)
    console.print(f"[bold]{pb.id}[/bold] · {pb.severity} · found by {', '.join(pb.applies_to)}")
    console.print(Markdown(f"# {pb.title}\n\n{pb.body}"))


def _print_table(pbs: list[Playbook]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console(highlight=False)
    table = Table(title="ddpdoctor playbooks", title_justify="left")
    table.add_column("id", style="bold", no_wrap=True)
    table.add_column("severity")
    table.add_column("found by")
    table.add_column("title")
    for pb in pbs:
        table.add_row(pb.id, pb.severity, ", ".join(pb.applies_to), pb.title)
    console.print(table)
    console.print("Render one with: ddpdoctor playbook ID")


def _write_json(pbs: list[Playbook], path: str) -> None:
    data = [{"id": p.id, "title": p.title, "severity": p.severity,
             "applies_to": p.applies_to, "sections": p.sections} for p in pbs]
    target = outputs.check("--json", path)
    assert target is not None
    outputs.write(target, (json.dumps(data, indent=2) + "\n").encode("utf-8"))


def _write_html(pbs: list[Playbook], path: str) -> None:
    from ddpdoctor.report.playbook_page import render_playbooks

    target = outputs.check("--html", path, stdout_ok=False)
    assert target is not None
    data = render_playbooks(pbs).encode("utf-8")
    outputs.write(target, data)
    click.echo(f"ddpdoctor: HTML page written to {path} ({len(data) / 1e6:.1f} MB)", err=True)
