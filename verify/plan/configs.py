"""Plan by configuration: the with-series run on a switched engine configuration starts only when
something its tests rest on moved, and switched configurations that do not interact share a start.

Why this module exists: the production ledger's tests use four engine configurations (the
engine's own defaults and three with a switch: an environment variable or an engine flag a patch
needs to act). The with-series run on the production configuration is the smoke test of the whole
series on new upstream, so it starts every night. A configuration with a switch only exercises the
patches that switch turns on: when none of them moved (their decision is *carry*: nothing they
watch, their body, their tests, their last class, rotation or ``--only``/``--all`` asks for them)
its with-series verdicts are carried too, from the run their proof comes from. When several switched
configurations of one engine must run tonight and the ledger declares every switch they set
``independent`` (``[patch.switches] independent = true``), their tests run in one start: the
production configuration plus all of those switches.

Which configuration is production: the defaults of the engine marked ``production = true``
(``[engines.NAME]``); with no engine marked, each test's default (no arguments, no environment).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from patchset.ledger.model import Patch
from patchset.verify.plan.decide import CARRY, ConfigGroup, EngineTree, VerifyPlan
from patchset.verify.proofs import TargetHistory

WITH_SERIES = "with the series"


@dataclass
class Config:
    """A test's engine configuration, as the plan sees it."""

    production: bool
    switches: list[str]  # the env variables and flags it sets ([] on the production configuration)
    independent: bool  # every switch it sets is declared independent


@dataclass
class SwitchIndex:
    """The ledger's switches: name (env variable or flag) -> declared independent."""

    names: dict[str, bool] = field(default_factory=dict)
    production_engine: str = ""  # the engine marked production ("" when none is)

    @classmethod
    def of(cls, patches: Iterable[Patch], engines: dict[str, Any]) -> SwitchIndex:
        out = cls()
        for p in patches:
            for name in [*p.switches.env, *p.switches.flags]:
                out.names[name] = out.names.get(name, True) and p.switches.independent
        out.production_engine = next((n for n, e in engines.items() if isinstance(e, dict) and e.get("production")), "")
        return out

    def config(self, engine_name: str, args: list[str], env: dict[str, str]) -> Config:
        """The configuration a test runs on: its engine's, plus its own arguments and environment."""
        switches = [a for a in args if a.startswith("--")] + sorted(env)
        own = not self.production_engine or engine_name == self.production_engine
        production = own and not args and not env
        independent = bool(switches) and own and all(self.names.get(s, False) for s in switches)
        return Config(production, switches, independent)


def gate_configs(plan: VerifyPlan, with_proofs: dict[str, set[str]]) -> None:
    """Mark each switched with-series tree carried, or say why it starts tonight.

    ``with_proofs``: per patch, the tests whose run with the series has a proof (from the history)."""
    for tree in plan.trees:
        if tree.label != WITH_SERIES or tree.production:
            continue
        why: list[str] = []
        froms: list[str] = []
        for shown in tree.tests:
            pid, name = shown.split("/", 1)
            d = plan.decision(pid)
            if d is None:
                why.append(f"{shown} is not planned")
            elif d.action != CARRY:
                why.append(f"{pid} is needed tonight")
            elif name not in with_proofs.get(pid, set()):
                why.append(f"{shown} has no earlier proof with the series on this configuration")
            else:
                froms.append(d.carried_from)
        if why:
            tree.why = list(dict.fromkeys(why))
        else:
            tree.carried = "carried from " + ", ".join(dict.fromkeys(froms)) + " (nothing its tests rest on moved)"


def group_configs(plan: VerifyPlan) -> None:
    """Merge the switched with-series trees that start tonight, per engine, into one start when
    every switch they set is independent and no two set the same switch differently."""
    by_engine: dict[str, list[EngineTree]] = {}
    for t in plan.trees:
        if (
            t.label == WITH_SERIES
            and not t.production
            and not t.carried
            and t.independent
            and not t.cached
            and not t.serving
        ):
            by_engine.setdefault(t.engine_name, []).append(t)
    for engine_name, trees in by_engine.items():
        merged: list[EngineTree] = []
        args: list[str] = []
        env: dict[str, str] = {}
        for t in trees:
            clash = any(k in env and env[k] != v for k, v in t.env.items()) or any(
                a.startswith("--") and a in args for a in t.args
            )
            if clash:
                continue
            merged.append(t)
            args += t.args
            env.update(t.env)
        if len(merged) < 2:
            continue
        label = f"{WITH_SERIES} + " + ", ".join(s for t in merged for s in t.switches)
        group = ConfigGroup(engine_name, [t.engine for t in merged], args, env, label)
        plan.config_groups.append(group)
        tree = EngineTree(label, "+".join(group.members), engine_name, [x for t in merged for x in t.tests])
        tree.production, tree.independent = False, True
        tree.config = " ".join(t.config for t in merged)
        tree.why = [w for t in merged for w in t.why]
        tree.args, tree.env = args, env
        at = plan.trees.index(merged[0])
        plan.trees = [t for t in plan.trees if t not in merged]
        plan.trees.insert(min(at, len(plan.trees)), tree)
        plan.notes.append(
            f"{len(merged)} switched configurations on {engine_name} share one start "
            f"(independent switches): {', '.join(t.config for t in merged)}"
        )


def set_config(tree: EngineTree, cfg: Config, args: list[str], env: dict[str, str]) -> EngineTree:
    """A tree of the plan with its configuration filled in (a new tree; the same again: unchanged)."""
    tree.production, tree.switches, tree.independent = cfg.production, list(cfg.switches), cfg.independent
    tree.args, tree.env = list(args), dict(env)
    return tree


def plan_by_config(plan: VerifyPlan, history: TargetHistory | None, *, group: bool = True) -> VerifyPlan:
    """``make_plan``'s plan, with switched configurations carried or grouped (see the module docstring;
    ``group=False``: never grouped, for measuring what grouping saves)."""
    with_proofs = {pid: set(p.with_tests) for pid, p in (history.proofs.items() if history else [])}
    if plan.history:
        gate_configs(plan, with_proofs)
    else:  # no history: nothing is carried
        for t in plan.trees:
            if t.label == WITH_SERIES and not t.production:
                t.why = ["no proof history is kept"]
    if group:
        group_configs(plan)
    plan.estimate(history)
    return plan
