"""The merged stack view: identical stacks shown once with their ranks, culprits marked."""

from __future__ import annotations

from rich.console import Console
from rich.text import Text

from ddpdoctor.attach.analyze import StackGroup, ranks_text
from ddpdoctor.core.render import safe_console

_MAX_FRAMES = 16


def render_stack_groups(groups: list[StackGroup], culprits: list[int],
                        console: Console | None = None) -> None:
    # a rank's file and function names are the job's text: no escape reaches the terminal
    console = safe_console(console)
    console.print(Text("Stacks (identical stacks merged; innermost frame first)",
                       style="bold underline"))
    odd = set(culprits)
    for g in groups:
        is_culprit = bool(odd.intersection(g.ranks))
        head = Text("  ")
        head.append(f"{ranks_text(g.ranks)}", style="bold red" if is_culprit else "bold")
        head.append(f"  {g.state.describe()}")
        if g.state.thread and g.state.thread != "MainThread":
            head.append(f"  [{g.state.thread}]", style="dim")
        if is_culprit:
            head.append("  ◀ culprit", style="bold red")
        console.print(head)
        frames = g.state.frames[:_MAX_FRAMES]
        for f in frames:
            mark = "→ " if g.state.site is not None and f == g.state.site else "  "
            style = "red" if is_culprit and mark.strip() else ("" if mark.strip() else "dim")
            console.print(Text(f"      {mark}{f}", style=style))
        if len(g.state.frames) > _MAX_FRAMES:
            console.print(Text(f"        ... {len(g.state.frames) - _MAX_FRAMES} outer frames",
                               style="dim"))
        if not frames and g.state.detail:
            console.print(Text(f"        {g.state.detail}", style="dim"))
