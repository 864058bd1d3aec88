"""The runs of one ``patchset verify``: each test on its tree, command tests in their own overlay,
engine tests grouped one engine per tree and configuration (``verify.engines.scheduler``), results from the
cache where the tree did not change.

Why this module exists: ``verify.pertest`` decides which runs there are; this module runs them and
puts each result on its run. It can be called again with more runs (a later round of the same verify
run: runs that waited for the tree with the series, split groups), keeping its engines and counters.
"""

from __future__ import annotations

import os
import re
import string
import sys
import threading
from dataclasses import dataclass, field, replace
from pathlib import Path

from patchset.engine.results import SeriesItem, SeriesResult
from patchset.engine.tree import apply_series
from patchset.errors import EnvironmentFailure
from patchset.ledger.consent import without_credentials
from patchset.ledger.model import Ledger, Patch, Target, TestSpec
from patchset.upstream import cache
from patchset.verify.engines.process import ledger_engine
from patchset.verify.engines.scheduler import Context, EngineBatch, Pair, QuietLock, Scheduler
from patchset.verify.longctx.runs import LongctxSpec
from patchset.verify.outcomes import WITH, WITHOUT, EngineRun, TestOutcome, Variant
from patchset.verify.overlay import Snapshot, drop_stale_bytecode, make_overlay, remove_tree
from patchset.verify.results_cache import ResultCache
from patchset.verify.run import VerifyRun
from patchset.verify.serving import ServingSamples
from patchset.verify.serving_judge import judge_serving
from patchset.verify.testrun import ERROR, FAIL, PASS, CommandResult, LongctxResult, ServingResult, run_command

PATCHSET_HOME = Path(__file__).resolve().parent.parent


@dataclass
class Run:
    """One test run of one patch, with or without the patch."""

    test: TestOutcome
    spec: TestSpec
    patch: Patch
    variant: Variant
    items: list[SeriesItem]
    result: CommandResult | None = None
    longctx: LongctxSpec | None = None
    tree_hash: str = ""
    cache_key: str = ""
    samples: ServingSamples | None = None  # a serving run's measurement
    reused: str = ""  # the result or the samples came from the cache (when measured)
    left_out: list[str] = field(default_factory=list)  # without-runs: the patches the tree lacks (default: its own)
    engine_index: int | None = None
    startup: float | None = None
    log: str = ""


def describe_failure(result: SeriesResult) -> str:
    bad = next((p for p in result.patches if p.status in ("failed", "already_applied")), None)
    if bad is None:
        return "the series does not apply"
    files = [f"{f.path} ({f.message or f.status})" for f in bad.files if f.status != "applied"]
    return f"patch {bad.patch_id} does not apply" + (f": {'; '.join(files)}" if files else "")


@dataclass
class Workspace:
    """Where one verify runs: the ledger and its target, the pristine base, the work directory."""

    ledger: Ledger
    target: Target
    base: Path
    work: Path
    home: Path  # where the ledger's relative paths live


class Verifier:
    """Runs the runs of one verify, round after round, keeping its engines and counters."""

    def __init__(self, place: Workspace, run: VerifyRun, log_dir: Path | None = None):
        self.ledger, self.target, self.base, self.work = place.ledger, place.target, place.base, place.work
        self.jobs, self.timeout, self.progress, self.keep = run.jobs, run.timeout, run.progress, run.keep_trees
        self.mapper = self.target.mapper(self.target.layout)
        self.snapshot = Snapshot.take(self.base)
        self.lock = threading.Lock()
        self.done = 0
        self.total = 0
        self.counter = 0
        self.damaged: list[str] = []
        self.engine_factory = run.engine_factory or ledger_engine
        self.log_dir = log_dir or self.work / "logs"
        self.engines: list[EngineRun] = []
        self.reused: list[str] = []
        self.home = place.home

    def _env(self, run: Run, tree: Path) -> dict[str, str]:
        """verify's variables over the environment less the user's credentials (a test command is
        a command from the ledger); a test's ``env`` may name one (``HF_TOKEN = "$HF_TOKEN"``)."""
        env = {
            **without_credentials(os.environ),
            "PATCHSET_TREE": str(tree),
            "PATCHSET_VARIANT": run.variant,
            "PATCHSET_PATCH": run.patch.id,
            "PATCHSET_LEDGER_DIR": str(self.home),
            "PATCHSET_PYTHON": sys.executable,
            "PATCHSET_HOME": str(PATCHSET_HOME),
            "PATCHSET_CACHE": str(cache.cache_dir()),
        }
        if "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in run.spec.env:
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.jobs))
        outer = {**os.environ, **env}
        for key, value in run.spec.env.items():
            env[key] = string.Template(value).safe_substitute(outer)
        return env

    def _execute(self, run: Run) -> None:
        slot, safe = self._slot(f"{run.patch.id}-{run.test.name}")
        tree = self.work / "trees" / f"{slot:03d}-{safe}-{run.variant}"
        log = self.work / "logs" / f"{slot:03d}-{safe}-{run.variant}.log"
        timeout = self.timeout or run.spec.timeout
        try:
            make_overlay(self.base, tree)
            if run.items:
                res = apply_series(tree, run.items, path_for=self.mapper)
                if not res.ok:  # checked in a dry run before; the base changed under us
                    run.result = CommandResult(ERROR, None, 0.0, describe_failure(res))
                    return
                drop_stale_bytecode(tree, res.files)
            cwd = tree.joinpath(*[p for p in run.spec.cwd.split("/") if p not in ("", ".")])
            run.result = run_command(run.spec.command, cwd, self._env(run, tree), timeout, log)
            changed = self._changed()
            if changed:
                run.result = replace(
                    run.result,
                    outcome=ERROR,
                    reason=f"the test rewrote {len(changed)} file(s) of the build tree in place "
                    f"(e.g. {changed[0]}), files shared with the pristine base by hard "
                    "links; replace files by writing a new file and renaming it",
                )
        except EnvironmentFailure as exc:
            run.result = CommandResult(ERROR, None, 0.0, exc.message)
        finally:
            if not self.keep:
                remove_tree(tree)
            self._done(run)

    def _slot(self, label: str) -> tuple[int, str]:
        with self.lock:
            self.counter += 1
            slot = self.counter
        return slot, re.sub(r"[^A-Za-z0-9._-]+", "_", label)[:80]

    def _done(self, run: Run) -> None:
        with self.lock:
            self.done += 1
            if self.progress:
                r = run.result
                what = r.outcome if r else ("measured" if run.samples is not None else "?")
                self.progress(f"{run.patch.id} {run.test.name} ({run.variant}): {what}", self.done, self.total)

    def _changed(self) -> list[str]:
        changed = self.snapshot.changed()
        if changed:
            with self.lock:
                self.damaged.extend(c for c in changed if c not in self.damaged)
        return changed

    def _group_key(self, r: Run) -> tuple:
        assert r.longctx is not None
        return (tuple(it.patch_id for it in r.items), r.longctx.engine_key())

    def run(self, runs: list[Run], *, cache: ResultCache, stored: dict[str, ServingSamples] | None = None) -> None:
        """Run every test: command runs on their own trees, engine runs grouped one engine per tree and
        configuration (``verify.engines.scheduler``), results from the cache where the tree did not change."""
        self.total, self.done = len(runs), 0
        quiet = QuietLock()
        ctx = Context(
            base=self.base,
            mapper=self.mapper,
            work=self.work,
            log_dir=self.log_dir,
            ledger_dir=self.home,
            installed_root=self.target.installed_root,
            factory=self.engine_factory,
            keep=self.keep,
            jobs=self.jobs,
            slot=self._slot,
            done=self._done,
            describe_failure=describe_failure,
            damaged=self._changed,
        )
        sched = Scheduler(ctx, quiet)
        groups: dict[tuple, EngineBatch] = {}
        by_test: dict[tuple[str, str], dict[str, Run]] = {}
        commands = [r for r in runs if r.longctx is None]
        for r in runs:
            if r.longctx is not None:
                self._to_group(r, groups, sched, cache)
                by_test.setdefault((r.patch.id, r.test.name), {})[r.variant] = r
        self._serving_sides(by_test, groups, sched)
        for g in sched.groups:
            g.refs += 1 if g.has_work() else 0
        if self.progress:
            n_eng = sum(1 for g in sched.groups if g.has_work() or g.refs)
            self.progress(
                f"{self.total} runs on {self.jobs} job(s)" + (f", {n_eng} engine(s)" if n_eng else ""), 0, self.total
            )
        for r in runs:  # cached runs count as done
            if r.result is not None or r.samples is not None:
                self._done(r)
        units: list = [g for g in sched.groups if g.has_work()] + commands

        def other(u: Run) -> None:
            with quiet.read():
                self._execute(u)

        sched.run(units, other)
        judge_serving(by_test, stored)
        self._store(runs, cache)

    def _to_group(self, r: Run, groups: dict[tuple, EngineBatch], sched: Scheduler, cache: ResultCache) -> None:
        """An engine run into the group of its tree and engine configuration (a new group: a new
        engine record), or its result back from the cache."""
        assert r.longctx is not None
        key = self._group_key(r)
        if key not in groups:
            missing = r.left_out or [r.patch.id]
            left_out = "" if r.variant == WITH else ", ".join(missing)
            label = "with the series" if r.variant == WITH else f"without {left_out}"
            if r.variant != WITH and len(missing) > 1:
                label += " (tried together)"
            spec = r.longctx
            er = EngineRun(label, Variant(r.variant), left_out, str(spec.model), list(spec.engine_args))
            er.engine = spec.engine.name if spec.engine else ""
            er.tree_hash = r.tree_hash[:16]
            groups[key] = EngineBatch(key, r.items, spec, er)
            sched.groups.append(groups[key])
            self.engines.append(er)
        g = groups[key]
        g.record.tests.append(f"{r.patch.id}/{r.test.name}")
        cached = cache.get(r.cache_key) if r.cache_key else None
        if cached is not None and self._restore(r, cached):
            g.record.reused.append(f"{r.patch.id}/{r.test.name}")
            self.reused.append(f"{r.patch.id}/{r.test.name} ({r.variant})")
            return
        if r.longctx.kind == "longctx":
            g.runs.append(r)

    def _serving_sides(
        self, by_test: dict[tuple[str, str], dict[str, Run]], groups: dict[tuple, EngineBatch], sched: Scheduler
    ) -> None:
        """Serving runs: paired when both sides need measuring and the engine allows two at once,
        else each measured on its engine alone."""
        for sides in by_test.values():
            w, o = sides.get(WITH), sides.get(WITHOUT)
            if w is None or w.longctx is None or w.longctx.kind != "serving":
                continue
            need_w = w.samples is None and w.result is None
            need_o = o is not None and o.samples is None and o.result is None
            engine = w.longctx.engine
            can_pair = engine is None or engine.max_parallel >= 2
            if need_w and need_o and can_pair and o is not None:
                pair = Pair(w, o, groups[self._group_key(w)], groups[self._group_key(o)])
                pair.without_group.led.append(pair)
                pair.with_group.refs += 1
                sched.pairs.append(pair)
                continue
            if need_w:
                groups[self._group_key(w)].alone.append(w)
            if need_o and o is not None:
                groups[self._group_key(o)].alone.append(o)

    def _restore(self, r: Run, data: dict) -> bool:
        """A cached result back on its run; False when the entry does not fit (then the run runs)."""
        assert r.longctx is not None
        when = str(data.get("_measured_at", ""))
        try:
            if r.longctx.kind == "serving":
                r.samples = ServingSamples.from_json(data["samples"])
            else:
                res = ServingResult.from_json(data)
                r.result = LongctxResult(
                    res.outcome,
                    res.exit_code,
                    res.seconds,
                    res.reason,
                    res.output,
                    res.log,
                    None,
                    res.startup_seconds,
                    res.checks,
                    reused=when or "cached",
                )
        except (KeyError, TypeError, ValueError):
            r.samples, r.result = None, None
            return False
        r.reused = when or "cached"
        return True

    def _store(self, runs: list[Run], cache: ResultCache) -> None:
        for r in runs:
            if not r.cache_key or r.reused or r.longctx is None:
                continue
            if r.longctx.kind == "serving":
                if r.samples is not None and r.result is not None and r.result.outcome != ERROR:
                    cache.put(r.cache_key, {"samples": r.samples.to_json()})
            elif r.result is not None and r.result.outcome in (PASS, FAIL):
                cache.put(r.cache_key, r.result.to_json())
