"""Renderings of the upstream-status dashboard for people: a table per target (colour for
state, drift and action) and Markdown (for an issue or a PR comment). Machines use
``StatusReport.to_json()``; the static HTML page is ``tracker.html``.

Everything on the page came from outside (GitHub, the ledger, recorded state): the terminal view
prints through ``Term``, which shows control characters instead of sending them; the Markdown
view passes every value through ``patchset.text``'s Markdown sanitisers (``markdown_cell``,
``markdown_code``, ``markdown_link``: http(s) links only), so no value adds a cell, a row, HTML
or a link.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from patchset.commands.table import Cell, Col, Styled, Term
from patchset.text import markdown_cell, markdown_code, markdown_link
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


def render_status(term: Term, report: StatusReport) -> None:
    """A table per target, with a header saying how old the data is."""
    head = f"upstream status of {report.ledger}"
    if report.title:
        head += f" — {report.title}"
    term.line(Styled(head, "bold"))
    term.line(
        f"mode: {report.mode}; data: {report.oldest()}"
        + (f"; {report.round_trips} request(s)" if report.round_trips else "")
    )
    for w in report.warnings:
        term.line(Styled("warning:", "yellow"), f" {w}")
    for found in report.interrupted:
        style = "bold red" if found.problem else "yellow"
        term.line(Styled("interrupted:" if found.problem else "note:", style), f" {found.message}")
    cols = [
        Col("#", right=True),
        Col("patch", whole=True),
        Col("origin", drop=5),
        Col("upstream", drop=2),
        Col("detail", drop=4),
        Col("drift", drop=3),
        Col("action", drop=1),
        Col("data", drop=6),
    ]
    for target, rows in report.by_target().items():
        t = report.targets.get(target, {})
        where = t.get("github") or "no GitHub repository recorded: PR references must read OWNER/REPO#N"
        table: list[list[Cell]] = []
        for r in rows:
            pid = r.id if r.state == "active" else f"{r.id} [{r.state}]"
            up = upstream_cell(r) + (f" ({r.error})" if r.error else "")
            action = ACTION_WORDS.get(r.action, r.action) + (f": {r.action_text}" if r.action_text else "")
            table.append(
                [
                    str(r.order or ""),
                    Styled(pid, "dim" if r.state != "active" else ""),
                    r.origin,
                    Styled(up, "bold red" if r.error else STATE_STYLE.get(r.upstream_state, "")),
                    detail_cell(r),
                    Styled(r.drift, DRIFT_STYLE.get(r.drift, "")),
                    Styled(action, ACTION_STYLE.get(r.action, "")),
                    Styled(r.data, "dim"),
                ]
            )
        term.table(cols, table, title=Styled(f"{target} ({where}, base {t.get('base') or '—'})", "bold"))
    counts = report.counts("action")
    parts: list[str | Styled] = ["actions: " + ("none" if not counts else "")]
    for i, (a, n) in enumerate(sorted(counts.items())):
        parts += [", " if i else "", Styled(f"{n} {ACTION_WORDS.get(a, a)}", ACTION_STYLE.get(a, ""))]
    term.line(*parts)
    for e in report.errors():
        term.line(Styled("error:", "bold red"), f" {e}")
    if report.recorded:
        term.line(f"recorded into the ledger: {', '.join(report.recorded)}")


_md = markdown_cell


def to_markdown(report: StatusReport) -> str:
    """The dashboard as Markdown: a table per target and a line on the data's age."""
    out = [
        f"# Upstream status{': ' + _md(report.title) if report.title else ''}",
        "",
        f"Mode {markdown_code(report.mode)}, generated {_md(report.generated_at)}; data: {_md(report.oldest())}.",
        "",
    ]
    for w in report.warnings:
        out.append(f"> **warning:** {_md(w)}")
    for found in report.interrupted:
        out.append(f"> **{'interrupted' if found.problem else 'note'}:** {_md(found.message)}")
    if report.warnings or report.interrupted:
        out.append("")
    for target, rows in report.by_target().items():
        t = report.targets.get(target, {})
        out += [
            f"## {_md(target)} ({markdown_code(t.get('github') or '') or '-'}, "
            f"base {markdown_code(t.get('base') or '—')})",
            "",
            "| # | patch | origin | upstream | detail | drift | action | data |",
            "|--:|---|---|---|---|---|---|---|",
        ]
        for r in rows:
            pid = markdown_code(r.id, cell=True) + (f" *({_md(r.state)})*" if r.state != "active" else "")
            up = markdown_link(upstream_cell(r), r.pr.url if r.pr is not None else None)
            if r.error:
                up += f" **{_md(r.error)}**"
            action = f"**{_md(ACTION_WORDS.get(r.action, r.action))}**" + (
                f": {_md(r.action_text)}" if r.action_text else ""
            )
            out.append(
                f"| {r.order or ''} | {pid} | {_md(r.origin)} | {up} | {_md(detail_cell(r))} | {_md(r.drift)} | "
                f"{action} | {_md(r.data)} |"
            )
        out.append("")
    counts = report.counts("action")
    out.append("Actions: " + ", ".join(f"{n} {_md(ACTION_WORDS.get(a, a))}" for a, n in sorted(counts.items())) + ".")
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
    term: Term,
    rows: Sequence[Any],
    styles: dict[str, str],
    shas: tuple[str, str],
    headings: tuple[str, str] | None = None,
) -> None:
    """One row per patch source (fetch and check rows alike): patch, source, coloured status, two
    commit or sha256 fields cut to 12 characters (the row attributes ``shas``, shown under
    ``headings``), and the detail message."""
    cols = [
        Col("patch", whole=True),
        Col("source", whole=True, drop=2),
        Col("status"),
        *(Col(h, drop=3 + i) for i, h in enumerate(headings or shas)),
        Col("detail", drop=1),
    ]
    term.table(
        cols,
        [
            [
                r.id,
                r.source,
                Styled(r.status, styles.get(r.status, "")),
                *((getattr(r, a) or "")[:12] for a in shas),
                r.message,
            ]
            for r in rows
        ],
    )


def render_fetch(term: Term, report) -> None:  # report: patchset.commands.fetch.FetchReport
    """One line per patch: what fetch did, and whether anything was written."""
    for w in report.warnings:
        term.line(Styled("warning:", "yellow"), f" {w}")
    _source_table(term, report.rows, FETCH_STYLE, ("head", "sha256"))
    if report.written:
        n = sum(1 for r in report.rows if r.status == "stored")
        term.line(Styled(f"stored {n} bod{'y' if n == 1 else 'ies'} and updated the lock", "green"))
    elif report.failed or report.refused:
        term.line(Styled("nothing was written", "bold red"), ": stored bodies and the lock are unchanged")
        for s in report.unreachable():
            term.line(f"could not reach {s}", indent="  ")


def render_check(term: Term, report) -> None:  # report: patchset.commands.fetch.CheckReport
    """One line per source, then the interdiff of every source whose change changed."""
    _source_table(term, report.rows, CHECK_STYLE, ("pinned", "current"), headings=("pinned", "now"))
    for r in report.rows:
        if r.interdiff:
            term.line(Styled(f"interdiff of {r.id} (stored -> upstream):", "bold"))
            term.write(r.interdiff.rstrip("\n"))
