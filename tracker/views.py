"""Renderings of the upstream-status dashboard for people: a rich table per target (colour for
state, drift and action) and Markdown (for an issue or a PR comment). Machines use
``StatusReport.to_json()``; the static HTML page is ``tracker.html``.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from rich.console import Console
from rich.table import Table
from rich.text import Text

from patchset.text import md_cell
from patchset.tracker.status import StatusReport, StatusRow

STATE_STYLE = {
    "merged": "magenta",
    "open": "green",
    "draft": "cyan",
    "closed": "red",
    "unknown": "yellow",
    "none": "dim",
}
DRIFT_STYLE = {
    "unchanged": "green",
    "revised": "bold yellow",
    "merged-as-vendored": "magenta",
    "merged-with-changes": "bold magenta",
    "merged": "magenta",
    "closed-unmerged": "red",
    "head-moved": "yellow",
    "unknown": "dim",
    "n/a": "dim",
}
ACTION_STYLE = {
    "drop-at-rebase": "bold magenta",
    "refresh": "bold yellow",
    "upstream": "blue",
    "held": "yellow",
    "nothing": "green",
    "dropped": "dim",
    "unknown": "bold red",
}
ACTION_WORDS = {
    "drop-at-rebase": "drop at next rebase",
    "refresh": "refresh from the PR",
    "upstream": "upstream it",
    "held": "held",
    "nothing": "nothing to do",
    "dropped": "dropped",
    "unknown": "unknown",
}


def _yes(v: bool | None) -> str:
    return "?" if v is None else ("yes" if v else "no")


def upstream_cell(r: StatusRow) -> str:
    """The PR column in words: ``vllm-project/vllm#58021 merged 2026-10-01 by QHarshil``."""
    if r.pr is None:
        return "—"
    pr = r.pr
    out = f"{pr.ref} {pr.state}"
    if pr.merged_at:
        out += f" {pr.merged_at[:10]}"
    if pr.author:
        out += f" by {pr.author}"
    return out


def detail_cell(r: StatusRow) -> str:
    """Review, CI, where the merge is, and the other refs of the patch."""
    bits: list[str] = []
    if r.pr is not None:
        if r.pr.review:
            bits.append(r.pr.review.lower().replace("_", " "))
        if r.pr.ci:
            bits.append(f"CI {r.pr.ci.lower()}")
        if r.pr.state == "merged":
            if r.in_base is not None:
                bits.append(f"in base: {_yes(r.in_base)}")
            if r.in_main is not None:
                bits.append(f"in main: {_yes(r.in_main)}")
            if r.first_release:
                bits.append(f"first in {r.first_release}")
        if r.pr.updated_at and r.pr.state in ("open", "draft"):
            bits.append(f"updated {r.pr.updated_at[:10]}")
        if r.head_moved is not None:
            bits.append("head moved" if r.head_moved else "head as vendored")
    for ref in r.refs:
        bits.append(f"{ref.role.rstrip('s')} {ref.ref} {ref.state}")
    return "; ".join(bits)


def render_status(console: Console, report: StatusReport) -> None:
    """A rich table per target, with a header saying how old the data is."""
    head = f"upstream status of {report.ledger}"
    if report.title:
        head += f" — {report.title}"
    console.print(Text(head, style="bold"))
    console.print(
        f"mode: {report.mode}; data: {report.oldest()}"
        + (f"; {report.round_trips} request(s)" if report.round_trips else "")
    )
    for w in report.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    for target, rows in report.by_target().items():
        t = report.targets.get(target, {})
        title = f"{target} ({t.get('github', '')}, base {t.get('base') or '—'})"
        table = Table(title=title, title_justify="left", show_lines=False, expand=False)
        columns: tuple[tuple[str, dict[str, Any]], ...] = (
            ("#", {"justify": "right"}),
            ("patch", {}),
            ("origin", {}),
            ("upstream", {}),
            ("detail", {}),
            ("drift", {}),
            ("action", {}),
            ("data", {"style": "dim"}),
        )
        for col, kw in columns:
            table.add_column(col, overflow="fold", **kw)
        for r in rows:
            state = r.upstream_state
            up = Text(upstream_cell(r), style=STATE_STYLE.get(state, ""))
            if r.error:
                up.append(f"\n{r.error}", style="bold red")
            action = Text(ACTION_WORDS.get(r.action, r.action), style=ACTION_STYLE.get(r.action, ""))
            if r.action_text:
                action.append(f"\n{r.action_text}", style="")
            pid = Text(r.id, style="dim" if r.state != "active" else "")
            if r.state != "active":
                pid.append(f" [{r.state}]", style=STATE_STYLE.get("unknown") if r.state == "held" else "dim")
            table.add_row(
                str(r.order or ""),
                pid,
                r.origin,
                up,
                detail_cell(r),
                Text(r.drift, style=DRIFT_STYLE.get(r.drift, "")),
                action,
                r.data,
            )
        console.print(table)
    counts = report.counts("action")
    console.print(
        "actions: "
        + ", ".join(f"[{ACTION_STYLE.get(a, '')}]{n} {ACTION_WORDS.get(a, a)}[/]" for a, n in sorted(counts.items()))
    )
    for e in report.errors():
        console.print(f"[bold red]error:[/] {e}")
    if report.recorded:
        console.print(f"recorded into the ledger: {', '.join(report.recorded)}")


_md = md_cell


def to_markdown(report: StatusReport) -> str:
    """The dashboard as Markdown: a table per target and a line on the data's age."""
    out = [
        f"# Upstream status{': ' + _md(report.title) if report.title else ''}",
        "",
        f"Mode `{report.mode}`, generated {report.generated_at}; data: {_md(report.oldest())}.",
        "",
    ]
    for w in report.warnings:
        out.append(f"> **warning:** {_md(w)}")
    if report.warnings:
        out.append("")
    for target, rows in report.by_target().items():
        t = report.targets.get(target, {})
        out += [
            f"## {target} (`{t.get('github', '')}`, base `{t.get('base') or '—'}`)",
            "",
            "| # | patch | origin | upstream | detail | drift | action | data |",
            "|--:|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            pid = f"`{r.id}`" + (f" *({r.state})*" if r.state != "active" else "")
            up = upstream_cell(r)
            if r.pr is not None and r.pr.url:
                up = f"[{_md(up)}]({r.pr.url})"
            else:
                up = _md(up)
            if r.error:
                up += f" **{_md(r.error)}**"
            action = f"**{ACTION_WORDS.get(r.action, r.action)}**" + (
                f": {_md(r.action_text)}" if r.action_text else ""
            )
            out.append(
                f"| {r.order or ''} | {pid} | {r.origin} | {up} | {_md(detail_cell(r))} | {r.drift} | "
                f"{action} | {_md(r.data)} |"
            )
        out.append("")
    counts = report.counts("action")
    out.append("Actions: " + ", ".join(f"{n} {ACTION_WORDS.get(a, a)}" for a, n in sorted(counts.items())) + ".")
    errors = report.errors()
    if errors:
        out += ["", "Errors:", *(f"- {_md(e)}" for e in errors)]
    return "\n".join(out) + "\n"


# ---- patchset fetch ------------------------------------------------------------------------------
FETCH_STYLE = {
    "stored": "green",
    "present": "dim",
    "local": "dim",
    "missing": "yellow",
    "failed": "bold red",
    "refused": "bold red",
}
CHECK_STYLE = {
    "unchanged": "green",
    "moved-same": "cyan",
    "changed": "bold yellow",
    "moved": "yellow",
    "gone": "bold red",
    "error": "bold red",
    "unpinned": "dim",
    "local": "dim",
    "offline": "dim",
}


def _source_table(
    rows: Sequence[Any], styles: dict[str, str], shas: tuple[str, str], headings: tuple[str, str] | None = None
) -> Table:
    """One row per patch source (fetch and check rows alike): patch, source, coloured status, two
    commit or sha256 fields cut to 12 characters (the row attributes ``shas``, shown under
    ``headings``), and the detail message."""
    table = Table(show_header=True, show_lines=False)
    for col in ("patch", "source", "status", *(headings or shas), "detail"):
        table.add_column(col, overflow="fold")
    for r in rows:
        table.add_row(
            r.id,
            r.source,
            Text(r.status, style=styles.get(r.status, "")),
            *((getattr(r, a) or "")[:12] for a in shas),
            r.message,
        )
    return table


def render_fetch(console: Console, report) -> None:  # report: patchset.commands.fetch.FetchReport
    """One line per patch: what fetch did, and whether anything was written."""
    for w in report.warnings:
        console.print(f"[yellow]warning:[/] {w}")
    console.print(_source_table(report.rows, FETCH_STYLE, ("head", "sha256")))
    if report.written:
        n = sum(1 for r in report.rows if r.status == "stored")
        console.print(f"[green]stored {n} bod{'y' if n == 1 else 'ies'} and updated the lock[/]")
    elif report.failed or report.refused:
        console.print("[bold red]nothing was written[/]: stored bodies and the lock are unchanged")
        for s in report.unreachable():
            console.print(f"  could not reach {s}")


def render_check(console: Console, report) -> None:  # report: patchset.commands.fetch.CheckReport
    """One line per source, then the interdiff of every source whose change changed."""
    console.print(_source_table(report.rows, CHECK_STYLE, ("pinned", "current"), headings=("pinned", "now")))
    for r in report.rows:
        if r.interdiff:
            console.print(Text(f"interdiff of {r.id} (stored -> upstream):", style="bold"))
            console.print(Text(r.interdiff), highlight=False)
