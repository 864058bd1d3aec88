"""The terminal view of a ``patchset verify`` report: one table row per test, then what to do.

Kept apart from ``patchset.verify.pertest`` (and its records, ``verify.outcomes``) so the runner has no terminal dependency; ``cli.py`` calls
``render_verify(term, report)``. Tables go through ``patchset.commands.table`` (any width, pipes).
"""

from __future__ import annotations

from patchset.commands.table import Cell, Col, Styled, Term
from patchset.sealed import shown_path
from patchset.verify.outcomes import BROKEN, ERROR, NOT_NEEDED, PROVEN, VerifyReport

STYLE = {PROVEN: "green", NOT_NEEDED: "yellow", BROKEN: "bold red", ERROR: "magenta"}
RUN_STYLE = {"pass": "green", "fail": "red", "error": "magenta"}
LABEL = {PROVEN: "proven", NOT_NEEDED: "not needed", BROKEN: "broken", ERROR: "error"}


def _run_cell(run) -> Styled:
    if run is None:
        return Styled("-")
    return Styled(run.outcome, RUN_STYLE.get(run.outcome, ""))


def render_verify(term: Term, report: VerifyReport) -> None:
    if report.planned_only and report.plan is not None:
        from patchset.verify.plan.view import render_plan  # the planner's modules: 60 ms, only for --plan

        render_plan(term, report.plan)
        return
    title = f"patchset verify: {report.target} on {report.base}" + (
        f" (tags: {', '.join(report.tags)})" if report.tags else ""
    )
    cols = [
        Col("patch", whole=True),
        Col("test", whole=True, drop=5),
        Col("with", drop=2),
        Col("without", drop=3),
        Col("class", drop=1),
        Col("seconds", right=True, drop=4),
    ]
    rows: list[list[Cell]] = []
    for p in report.patches:
        for i, t in enumerate(p.tests):
            rows.append(
                [
                    p.patch_id if i == 0 or not term.tty else "",
                    f"{t.name} ({t.kind}: {', '.join(t.checks)})" if t.kind in ("longctx", "serving") else t.name,
                    _run_cell(t.with_run),
                    _run_cell(t.without_run),
                    Styled(LABEL[t.klass], STYLE[t.klass]),
                    f"{t.seconds:.1f}",
                ]
            )
    term.table(cols, rows, title=Styled(title, "bold"))
    for p in report.patches:
        for t in p.tests:
            if t.klass != PROVEN:
                term.line(Styled(LABEL[t.klass], STYLE[t.klass]), f" {p.patch_id} / {t.name}: {t.note}", indent="  ")
            if t.kind == "serving":
                _serving_lines(term, p.patch_id, t)
        if p.note:
            term.line(f"{p.patch_id}: {p.note}", indent="  ")
    if report.untested:
        term.line(f"no selected test: {', '.join(report.untested)}", indent="  ")
    _proof_lines(term, report)
    if report.cache_ignored:
        ignored = len(report.cache_ignored)
        term.line(
            Styled(f"ignored {ignored} cached result(s)", "bold yellow"),
            " not sealed by this installation (tampered, or another machine's): measured again: "
            + ", ".join(shown_path(p) for p in report.cache_ignored[:3])
            + (f" and {ignored - 3} more" if ignored > 3 else ""),
            indent="  ",
        )
    for n in report.notes:
        term.line(f"note: {n}", indent="  ")
    if report.engines:
        _engine_lines(term, report)
    c = report.counts()
    parts: list[str | Styled] = [f"{len(report.patches)} patch(es): "]
    for i, k in enumerate((PROVEN, NOT_NEEDED, BROKEN, ERROR)):
        parts += [", " if i else "", Styled(f"{c[k]} {LABEL[k]}", STYLE[k])]
    parts.append(f"; wall time {report.wall_seconds:.1f} s on {report.jobs} job(s)")
    term.line(*parts)
    if report.work_dir:
        term.line(f"trees and logs kept in {report.work_dir}")


def _engine_lines(term: Term, report: VerifyReport) -> None:
    """The engines a run started, as lines, not a table: a log path or a patch id must never be
    broken across lines."""
    term.line("engines (one per tree and configuration, shared by the tests on it):")
    for e in report.engines:
        up = "-" if e.startup_seconds is None else f"{e.startup_seconds:.1f} s"
        on = f" on {e.engine}" if e.engine else ""
        if not e.started:
            term.line(
                f"{e.label}{on}: not started, every result reused from the cache; tests {', '.join(e.tests)}",
                indent="  ",
            )
            continue
        term.line(
            f"{e.label}{on}: start-up {up}, checks {e.check_seconds:.1f} s; tests {', '.join(e.tests)}", indent="  "
        )
        if e.reused:
            term.line(f"reused from the cache: {', '.join(e.reused)}", indent="    ")
        if e.error:
            term.line(Styled(f"did not serve: {e.error}", "magenta"), indent="    ")
        term.line(f"log {e.log}", indent="    ")
    n_reused = len(report.reused)
    planned = ""
    if report.plan is not None:
        planned = f" (planned {report.plan.starts}; a full run: {report.plan.full_starts})"
    term.line(
        f"{report.engine_starts} engine start(s){planned}"
        + (f"; {n_reused} result(s) reused from the cache (trees unchanged)" if n_reused else ""),
        indent="  ",
    )


def _proof_lines(term: Term, report: VerifyReport) -> None:
    """What the long-context verdicts rest on: proven tonight (why) or carried (from which run)."""
    for p in report.patches:
        if not p.proof:
            continue
        word = Styled("carried", "cyan") if p.carried_from else Styled("proven tonight", "green")
        rest = p.proof.removeprefix("carried ") if p.carried_from else p.proof.removeprefix("proven tonight")
        term.line(word, f" {p.patch_id}: {rest.lstrip(': ')}", indent="  ")
    for c in report.changed:
        term.line(
            Styled("verdict changed", "bold yellow"),
            f" {c['patch']}: {c['was']} -> {c['now']} (last: {c['since']})",
            indent="  ",
        )
    for g in report.group_tries:
        saved = g["starts_saved"]
        what = f"{saved} start(s) saved" if saved >= 0 else f"{-saved} start(s) more than one by one"
        alone = f"; tried alone: {', '.join(g['tried_alone'])}" if g["tried_alone"] else ""
        term.line(
            f"tried together on {g['engine']}: {', '.join(g['patches'])}: passed together: "
            f"{', '.join(g['passed_together']) or 'none'}{alone}; {g['engine_starts']} start(s), {what}",
            indent="  ",
        )


VERDICT_STYLE = {"regression": "bold red", "improvement": "green", "within noise": ""}


def _serving_lines(term: Term, patch_id: str, t) -> None:
    """A serving test's verdicts: per metric, the median ratio (with / baseline) and its 95% interval."""
    run = t.with_run
    comparison = getattr(run, "comparison", None) if run is not None else None
    if not comparison:
        return
    base = getattr(run, "baseline_from", "") or "the baseline"
    paired = "paired, interleaved repeats" if comparison.get("paired") else "unpaired"
    term.line(f"{patch_id} / {t.name}: with the series vs {base} ({paired}):", indent="  ")
    for v in comparison.get("verdicts", []):
        ratio, lo, hi = (_r(v[k]) for k in ("ratio", "low", "high"))
        tol = float(v.get("tolerance", 0.0))
        term.line(
            Styled(v["verdict"], VERDICT_STYLE.get(v["verdict"], "")),
            f" {v['metric']}: ratio {ratio} [95% CI {lo}, {hi}], tolerance {tol:.0%}",
            indent="    ",
        )
    for n in comparison.get("notes", []):
        term.line(f"note: {n}", indent="    ")


def _r(x) -> str:
    return x if isinstance(x, str) else f"{float(x):.3f}"
