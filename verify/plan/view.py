"""The terminal view of a verify plan: each patch's decision, the trees, the engine starts.

Kept apart from ``patchset.verify.plan`` (pure decisions) so the planner has no terminal dependency;
``verify --plan`` and ``gate --plan`` print it, and a verify report prints its summary. Lines, not a
table: reasons and run names are sentences, and ids and paths must never be cut.
"""

from __future__ import annotations

from typing import Any

from patchset.commands.table import Styled, Term
from patchset.verify.plan.decide import AFTER_WITH, CARRY, RUN, TONIGHT, VerifyPlan

STYLE = {RUN: "yellow", AFTER_WITH: "cyan", CARRY: "green"}
WORD = {RUN: "needed", AFTER_WITH: "after the series", CARRY: "carried"}


def cost_text(cost: dict[str, Any]) -> str:
    """``about 1.7 h of cluster time (spark: 52 min a start, as recorded)``, or why it is unknown."""
    each = cost.get("seconds_per_start") or {}
    if not each:
        return ""
    unknown = [e for e, s in each.items() if s is None]
    if unknown:
        return f"cluster time unknown (no recorded start of {', '.join(unknown)})"
    per = ", ".join(f"{e}: {s / 60:.0f} min a start" for e, s in each.items())
    return f"about {cost.get('estimated_seconds', 0) / 3600:.1f} h of cluster time ({per}, as recorded)"


def starts_line(plan: VerifyPlan) -> str:
    """``2 engine start(s) tonight (at most 3 if ...); a full run: 4; about 1.7 h ...``."""
    text = f"{plan.starts} engine start(s) tonight"
    if plan.starts_at_most > plan.starts:
        text += f" (at most {plan.starts_at_most} if the conditions below come true)"
    cost = cost_text(plan.cost)
    return text + f"; a full run: {plan.full_starts}" + (f"; {cost}" if cost else "")


def render_plan(term: Term, plan: VerifyPlan, *, trees: bool = True) -> None:
    where = plan.history or "none kept: every patch is needed"
    term.line(Styled(f"verify plan: {plan.target} on {plan.base} (run {plan.night}; proofs: {where})", "bold"))
    for d in plan.decisions:
        term.line(Styled(WORD[d.action], STYLE[d.action]), f" {d.patch}: {d.detail()}", indent="  ")
    for pid, why in plan.blockers.items():
        term.line(Styled("blocked", "red"), f" {pid}: {why}", indent="  ")
    for g in plan.groups:
        term.line(
            f"tried together on {g.engine_name}: {', '.join(g.patches)} (expected not needed; "
            "a patch whose test fails there is tried alone)",
            indent="  ",
        )
    term.line(starts_line(plan), indent="  ")
    if trees:
        for t in plan.trees:
            state = "cached, no start" if t.cached else ("" if t.when == TONIGHT else t.when)
            if t.carried:
                state = f"no start, {t.carried}"
            elif t.why:
                state = "a switched configuration, starts: " + "; ".join(t.why)
            config = f" [{t.config}]" if t.config else ""
            term.line(f"{t.label} on {t.engine_name}{config}" + (f": {state}" if state else ""), indent="    ")
    for n in plan.notes:
        term.line(f"note: {n}", indent="  ")
