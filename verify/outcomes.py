"""What ``patchset verify`` reports: each test's two runs and class, each patch's class, the run.

Why this module exists: the runner, the planner, the views (terminal, JUnit, the gate's report) and
the tests all speak in these records; keeping them apart from the runner lets each import them
without the machinery that starts engines. ``classify`` is the table of ``patchset.verify.pertest``:
a test's class from its runs with and without the patch, and a patch's class is its worst test's.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from patchset.text import json_fields
from patchset.verify import Word
from patchset.verify.testrun import ERROR, FAIL, PASS, CommandResult

if TYPE_CHECKING:
    from patchset.verify.plan.decide import VerifyPlan

PROVEN, NOT_NEEDED, BROKEN = "proven", "not-needed", "broken"
CLASSES = (PROVEN, NOT_NEEDED, BROKEN, ERROR)
_RANK = {BROKEN: 3, ERROR: 2, PROVEN: 1, NOT_NEEDED: 0}


class Variant(Word):
    """Which tree a run is on."""

    WITH = "with"  # the whole series
    WITHOUT = "without"  # the series minus the patch (or a group of patches)


WITH, WITHOUT = Variant.WITH, Variant.WITHOUT


@dataclass
class EngineRun:
    """One engine verify started: which tree, how long start-up and checks took, where its log is."""

    label: str  # "with the series" | "without <patch>"
    variant: Variant
    patch: str  # the patch left out ("" for the whole series)
    model: str
    engine_args: list[str]
    tests: list[str] = field(default_factory=list)  # "<patch>/<test>" served by this engine
    startup_seconds: float | None = None
    check_seconds: float = 0.0
    log: str = ""
    vllm_origin: str = ""
    error: str = ""
    engine: str = ""  # the ledger's engine name
    started: bool = False  # False: every result came from the cache, no engine was started
    reused: list[str] = field(default_factory=list)  # "<patch>/<test>" whose result came from the cache
    tree_hash: str = ""

    def to_json(self) -> dict:
        return {
            **json_fields(self, "label variant"),
            "patch": self.patch or None,
            "engine": self.engine or None,
            "started": self.started,
            "tree_hash": self.tree_hash or None,
            **json_fields(self, "model engine_args tests reused"),
            "startup_seconds": None if self.startup_seconds is None else round(self.startup_seconds, 3),
            "check_seconds": round(self.check_seconds, 3),
            "log": self.log,
            "vllm_origin": self.vllm_origin or None,
            "error": self.error or None,
        }


@dataclass
class TestOutcome:
    """One declared test of one patch, run with and without the patch, and its class."""

    patch_id: str
    name: str
    command: str
    cwd: str
    tags: list[str]
    timeout: int
    with_run: CommandResult | None = None
    without_run: CommandResult | None = None
    klass: str = ERROR
    note: str = ""
    kind: str = "command"
    checks: list[str] = field(default_factory=list)
    engine: str = ""  # the engine a long-context or serving test ran on
    carried: str = ""  # the without-run was not run tonight: "carried from run N (...): why"
    without_also: list[str] = field(default_factory=list)  # a group try: the other patches its tree lacked

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in (self.with_run, self.without_run) if r is not None)

    def to_json(self) -> dict:
        return {
            "patch": self.patch_id,
            "test": self.name,
            **json_fields(self, "kind checks"),
            "engine": self.engine or None,
            **json_fields(self, "command cwd tags timeout"),
            "class": self.klass,
            "note": self.note,
            "seconds": round(self.seconds, 3),
            "with": self.with_run.to_json() if self.with_run else None,
            "without": self.without_run.to_json() if self.without_run else None,
            "carried": self.carried or None,
            "without_also": self.without_also,
        }


@dataclass
class PatchOutcome:
    """A patch and the class its tests give it."""

    patch_id: str
    title: str
    tests: list[TestOutcome]
    klass: str = ERROR
    note: str = ""
    proof: str = ""  # its long-context verdict: "proven tonight: why" | "carried from run N (...)"
    carried_from: str = ""  # the run its carried verdict comes from ("" when proven tonight)

    def to_json(self) -> dict:
        return {
            "patch": self.patch_id,
            "title": self.title,
            "class": self.klass,
            "note": self.note,
            "proof": self.proof or None,
            "carried_from": self.carried_from or None,
            "tests": [t.to_json() for t in self.tests],
        }


@dataclass
class VerifyReport:
    """What ``patchset verify`` found: a class for every tested patch, and what was not tested."""

    ledger: str
    target: str
    base: str
    tags: list[str]
    jobs: int
    patches: list[PatchOutcome] = field(default_factory=list)
    untested: list[str] = field(default_factory=list)  # active patches with no selected test
    notes: list[str] = field(default_factory=list)
    wall_seconds: float = 0.0
    work_dir: str = ""  # kept trees and logs (only when asked to keep them)
    engines: list[EngineRun] = field(default_factory=list)  # engines of long-context and serving tests
    reused: list[str] = field(default_factory=list)  # "<patch>/<test> (with|without)" results from the cache
    cache_ignored: list[str] = field(default_factory=list)  # cache entries not sealed here: re-measured
    engine_starts: int = 0
    baseline: str = ""  # the stored serving baseline compared with (--baseline)
    plan: VerifyPlan | None = None  # what was run tonight and what was carried (``verify.plan``)
    history: str = ""  # where the proofs are kept ("" when none are)
    proven_tonight: list[str] = field(default_factory=list)  # patches whose without-runs ran tonight
    changed: list[dict[str, str]] = field(default_factory=list)  # verdicts unlike the last proof's
    group_tries: list[dict[str, Any]] = field(default_factory=list)  # patches tried together, starts saved
    planned_only: bool = False  # --plan: nothing ran

    @property
    def carried(self) -> list[str]:
        return [p.patch_id for p in self.patches if p.carried_from]

    def counts(self) -> dict[str, int]:
        return {k: sum(1 for p in self.patches if p.klass == k) for k in CLASSES}

    @property
    def tests(self) -> list[TestOutcome]:
        return [t for p in self.patches for t in p.tests]

    @property
    def ok(self) -> bool:
        """Every tested patch is proven."""
        return bool(self.patches) and all(p.klass == PROVEN for p in self.patches)

    @property
    def exit_code(self) -> int:
        """0 all proven (or only planned: nothing ran); 2 a test could not run (error); else 1 (a
        patch broken or not needed)."""
        if self.ok or self.planned_only:
            return 0
        return 2 if any(p.klass == ERROR for p in self.patches) else 1

    def to_json(self) -> dict:
        return {
            **json_fields(self, "ok exit_code ledger target base tags jobs"),
            "wall_seconds": round(self.wall_seconds, 3),
            "counts": self.counts(),
            **json_fields(self, "patches untested notes"),
            "work_dir": self.work_dir or None,
            **json_fields(self, "engines engine_starts reused cache_ignored"),
            "baseline": self.baseline or None,
            "plan": self.plan.to_json() if self.plan is not None else None,
            "history": self.history or None,
            **json_fields(self, "proven_tonight carried changed group_tries planned_only"),
        }


def classify(with_run: CommandResult | None, without_run: CommandResult | None) -> tuple[str, str]:
    """The class of one test from its two runs, and a one-line note saying why."""
    if with_run is None or with_run.outcome == ERROR:
        return ERROR, f"with the patch: {with_run.reason if with_run else 'not run'}"
    if with_run.outcome == FAIL:
        note = f"fails with the patch ({with_run.reason})"
        if without_run is not None and without_run.outcome == FAIL:
            note += "; it fails without the patch too: the failure predates this patch"
        elif without_run is not None and without_run.outcome == PASS:
            note += "; passes without it: this patch breaks the test"
        return BROKEN, note
    if without_run is None or without_run.outcome == ERROR:
        return ERROR, f"without the patch: {without_run.reason if without_run else 'not run'}"
    if without_run.outcome == FAIL:
        return PROVEN, "fails without the patch, passes with it"
    return NOT_NEEDED, "passes without the patch too: propose dropping it (upstream already, or dead code?)"


def patch_class(tests: list[TestOutcome]) -> str:
    return max((t.klass for t in tests), key=lambda k: _RANK[k])
