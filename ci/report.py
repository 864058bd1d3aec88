"""What one gate run found: the report's data, its JSON form, and how it prints in a terminal.

Exit codes (``GateReport.exit_code``): 0 green (the series replays, applies to a fresh tree
matching the refreshed lock, and every selected test passes) or nothing new; 1 a regression; 2 the
gate could not judge (network, disk, a missing tool, bad input, a crash). Long-context tests also
get rows of their own (``longctx_rows``, for the terminal and ``report.md``).
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from patchset.commands.table import Col, Styled, Term
from patchset.text import Word


class GateStatus(Word):
    """The gate's verdict on a run (``EXIT`` maps it to the exit code)."""

    GREEN = "green"
    RED = "red"
    ERROR = "error"
    UNCHANGED = "unchanged"
    PLANNED = "planned"


GREEN, RED, ERROR, UNCHANGED, PLANNED = GateStatus
EXIT = {GREEN: 0, UNCHANGED: 0, RED: 1, ERROR: 2, PLANNED: 0}


@dataclass
class GateReport:
    """The gate's verdict: each stage's outcome and the exit code."""

    status: GateStatus
    target: str = ""
    upstream: dict[str, str] = field(default_factory=dict)  # kind, location
    asked: str = ""  # --onto REF as given, or "--latest"
    onto: str = ""  # the label the rebase records (vllm==0.33.0, or a sha)
    commit: str = ""  # the upstream commit judged
    base: str = ""  # the ledger's base (label)
    base_commit: str = ""
    previous: dict[str, Any] = field(default_factory=dict)  # the last judgement (from the state file)
    rebase: dict[str, Any] = field(default_factory=dict)  # RebaseReport.to_json()
    first_bad: dict[str, dict[str, Any]] = field(default_factory=dict)  # patch id -> FirstBad.to_json()
    apply: dict[str, Any] = field(default_factory=dict)  # outcome, message, mismatched
    tests: list[dict[str, Any]] = field(default_factory=list)  # TestResult.to_json()
    tags: list[str] = field(default_factory=list)
    upstream_status: dict[str, Any] = field(default_factory=dict)  # counts and actions from patchset.tracker.status
    series_patch: dict[str, Any] = field(default_factory=dict)  # path, bytes, files
    build: dict[str, dict[str, Any]] = field(default_factory=dict)  # --build: wheel/overlay -> its report
    image: dict[str, str] = field(default_factory=dict)  # the stock image of the judged commit: base_image, image, why
    newest_safe: dict[str, Any] = field(default_factory=dict)  # red: the newest commit the whole series carries onto
    plan: dict[str, Any] = field(default_factory=dict)  # the verify plan, what was proven tonight, what carried
    judged_at: str = ""  # the judgement this run recorded in the state (the run's name in later reports)
    verdict_report: dict[str, Any] = field(default_factory=dict)  # unchanged: the kept report of the last verdict
    artifacts: str = ""
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    timings: dict[str, float] = field(default_factory=dict)
    seconds: float = 0.0

    @property
    def exit_code(self) -> int:
        return EXIT[self.status]

    @property
    def conflicts(self) -> list[str]:
        return [p["id"] for p in self.rebase.get("patches", []) if p["verdict"] == "conflict"]

    @property
    def failed_tests(self) -> list[dict[str, Any]]:
        return [t for t in self.tests if t["status"] != "passed"]

    def reasons(self) -> list[str]:
        """Why the gate is red, one line each."""
        out = []
        for pid in self.conflicts:
            fb = self.first_bad.get(pid, {}).get("commit")
            out.append(f"{pid} conflicts" + (f"; first bad upstream commit {describe_commit(fb)}" if fb else ""))
        if self.apply and self.apply.get("outcome") not in (None, "applied", "skipped"):
            out.append(f"the refreshed series does not apply: {self.apply.get('message', '')}")
        for t in self.failed_tests:
            out.append(f"test {t['patch']}/{t['name']} {t['status']}")
        for kind, b in self.build.items():
            if not b.get("ok"):
                out.append(f"build {kind} refused: {b.get('message', '')}")
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "exit_code": self.exit_code,
            **self.__dict__,
            "conflicts": self.conflicts,
            "reasons": self.reasons(),
        }


def report_from_json(doc: dict[str, Any]) -> GateReport:
    """A report again from its ``report.json`` (the fields ``to_json`` writes that are fields;
    the derived ones are computed again). Raises ``TypeError``/``KeyError`` on another shape."""
    names = {f.name for f in fields(GateReport)}
    if not isinstance(doc, dict) or doc.get("status") not in EXIT:
        raise TypeError("not a gate report")
    return GateReport(**{k: v for k, v in doc.items() if k in names})


def unchanged_since(r: GateReport) -> str:
    """``"unchanged since <run>: red"``: the run whose verdict stands (its time and commit)."""
    prev = r.previous
    when = prev.get("judged_at") or "the last run"
    label = prev.get("judged_label") or ""
    what = f" of {label}" if label and label != r.onto else ""
    return f"unchanged since the run of {when}{what}: {prev.get('verdict', '?')}"


def newest_safe_line(safe: dict[str, Any], *, command: bool = True) -> str:
    """One line: the newest upstream commit the series carries onto, and (``command``) the
    command that rebases there."""
    if not safe:
        return ""
    where = describe_commit(safe.get("commit")) or safe.get("label", "")
    tests = safe.get("tests")
    tested = "" if tests is None else (", its tests pass" if safe.get("passed") else f", but {tests}")
    line = f"newest safe upstream: {where} ({safe.get('why', '')}{tested})"
    return f"{line}: {safe['command']}" if command and safe.get("command") else line


def describe_commit(c: dict[str, Any] | None) -> str:
    if not c:
        return ""
    text = f'{c["sha"][:12]} "{c["subject"]}"'
    extra = []
    if c.get("pr"):
        extra.append(f"PR #{c['pr']}")
    if c.get("release"):
        extra.append(f"release {c['release']}")
    return text + (f" ({', '.join(extra)})" if extra else "")


def test_cell(t: dict[str, Any]) -> str:
    """A test in one line: ``name status`` (``name (longctx: resume) status, proven`` for long-context
    tests; ``, carried`` when its class comes from an earlier run)."""
    kind = f" (longctx: {', '.join(t.get('checks') or [])})" if t.get("kind") == "longctx" else ""
    klass = f", {t['class']}" if t.get("class") else ""
    carried = " (carried)" if t.get("carried") else ""
    return f"{t['name']}{kind} {t['status']}{klass}{carried}"


def _run_cell(run: dict[str, Any] | None) -> str:
    if not run:
        return "not run"
    up = run.get("engine_startup_seconds")
    times = f"engine up {up:.1f} s, " if isinstance(up, (int, float)) else ""
    failed = [c["check"] for c in run.get("checks") or [] if not c.get("ok")]
    what = run["outcome"] + (f" ({', '.join(failed)})" if failed else "")
    return f"{what}; {times}checks {run.get('check_seconds', 0.0):.1f} s"


def longctx_rows(r: GateReport) -> list[dict[str, str]]:
    """One row per long-context test: patch, test, checks, with, without, class, engine logs."""
    rows = []
    for t in r.tests:
        if t.get("kind") != "longctx":
            continue
        runs = t.get("longctx") or {}
        logs = [x.get("engine_log") for x in (runs.get("with"), runs.get("without")) if x and x.get("engine_log")]
        rows.append(
            {
                "patch": t["patch"],
                "test": t["name"],
                "checks": ", ".join(t.get("checks") or []),
                "with": _run_cell(runs.get("with")),
                "without": _run_cell(runs.get("without")),
                "class": t.get("class", ""),
                "logs": ", ".join(logs),
            }
        )
    return rows


_STYLE = {GREEN: "green", RED: "red", ERROR: "red", UNCHANGED: "cyan", PLANNED: "cyan"}
_VERDICT_STYLE = {"carried": "green", "already-upstream": "cyan", "superseded": "cyan", "conflict": "red"}


def plan_lines(r: GateReport) -> list[str]:
    """The verify plan in a few lines: engine starts (planned; a full run), what was proven tonight
    (why) and what was carried (from which run). The terminal and report.md print them."""
    if not r.plan or r.status == PLANNED:
        return []
    plan = r.plan.get("plan") or {}
    from patchset.verify.plan.view import cost_text

    cost = cost_text(plan.get("cost") or {})
    lines = [
        f"per-patch tests: {r.plan.get('engine_starts', 0)} engine start(s) (planned "
        f"{plan.get('engine_starts', '?')}; a full run: {plan.get('full_run_engine_starts', '?')})"
        + (f"; tonight's cost: {cost}" if cost else "")
    ]
    for x in r.plan.get("proven_tonight", []):
        lines.append(
            f"proven tonight: {x['patch']}: {str(x.get('proof') or '').removeprefix('proven tonight').lstrip(': ')}"
        )
    for x in r.plan.get("carried", []):
        lines.append(f"carried: {x['patch']}: {str(x.get('proof') or x.get('from')).removeprefix('carried ')}")
    for g in r.plan.get("group_tries", []):
        lines.append(
            f"tried together: {', '.join(g['patches'])}: passed together: {', '.join(g['passed_together']) or 'none'}; "
            f"{g['engine_starts']} start(s), {g['starts_saved']} saved"
        )
    return lines


def _plan_lines(r: GateReport, term: Term) -> None:
    if r.status == PLANNED and r.plan.get("plan"):
        from patchset.verify.plan.decide import plan_from_json
        from patchset.verify.plan.view import render_plan

        render_plan(term, plan_from_json(r.plan["plan"]))
        return
    for i, line in enumerate(plan_lines(r)):
        term.line(line, indent="  " if i else "")


def headline(r: GateReport) -> str:
    onto = r.onto or r.asked
    where = (f"{r.target} onto {onto}" if onto else f"{r.target} (upstream not named)") + (
        f" ({r.commit[:12]})" if r.commit else ""
    )
    if r.status == UNCHANGED:
        kept = "; its artifacts are kept" if r.verdict_report else ""
        return f"gate {where}: {unchanged_since(r)} (upstream has not moved{kept}); nothing to do"
    if r.status == ERROR:
        return f"gate {where}: could not judge (infrastructure failure)"
    if r.status == PLANNED:
        return f"gate {where}: the plan of the per-patch tests (nothing started, nothing written)"
    return f"gate {where}: {r.status.upper()}"


def render(r: GateReport, term: Term | None = None) -> None:
    """The report for a terminal or a log: one row per patch, then reasons, errors and where the
    artifacts are (tables through ``patchset.commands.table``)."""
    term = term or Term()
    term.line(Styled(headline(r), _STYLE.get(r.status, "")))
    if r.status == UNCHANGED and r.verdict_report:
        try:
            then = report_from_json(r.verdict_report)
        except (TypeError, KeyError):
            then = None
        for line in then.reasons() if then else []:
            term.line(Styled("regression", "red"), f" {line} (still)")
        if then and then.newest_safe:
            term.line(Styled(newest_safe_line(then.newest_safe), "bold"))
    patches = r.rebase.get("patches", [])
    if patches:
        rows = []
        for i, p in enumerate(patches, 1):
            verdict = p["verdict"] + (f" ({p['how']})" if p.get("how") else "")
            fb = describe_commit(r.first_bad.get(p["id"], {}).get("commit"))
            tests = "; ".join(test_cell(t) for t in r.tests if t["patch"] == p["id"]) or "-"
            rows.append([str(i), p["id"], Styled(verdict, _VERDICT_STYLE.get(p["verdict"], "")), fb or "-", tests])
        cols = [
            Col("#", right=True),
            Col("patch", whole=True),
            Col("replay", drop=1),
            Col("first bad upstream commit", drop=3),
            Col("tests", drop=2),
        ]
        term.table(cols, rows)
    if r.apply:
        term.line(f"apply to a fresh tree: {r.apply.get('outcome')}: {r.apply.get('message', '')}")
    lc = longctx_rows(r)
    if lc:  # lines, not a table: engine log paths and patch ids are never broken
        term.line("long-context tests (one engine per tree):")
        for row in lc:
            term.line(
                f"  {row['patch']} / {row['test']} ({row['checks']}): {row['class']}; "
                f"with the series: {row['with']}; without the patch: {row['without']}"
            )
            if row["logs"]:
                term.line(f"    engine logs: {row['logs']}")
    _plan_lines(r, term)
    for kind, b in r.build.items():
        term.line(f"build {kind}: {b.get('outcome')}: {b.get('message', '')}")
    if r.image.get("why"):
        term.line(f"image: {r.image['why']}")
    elif r.image.get("image") and r.image.get("image") != r.image.get("base_image"):
        term.line(f"image: {r.image['image']} (the judged commit's; base_image was {r.image.get('base_image')})")
    for line in r.reasons():
        term.line(Styled("regression", "red"), f" {line}")
    for w in r.warnings:
        term.line(Styled("warning", "yellow"), f" {w}")
    for e in r.errors:
        term.line(Styled("error", "red"), f" {e}")
    if r.newest_safe:
        term.line(Styled(newest_safe_line(r.newest_safe), "bold"))
    if r.series_patch.get("files"):
        term.line(f"refreshed series: {r.series_patch['path']} ({len(r.series_patch['files'])} files)")
    if r.artifacts:
        term.line(f"artifacts: {r.artifacts}")
    term.line(f"exit {r.exit_code} in {r.seconds:.2f} s")
