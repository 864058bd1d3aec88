"""The terminal view of a ``patchset verify`` report: one table row per test, then what to do.

Kept apart from ``patchset.verify.pertest`` so the runner has no terminal dependency; ``cli.py`` calls
``render_verify(console, report)``.
"""

from __future__ import annotations

from rich import box
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from patchset.verify.pertest import BROKEN, ERROR, NOT_NEEDED, PROVEN, VerifyReport

STYLE = {PROVEN: "green", NOT_NEEDED: "yellow", BROKEN: "bold red", ERROR: "magenta"}
RUN_STYLE = {"pass": "green", "fail": "red", "error": "magenta"}
LABEL = {PROVEN: "proven", NOT_NEEDED: "not needed", BROKEN: "broken", ERROR: "error"}


def _run_cell(run) -> str:
    if run is None:
        return "-"
    return f"[{RUN_STYLE.get(run.outcome, '')}]{run.outcome}[/]"


def render_verify(console: Console, report: VerifyReport) -> None:
    # A patch id gets its own row in a column at least as wide as the longest id, so ids are never broken
    # (at 80 columns too); its tests follow, indented, with their runs and class.
    widest = max((len(p.patch_id) for p in report.patches), default=5)
    table = Table(
        title=escape(f"patchset verify: {report.target} on {report.base}")
        + (f" (tags: {', '.join(report.tags)})" if report.tags else ""),
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    for col, kw in (
        ("patch / test", {"overflow": "fold", "min_width": min(widest, 60)}),
        ("with", {"no_wrap": True}),
        ("without", {"no_wrap": True}),
        ("class", {"no_wrap": True}),
        ("seconds", {"justify": "right", "no_wrap": True}),
    ):
        table.add_column(col, **kw)
    for p in report.patches:
        table.add_row(f"[bold]{escape(p.patch_id)}[/]", "", "", f"[{STYLE[p.klass]}]{LABEL[p.klass]}[/]", "")
        for t in p.tests:
            name = "  " + escape(t.name)
            if t.kind == "longctx":
                name += f"\n  [dim]longctx: {escape(', '.join(t.checks))}[/]"
            table.add_row(
                name,
                _run_cell(t.with_run),
                _run_cell(t.without_run),
                f"[{STYLE[t.klass]}]{LABEL[t.klass]}[/]",
                f"{t.seconds:.1f}",
            )
    console.print(table)
    for p in report.patches:
        for t in p.tests:
            if t.klass != PROVEN:
                console.print(
                    f"  [{STYLE[t.klass]}]{LABEL[t.klass]}[/] {escape(p.patch_id)} / {escape(t.name)}: "
                    f"{escape(t.note)}",
                    highlight=False,
                )
        if p.note:
            console.print(f"  {escape(p.patch_id)}: {escape(p.note)}", highlight=False)
    if report.untested:
        console.print(f"  no selected test: {escape(', '.join(report.untested))}", highlight=False)
    if report.engines:
        # lines, not a table: a log path or a patch id must never be broken across lines
        console.print(
            "long-context engines (one per tree, shared by the tests on it):", highlight=False, soft_wrap=True
        )
        for e in report.engines:
            up = "-" if e.startup_seconds is None else f"{e.startup_seconds:.1f} s"
            console.print(
                f"  {escape(e.label)}: start-up {up}, checks {e.check_seconds:.1f} s; "
                f"tests {escape(', '.join(e.tests))}",
                highlight=False,
                soft_wrap=True,
            )
            if e.error:
                console.print(f"    [magenta]did not serve: {escape(e.error)}[/]", highlight=False, soft_wrap=True)
            console.print(f"    log {escape(e.log)}", highlight=False, soft_wrap=True)
    for n in report.notes:
        console.print(f"  note: {escape(n)}", highlight=False)
    c = report.counts()
    summary = ", ".join(f"[{STYLE[k]}]{c[k]} {LABEL[k]}[/]" for k in (PROVEN, NOT_NEEDED, BROKEN, ERROR))
    console.print(
        f"{len(report.patches)} patch(es): {summary}; wall time {report.wall_seconds:.1f} s on {report.jobs} job(s)"
    )
    if report.work_dir:
        console.print(f"trees and logs kept in {report.work_dir}", highlight=False)
