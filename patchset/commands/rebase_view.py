"""The terminal view of a ``patchset rebase`` report: one table row per patch, then the conflicts
with the upstream commits that changed their lines, the range-diffs and what to do next.

Kept apart from ``patchset.rebase.report`` (plain data, read by the state file of an interrupted
rebase and by the gate) so the rebase has no terminal dependency. The table goes through
``patchset.commands.table``: it reads at any width, and piped it is tab-separated text.
"""

from __future__ import annotations

from patchset.commands.table import Cell, Col, Styled, Term
from patchset.rebase.report import ALREADY_UPSTREAM, CARRIED, CONFLICT, SKIPPED, SUPERSEDED, PatchResult, RebaseReport

STYLE = {CARRIED: "green", ALREADY_UPSTREAM: "cyan", SUPERSEDED: "cyan", CONFLICT: "red", SKIPPED: "yellow"}
DIFF_STYLE = {"+": "green", "-": "red", "@": "cyan"}


def detail(p: PatchResult) -> str:
    """One line on why the patch landed where it did: moves and non-clean files, the decisive
    evidence of a drop, or the conflicting files."""
    if p.verdict == CARRIED:
        parts = []
        for f in p.files:
            if f.moved_from:
                parts.append(f"{f.moved_from} -> {f.new_path}")
            elif f.how != "clean":
                parts.append(f"{f.path}: {f.how}")
        return "; ".join(parts)
    if p.verdict in (ALREADY_UPSTREAM, SUPERSEDED):
        return "; ".join(e["detail"] for e in p.evidence if e.get("decisive"))
    return "; ".join(f"{f.path}: {f.message or f.how}" for f in p.files if f.how in ("conflict", "broken"))


def render_rebase(term: Term, report: RebaseReport, *, range_diffs: bool = True) -> None:
    """Print the report: one row per patch, then conflicts with their upstream commits."""
    title = (
        f"rebase {report.target}: {report.old_base} ({report.old_commit[:12]}) -> "
        f"{report.onto} ({report.new_commit[:12]})"
    )
    cols = [Col("#", right=True), Col("patch", whole=True), Col("result", drop=1), Col("details", drop=2)]
    rows: list[list[Cell]] = []
    for i, p in enumerate(report.patches, start=1):
        verdict = p.verdict + (f" ({p.how})" if p.how and p.verdict == CARRIED else "")
        rows.append([str(i), p.id, Styled(verdict, STYLE.get(p.verdict, "")), detail(p)])
    term.table(cols, rows, title=Styled(title, "bold"))
    for p in report.patches:
        for w in p.warnings:
            term.line(Styled("warning", "yellow"), f" {p.id}: {w}")
    for p in report.patches:
        if p.verdict != CONFLICT:
            continue
        term.line(Styled("conflict", "red"), f" {p.id}")
        for f in p.files:
            if f.how not in ("conflict", "broken"):
                continue
            now = f" (now {f.new_path})" if f.new_path and f.new_path != f.path else ""
            term.line(f"{f.path}{now}: {f.message}", indent="  ")
            for h in f.hunks:
                term.line(f"hunk #{h.index} {h.header} near line {h.line}", indent="    ")
                for c in h.commits:
                    term.line(f"upstream {c['sha'][:12]} {c['subject']}", indent="      ")
    if range_diffs:
        for p in report.patches:
            if p.range_diff:
                term.line(Styled(f"range-diff {p.id}", "bold"))
                for ln in p.range_diff.rstrip("\n").split("\n"):  # a diff: printed as it is, never re-wrapped
                    term.write(ln, DIFF_STYLE.get(ln[:1], ""))
    summary = ", ".join(f"{n} {v}" for v, n in report.counts().items() if n)
    term.line(
        f"{summary or 'no active patches'}; status: {report.status}"
        + (f"; previous series kept in {report.backup}" if report.backup else "")
        + ("; dry run, nothing written" if report.status == "dry-run" else "")
    )
    if report.status == "stopped":
        term.line(
            f"stopped at {report.stopped_at}: edit {', '.join(report.work_files)} then run "
            "`patchset rebase --continue` (or --skip, --abort)"
        )
    elif report.status == "conflicts":
        term.line(
            f"nothing written: resolve the conflicts with `patchset rebase --onto {report.onto} --interactive` "
            "(recorded resolutions replay next time)"
        )
