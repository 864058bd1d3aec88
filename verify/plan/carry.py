"""Carried verdicts and the proofs a verify run leaves behind.

Why this module exists: the plan (``verify.plan``) decides which without-runs are not run tonight;
this module turns a recorded proof back into the without-run result a test is classed with (marked
carried, with the run it comes from), and after the run writes tonight's proofs into the history
(``verify.proofs``): a patch whose every planned without-run ran tonight (alone, or passing in a
group try) is proven anew; a carried one keeps its old proof (rotation counts from a real proof);
every planned patch's last class is kept (broken or in error last time: looked at again).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from patchset.verify.longctx.runs import LongctxSpec
from patchset.verify.outcomes import PatchOutcome, TestOutcome
from patchset.verify.plan.decide import PlanPatch
from patchset.verify.proofs import LastVerdict, PatchProof, TargetHistory, WithoutProof
from patchset.verify.testrun import FAIL, PASS, CommandResult, LongctxResult, Outcome

MAX_REASON = 500


def _short(data: object) -> str:
    return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()[:16]


def engine_digest(spec: LongctxSpec) -> str:
    """Tests with the same digest share a tree's engine (``LongctxSpec.engine_key``)."""
    return _short(list(spec.engine_key()))


def engine_config(spec: LongctxSpec) -> str:
    """The test's own engine arguments and environment, as the plan shows them ("" when none)."""
    return " ".join([*spec.engine_args, *(f"{k}={v}" for k, v in sorted(spec.env.items()))])


def spec_digest(spec: LongctxSpec) -> str:
    """What a test measures and where: a change re-proves the patch."""
    return _short({"test": spec.fingerprint(), "engine": list(spec.engine_key()), "timeout": spec.timeout})


def carried_result(proof: WithoutProof, run: str) -> LongctxResult:
    """The recorded without-run of a test, as the result it is classed with tonight."""
    checks = [dict(c) for c in proof.checks]
    return LongctxResult(Outcome(proof.outcome), None, 0.0, proof.reason, "", "", None, None, checks, carried=run)


def proof_of(result: CommandResult | None, spec: str) -> WithoutProof | None:
    """A without-run result worth recording as a proof (it passed or failed), else None."""
    if result is None or result.outcome not in (PASS, FAIL):
        return None
    if isinstance(result, LongctxResult) and result.carried:
        return None
    checks = [
        {
            "check": str(c.get("check", ""))[:200],
            "ok": bool(c.get("ok")),
            "failed_cases": [str(x)[:200] for x in (c.get("failed_cases") or [])[:64]],
        }
        for c in (getattr(result, "checks", None) or [])[:64]
        if isinstance(c, dict)
    ]
    return WithoutProof(spec, result.outcome, result.reason[:MAX_REASON], checks)


@dataclass
class Tonight:
    """Tonight's run as the history names it."""

    night: int
    at: str
    base: str


def record(
    history: TargetHistory,
    tonight: Tonight,
    planned: list[PlanPatch],
    outcomes: list[PatchOutcome],
) -> list[str]:
    """Write tonight's proofs and last classes into ``history``; returns the patches proven anew."""
    history.nights = max(history.nights, tonight.night)
    by_id = {po.patch_id: po for po in outcomes}
    proven: list[str] = []
    for p in planned:
        po = by_id.get(p.id)
        if po is None:
            continue
        history.last[p.id] = LastVerdict(po.klass, tonight.night, tonight.at, tonight.base)
        tests: dict[str, TestOutcome] = {t.name: t for t in po.tests}
        made: dict[str, WithoutProof] = {}
        with_made = _with_proofs(p, tests)
        for t in p.tests:
            if t.with_only:
                if t.name not in with_made:
                    break
                continue
            outcome = tests.get(t.name)
            tp = proof_of(outcome.without_run if outcome else None, t.spec)
            if tp is None:
                break
            made[t.name] = tp
        else:
            history.proofs[p.id] = PatchProof(
                tonight.night,
                tonight.at,
                tonight.base,
                po.klass,
                p.body,
                made,
                {path: list(d) for path, d in p.watch.digests.items()},
                dict(p.watch.why),
                with_made,
            )
            proven.append(p.id)
            continue
        old = history.proofs.get(p.id)
        if old is not None:  # not proven anew: its switched with-runs that ran tonight still count
            old.with_tests.update(with_made)
    return proven


def _with_proofs(p: PlanPatch, tests: dict[str, TestOutcome]) -> dict[str, WithoutProof]:
    """The runs with the series of a patch's tests on switched configurations that ran tonight."""
    out = {}
    for t in p.tests:
        outcome = tests.get(t.name)
        wp = proof_of(outcome.with_run, t.spec) if t.switched and outcome is not None else None
        if wp is not None:
            out[t.name] = wp
    return out
