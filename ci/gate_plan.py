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
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from patchset.ci.report import ERROR, PLANNED, GateReport
from patchset.ci.state import default_state_path, load_state
from patchset.errors import PatchsetError
from patchset.ledger import store as ledger_mod
from patchset.ledger.model import Ledger, Target
from patchset.progress import Progress
from patchset.text import split_list

if TYPE_CHECKING:  # verify is loaded only by a run that plans
    from patchset.verify.plan.decide import PlanOptions, VerifyPlan
    from patchset.verify.proofs import TargetHistory


def plan_gate(
    ledger_path: Path,
    *,
    onto: str | None,
    latest: bool,
    tags: Sequence[str],
    state_file: Path | None,
    target: str | None,
    upstream: str | None,
    patches: Sequence[str] | None,
    engine: str | None,
    all_: bool,
    full_every: int,
    progress: Progress | None = None,
) -> GateReport:
    """The plan (``report.plan``); the report's status is ``planned`` (exit 0), or ``error`` (exit 2)
    with the reason when it cannot be made (bad input, a foreign state or history, the network)."""
    from patchset.ci.gate import proofs_path, serving_figures_path
    from patchset.verify.plan.decide import PlanOptions, VerifyPlan
    from patchset.verify.proofs import load_history

    tag_list = split_list(tags)
    only = list(patches or [])
    report = GateReport(status=PLANNED, asked=onto or ("--latest" if latest else ""), tags=tag_list)
    scratch = Path(tempfile.mkdtemp(prefix="patchset-gate-plan-"))
    try:
        ledger = ledger_mod.load_ledger(Path(ledger_path))
        from patchset.rebase.session import pick_target

        t = pick_target(ledger, target, onto or "")
        report.target, report.base = t.name, t.base
        state_path = Path(state_file) if state_file is not None else default_state_path(ledger)
        load_state(state_path)  # a foreign state is refused here, as a judging run refuses it
        proofs = proofs_path(state_path)
        past = load_history(proofs).get(t.name)
        if not tag_list:
            report.warnings.append("no --tags: the gate runs no per-patch test, so nothing starts")
            report.plan = {"plan": VerifyPlan(t.name, t.base, 0, str(proofs)).to_json(), "engine_starts": 0}
            return report
        wanted = [] if "all" in tag_list else tag_list
        figures = serving_figures_path(state_path, t.name)
        opts = PlanOptions(all_, only, full_every, str(proofs))
        proven = past is not None and any(pid in past.proofs for pid in (only or list(past.proofs)))
        if not proven or not (onto or latest):
            plan = _ledger_plan(ledger, t.name, wanted, only, past, opts, onto or "", engine, figures)
            report.plan = {"plan": plan.to_json(), "engine_starts": plan.starts}
            return report
        _tonight(report, ledger, t, onto, latest, upstream, wanted, only, engine, figures, proofs, opts, scratch)
        if report.plan.get("plan") is None and not report.errors:
            report.plan = {"plan": None, "engine_starts": 0}
    except PatchsetError as exc:
        report.status = ERROR
        report.errors.append(exc.render())
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return report


def _ledger_plan(
    ledger: Ledger,
    target: str,
    wanted: list[str],
    only: list[str],
    past: TargetHistory | None,
    opts: PlanOptions,
    base: str,
    engine: str | None,
    figures: Path,
) -> VerifyPlan:
    """The plan from the ledger alone: tonight's upstream unknown, or no proof to compare with."""
    from patchset.verify.plan.ledger import plan_ledger
    from patchset.verify.run import VerifyRun
    from patchset.verify.serving import load_serving_baseline

    if past is not None and past.proofs:
        opts.unknown = "tonight's upstream is not named (--onto REF or --latest): what moved cannot be told"
    stored = set(load_serving_baseline(figures)) if figures.is_file() else set()
    run = VerifyRun(ledger.path, tags=wanted, target=target, engine=engine, base_label=base or "(upstream not named)")
    return plan_ledger(run, past, opts, stored)


def _tonight(
    report: GateReport,
    ledger: Ledger,
    t: Target,
    onto: str | None,
    latest: bool,
    upstream: str | None,
    wanted: list[str],
    only: list[str],
    engine: str | None,
    figures: Path,
    proofs: Path,
    opts: PlanOptions,
    scratch: Path,
) -> None:
    """The plan on tonight's upstream: replay, a pristine tree, the planner (no engine)."""
    from patchset.ci.gate import short_label
    from patchset.ci.refresh import make_workspace
    from patchset.ci.upstream import open_upstream
    from patchset.rebase.session import rebase
    from patchset.verify.pertest import VerifyRun, run_verify

    up = open_upstream(ledger.root, t, upstream)
    try:
        report.upstream = {"kind": up.kind, "location": up.location}
        sha, label = up.latest() if latest else up.resolve(onto or "")
        report.commit, report.onto = sha, label
        ws = make_workspace(ledger, scratch / "series")
        rr = rebase(ws.work_ledger, label, target=t.name, repo=up.git_dir)
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
        if only:
            with ledger_mod.edit(ws.work_ledger) as e:
                for table in e.patch_tables():
                    if table.get("id") not in only and "tests" in table:
                        del table["tests"]
        tree = up.archive(sha, scratch / "pristine")
        vr = run_verify(
            VerifyRun(
                ws.work_ledger,
                tree=tree,
                tags=wanted,
                target=t.name,
                engine=engine,
                baseline=figures if figures.is_file() else None,
                ledger_dir=ledger.root.resolve(),
                history=proofs,
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
