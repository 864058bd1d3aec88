"""One target's apply, whatever the tree: its series as the engine takes it, and its report.

``series_items`` refuses a series whose bodies are missing or changed since they were locked
(before any tree is read); ``path_mapper`` maps the patches' source layout onto an installed one;
``TargetReport`` is what every kind of apply (``apply_tree``, ``apply_repo``, an index) returns.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

from patchset.commands.inspection import BODY_MISMATCH, BODY_MISSING, body_state
from patchset.engine.detect import SeriesState
from patchset.engine.results import SeriesItem, SeriesResult
from patchset.errors import InputError
from patchset.ledger.model import Ledger, Target


@dataclass
class TargetReport:
    """One target's apply: the tree, the outcome and the engine's result."""

    target: str
    tree: str
    kind: str
    layout: str
    outcome: str  # applied | already | partial | failed | mismatch | dry-run
    message: str
    result: SeriesResult | None = None
    state: SeriesState | None = None
    mismatched: list[str] = field(default_factory=list)
    hashes: dict[str, dict[str, str | None]] = field(default_factory=dict)  # mismatched path -> expected, actual
    unlocked: bool = False
    commits: list[str] = field(default_factory=list)
    fuzz: int = 0
    warnings: list[str] = field(default_factory=list)  # e.g. the tree is built from another commit than the base

    @property
    def ok(self) -> bool:
        return self.outcome in ("applied", "already", "dry-run")

    def to_json(self) -> dict:
        return {
            "target": self.target,
            "tree": self.tree,
            "kind": self.kind,
            "layout": self.layout,
            "outcome": self.outcome,
            "ok": self.ok,
            "message": self.message,
            "fuzz": self.fuzz,
            "mismatched": self.mismatched,
            "hashes": self.hashes,
            "lock_missing": self.unlocked,
            "commits": self.commits,
            "warnings": self.warnings,
            "result": self.result.to_json() if self.result else None,
            "state": self.state.to_json() if self.state else None,
        }


def series_items(ledger: Ledger, target: Target) -> list[SeriesItem]:
    """The active series of a target as engine items; refuses missing or altered bodies."""
    items: list[SeriesItem] = []
    missing: list[str] = []
    changed: list[str] = []
    for p in ledger.series(target.name):
        state, body = body_state(ledger, p)
        if state == BODY_MISSING:
            missing.append(p.id)
            continue
        if state == BODY_MISMATCH:
            changed.append(p.id)
            continue
        assert body is not None
        items.append(SeriesItem(p.id, body, p.source.strip if p.source.strip is not None else target.strip))
    if missing:
        raise InputError(
            f"target {target.name}: body not imported for {len(missing)} patch(es): " + ", ".join(missing),
            hint="bring the bodies in with `patchset fetch` or `patchset import`",
        )
    if changed:
        raise InputError(
            f"target {target.name}: body changed since it was locked: {', '.join(changed)}",
            hint="re-import the body (`patchset import`) so the lock records its new hash",
        )
    if not items:
        raise InputError(f"target {target.name} has no active patches")
    return items


def path_mapper(target: Target, layout: str) -> Callable[[str], str] | None:
    return target.path_map.to_installed if layout == "installed" and target.path_map.prefixes else None
