"""The gate's per-patch test tier, through ``verify``: each selected test with the refreshed series,
and without its patch, on a pristine tree of the judged commit.

Only the "with the series" result judges the gate (a serving regression fails it); the class
(proven, not-needed) is reported. ``verify`` is imported by a run that tests, not by one that finds
nothing new (it loads the engines' code, hundreds of milliseconds).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from patchset.ci import artifacts as artifacts_mod
from patchset.ci.gate.run import Judging, short_label
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger

_OUTCOME = {"pass": "passed", "fail": "failed", "error": "error"}


def run_tests(j: Judging, work_ledger: Path, refreshed: Ledger) -> None:
    """The tests the tags select, run by ``verify`` on the scratch copy ``work_ledger`` (``refreshed``
    read). Launchers, models and test files beside the ledger are found in the real ledger's
    directory. Serving tests compare with the last green run's figures when there are some; this
    run's go to ``serving-figures.json``. The verify plan's proof history names tonight's base by
    the judged label."""
    r = j.report
    try:
        from patchset.verify.pertest import run_verify  # noqa: F401  (``_verify`` runs it)
        from patchset.verify.selection import selected
    except ImportError:
        r.warnings.append("per-patch tests not run: the verify package is not installed")
        return
    tags, only = j.job.tag_list, j.job.only
    wanted = [] if "all" in tags else tags  # verify: no tags selects every test
    chosen = [
        p.id
        for p in refreshed.series(j.target.name)
        if (not only or p.id in only) and any(selected(spec, wanted) for spec in p.tests)
    ]
    if not chosen:
        which = f"of {', '.join(only)} " if only else ""
        r.warnings.append(f"no test {which}carries the tags {', '.join(tags)}: none ran")
        return
    if only:  # a matrix job: the scratch copy keeps only these patches' tests
        with ledger_mod.edit(work_ledger) as e:
            for table in e.patch_tables():
                if table.get("id") not in only and "tests" in table:
                    del table["tests"]
    with j.log.stage("tree"):
        tree = j.up.archive(j.sha, j.scratch / "pristine")
    with j.log.stage("tests"):
        vr = _verify(j, work_ledger, tree, wanted)
    artifacts_mod.write_json(j.logs / "verify.json", vr.to_json())
    r.plan = plan_summary(vr)
    _record(j, vr)


def _verify(j: Judging, work_ledger: Path, tree: Path, wanted: list[str]) -> Any:
    from patchset.verify.pertest import VerifyRun, run_verify  # loaded by ``run_tests`` already

    planning, logs = j.planning, j.logs
    return run_verify(
        VerifyRun(
            work_ledger,
            tree=tree,
            tags=wanted,
            target=j.target.name,
            junit=logs / "verify-junit.xml",
            progress=lambda what, done, total: j.log.note("tests", f"{done}/{total} {what}"),
            log_dir=logs / "engines",
            engine=j.job.engine,
            baseline=j.serving_baseline,
            save_baseline=logs / "serving-figures.json",
            ledger_dir=j.ledger.root.resolve(),
            history=planning.history if planning else None,
            all_=planning.all_ if planning else False,
            full_every=planning.full_every if planning else 7,
            base_label=short_label(j.label or j.sha),
            record_history=planning.record if planning else False,
            use_cache=planning.use_cache if planning else True,
        )
    )


def _record(j: Judging, vr: Any) -> None:
    """Each test's result into the report; a patch no test needs and a changed verdict as warnings."""
    r = j.report
    for po in vr.patches:
        for to in po.tests:
            w = to.with_run
            r.tests.append(
                {
                    "patch": to.patch_id,
                    "name": to.name,
                    "command": to.command,
                    "status": _OUTCOME.get(w.outcome, "error") if w else "error",
                    "seconds": round(w.seconds, 3) if w else 0.0,
                    "returncode": w.exit_code if w else None,
                    "class": to.klass,
                    "note": to.note,
                    "tail": (w.reason + "\n" + w.output).strip() if w else "",
                    "kind": to.kind,
                    "checks": list(to.checks),
                    "longctx": _longctx_runs(to) if to.kind in ("longctx", "serving") else None,
                    "engine": getattr(to, "engine", "") or None,
                    "serving": (getattr(w, "comparison", None) or None) if to.kind == "serving" else None,
                    "carried": to.carried or None,
                    "proof": po.proof or None,
                }
            )
        if po.klass == "not-needed":
            r.warnings.append(f"{po.patch_id}: {po.note or 'every test passes without the patch'}")
    for c in vr.changed:
        r.warnings.append(f"{c['patch']}: verdict changed: {c['was']} -> {c['now']} (last: {c['since']})")
    r.warnings += vr.notes


def check_proofs(path: Path) -> None:
    """Read the proof history once, so a foreign one ends the run before it judges (``ForeignState``)."""
    try:
        from patchset.verify.proofs import load_history
    except ImportError:  # no verify package: no per-patch tests, no proofs to trust
        return
    load_history(path)


def plan_summary(vr: Any) -> dict[str, Any]:
    """What the gate's report says of the verify plan: the plan, what was proven tonight and what
    carried (with the run each comes from), verdict changes, group tries, engine starts."""
    carried = [{"patch": p.patch_id, "from": p.carried_from, "proof": p.proof} for p in vr.patches if p.carried_from]
    proven = [{"patch": p.patch_id, "proof": p.proof} for p in vr.patches if p.proof and not p.carried_from]
    return {
        "plan": vr.plan.to_json() if vr.plan is not None else None,
        "engine_starts": vr.engine_starts,
        "proven_tonight": proven,
        "carried": carried,
        "changed": vr.changed,
        "group_tries": vr.group_tries,
    }


def _longctx_runs(to: Any) -> dict[str, Any]:
    """A long-context test's two runs for the report: outcome, per-check verdicts, engine times and log."""
    out: dict[str, Any] = {}
    for label, run in (("with", to.with_run), ("without", to.without_run)):
        if run is None:
            out[label] = None
            continue
        out[label] = {
            "outcome": run.outcome,
            "reason": run.reason,
            "engine_startup_seconds": getattr(run, "startup_seconds", None),
            "check_seconds": round(run.seconds, 3),
            "engine_log": run.log or None,
            "checks": list(getattr(run, "checks", []) or []),
        }
    return out
