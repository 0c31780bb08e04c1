"""`ddpdoctor playbook [ID]`: list the playbooks or render one in the terminal."""

from __future__ import annotations

import json
import sys

import click

from ddpdoctor.report import EXIT_USAGE


@click.command(name="playbook")
@click.argument("finding_id", required=False, metavar="[ID]")
@click.option("--list", "list_", is_flag=True, help="List every playbook (the default with no ID).")
@click.option("--json", "json_path", metavar="PATH", default=None,
              help="Write the playbook(s) as JSON to PATH ('-' for stdout).")
def command(finding_id: str | None, list_: bool, json_path: str | None) -> None:
    """Show how to fix a finding.

    \b
    ddpdoctor playbook                    list every finding id with its title
    ddpdoctor playbook ENV_SHM_TOO_SMALL  render that playbook (case-insensitive)
    """
    from rich.console import Console
    from rich.markdown import Markdown
    from rich.table import Table

    from ddpdoctor import playbook

    console = Console(highlight=False)
    if finding_id and not list_:
        wanted = finding_id.strip().upper()
        try:
            pb = playbook.load(wanted)
        except KeyError:
            prefix = wanted.split("_")[0]
            close = [i for i in playbook.available() if prefix and prefix in i]
            hint = f" Did you mean: {', '.join(close[:5])}?" if close else ""
            shown = finding_id if len(finding_id) <= 60 else finding_id[:60] + "..."
            click.echo(f"ddpdoctor playbook: no playbook {shown!r}.{hint} "
                       "Run 'ddpdoctor playbook' to list them.", err=True)
            sys.exit(EXIT_USAGE)
        if json_path:
            _write_json([pb], json_path)
            if json_path == "-":
                return
        console.print(f"[bold]{pb.id}[/bold] · {pb.severity} · found by {', '.join(pb.applies_to)}")
        console.print(Markdown(f"# {pb.title}\n\n{pb.body}"))
        return

    pbs = playbook.load_all()
    if json_path:
        _write_json(pbs, json_path)
        if json_path == "-":
            return
    table = Table(title="ddpdoctor playbooks", title_justify="left")
    table.add_column("id", style="bold", no_wrap=True)
    table.add_column("severity")
    table.add_column("found by")
    table.add_column("title")
    for pb in pbs:
        table.add_row(pb.id, pb.severity, ", ".join(pb.applies_to), pb.title)
    console.print(table)
    console.print("Render one with: ddpdoctor playbook ID")


def _write_json(pbs: list, path: str) -> None:
    data = [{"id": p.id, "title": p.title, "severity": p.severity,
             "applies_to": p.applies_to, "sections": p.sections} for p in pbs]
    text = json.dumps(data, indent=2) + "\n"
    if path == "-":
        sys.stdout.write(text)
    else:
        with open(path, "w") as f:
            f.write(text)
