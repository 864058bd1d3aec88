"""``patchset gate --plan``: the verify plan of tonight's gate run, made and printed without starting anything.

Why this module exists: before a night on the cluster, the maintainer wants to know what it will
cost: which patches' without-runs run and why, which verdicts are carried and from which run, how
many engine starts. With proofs in the gate's history (``gate-proofs.json`` beside its state) and
tonight's upstream named (``--onto REF`` or ``--latest``), the plan is the one the gate would follow:
the series replayed onto that commit in a scratch copy (the real rebaser, in memory), a pristine
tree of the commit, and ``verify``'s planner on it (``run_verify(plan_only=True)``: dry runs and
digests, no engine). Without proofs (a fresh clone, bodies not imported yet) or without a named
upstream, the plan comes from the ledger alone (``verify.plan.ledger``) and says why each patch is
needed. Nothing is written: no state, no proofs, no artifacts.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from patchset.ci.gate.run import GateRun, proofs_path, serving_figures_path, short_label
from patchset.ci.refresh import make_workspace
from patchset.ci.report import ERROR, PLANNED, GateReport
from patchset.ci.state import load_state
from patchset.ci.upstream import open_upstream
from patchset.errors import PatchsetError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Target
from patchset.rebase.session import RebaseRun, pick_target, rebase

if TYPE_CHECKING:  # verify is loaded only by a run that plans
    from patchset.verify.plan.decide import PlanOptions, VerifyPlan
    from patchset.verify.proofs import TargetHistory


def plan_gate(job: GateRun) -> GateReport:
    """The plan (``report.plan``); the report's status is ``planned`` (exit 0), or ``error`` (exit 2)
    with the reason when it cannot be made (bad input, a foreign state or history, the network)."""
    from patchset.verify.plan.decide import PlanOptions, VerifyPlan
    from patchset.verify.proofs import load_history

    tag_list, only = job.tag_list, job.only
    report = GateReport(status=PLANNED, asked=job.asked, tags=tag_list)
    scratch = Path(tempfile.mkdtemp(prefix="patchset-gate-plan-"))
    try:
        ledger = ledger_mod.load_ledger(Path(job.ledger_path))
        t = pick_target(ledger, job.target, job.onto or "")
        report.target, report.base = t.name, t.base
        state_path = job.state_path(ledger)
        load_state(state_path)  # a foreign state is refused here, as a judging run refuses it
        proofs = proofs_path(state_path)
        past = load_history(proofs).get(t.name)
        if not tag_list:
            report.warnings.append("no --tags: the gate runs no per-patch test, so nothing starts")
            report.plan = {"plan": VerifyPlan(t.name, t.base, 0, str(proofs)).to_json(), "engine_starts": 0}
            return report
        wanted = [] if "all" in tag_list else tag_list
        figures = serving_figures_path(state_path, t.name)
        opts = PlanOptions(job.all_, only, job.full_every, str(proofs))
        proven = past is not None and any(pid in past.proofs for pid in (only or list(past.proofs)))
        if not proven or not (job.onto or job.latest):
            plan = _ledger_plan(job, ledger, t, wanted, past, opts, figures)
            report.plan = {"plan": plan.to_json(), "engine_starts": plan.starts}
            return report
        _tonight(job, report, ledger, t, wanted, opts, scratch)
        if report.plan.get("plan") is None and not report.errors:
            report.plan = {"plan": None, "engine_starts": 0}
    except PatchsetError as exc:
        report.status = ERROR
        report.errors.append(exc.render())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report


def _ledger_plan(
    job: GateRun,
    ledger: Ledger,
    t: Target,
    wanted: list[str],
    past: TargetHistory | None,
    opts: PlanOptions,
    figures: Path,
) -> VerifyPlan:
    """The plan from the ledger alone: tonight's upstream unknown, or no proof to compare with."""
    from patchset.verify.plan.ledger import plan_ledger
    from patchset.verify.run import VerifyRun
    from patchset.verify.serving import load_serving_baseline

    if past is not None and past.proofs:
        opts.unknown = "tonight's upstream is not named (--onto REF or --latest): what moved cannot be told"
    stored = set(load_serving_baseline(figures)) if figures.is_file() else set()
    run = VerifyRun(
        ledger.path, tags=wanted, target=t.name, engine=job.engine, base_label=job.onto or "(upstream not named)"
    )
    return plan_ledger(run, past, opts, stored)


def _tonight(
    job: GateRun, report: GateReport, ledger: Ledger, t: Target, wanted: list[str], opts: PlanOptions, scratch: Path
) -> None:
    """The plan on tonight's upstream: replay, a pristine tree, the planner (no engine)."""
    from patchset.verify.pertest import VerifyRun, run_verify

    up = open_upstream(ledger.root, t, job.upstream)
    try:
        report.upstream = {"kind": up.kind, "location": up.location}
        sha, label = up.latest() if job.latest else up.resolve(job.onto or "")
        report.commit, report.onto = sha, label
        ws = make_workspace(ledger, scratch / "series")
        rr = rebase(RebaseRun(ws.work_ledger, label, target=t.name, repo=up.git_dir))
        report.rebase = rr.to_json()
        if report.conflicts:
            report.warnings.append(
                f"the series conflicts with {label} ({', '.join(report.conflicts)}): the gate would run no test"
            )
            return
        refreshed = ledger_mod.load_ledger(ws.work_ledger)
        if not refreshed.series(t.name):
            report.warnings.append("no active patch is left: every patch is upstream now")
            return
        if job.only:
            with ledger_mod.edit(ws.work_ledger) as e:
                for table in e.patch_tables():
                    if table.get("id") not in job.only and "tests" in table:
                        del table["tests"]
        tree = up.archive(sha, scratch / "pristine")
        state_path = job.state_path(ledger)
        figures = serving_figures_path(state_path, t.name)
        vr = run_verify(
            VerifyRun(
                ws.work_ledger,
                tree=tree,
                tags=wanted,
                target=t.name,
                engine=job.engine,
                baseline=figures if figures.is_file() else None,
                ledger_dir=ledger.root.resolve(),
                history=proofs_path(state_path),
                plan_only=True,
                all_=opts.all_,
                full_every=opts.full_every,
                base_label=short_label(label),
                record_history=False,
            )
        )
        assert vr.plan is not None
        report.plan = {"plan": vr.plan.to_json(), "engine_starts": vr.plan.starts}
        report.warnings += vr.notes
    finally:
        up.close()
