"""The terminal view of a ``patchset check longctx`` report: one table row per measurement, the
errors and skip reasons under it, then the verdict.

Kept apart from ``patchset.verify.longctx`` (which measures; its records: ``verify.longctx.report``) so the checks have no terminal
dependency. The table goes through ``patchset.commands.table``: it reads at any width, and piped
(or in a per-patch test log, ``longctx_text``) it is tab-separated text. ``--json`` is the machine
format.
"""

from __future__ import annotations

import io

from patchset.commands.table import Cell, Col, Styled, Term
from patchset.verify.longctx.report import LongctxReport, fmt_number

OK, FAIL, SKIPPED = Styled("ok", "green"), Styled("FAIL", "bold red"), Styled("skipped", "yellow")


def render_longctx(term: Term, report: LongctxReport) -> None:
    cols = [
        Col("check", whole=True),
        Col("case", drop=3),
        Col("metric", drop=4),
        Col("value", right=True),
        Col("bar", right=True, drop=1),
        Col("control", right=True, drop=5),  # empty in fixed mode: then no column
        Col("verdict"),
    ]
    rows: list[list[Cell]] = []
    notes: list[tuple[Styled, str]] = []  # what a cell cannot hold: an error, a skip reason
    for res in report.results:
        if res.skipped is not None:
            rows.append([res.name, "", "", "", "", "", SKIPPED])
            notes.append((SKIPPED, f"{res.name}: {res.skipped}"))
            continue
        if not res.measurements:
            rows.append([res.name, "", "", "", "", "", FAIL])
            notes.append((FAIL, f"{res.name}: {res.error or 'no answer'}"))
        for m in res.measurements:
            rows.append(
                [
                    res.name,
                    m.case,
                    m.metric,
                    fmt_number(m.value),
                    fmt_number(m.bar),
                    "" if m.control is None else fmt_number(m.control),
                    OK if m.ok else FAIL,
                ]
            )
            if m.details.get("error"):
                notes.append((OK if m.ok else FAIL, f"{res.name} {m.case}: {m.details['error']}"))
    title = f"long-context checks: {report.model} at {report.url} ({report.mode} thresholds)"
    term.table(cols, rows, title=Styled(title, "bold"))
    for verdict, text in notes:
        term.line(verdict, f" {text}", indent="  ")
    failed = [r.name for r in report.results if not r.ok and r.skipped is None]
    term.line(
        Styled("PASS", "green") if report.ok else Styled("FAIL", "bold red"),
        f" in {report.seconds:.1f} s" + (f"; failed: {', '.join(failed)}" if failed else ""),
    )


def longctx_text(report: LongctxReport) -> str:
    """The report as plain tab-separated text, for a per-patch test's log."""
    buf = io.StringIO()
    render_longctx(Term(buf, tty=False, color=False), report)
    return buf.getvalue()
