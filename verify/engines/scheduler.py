"""The engine side of ``verify``: one engine per tree and engine configuration, shared by every
long-context and serving test on it; serving measured quietly, paired when it can be.

An engine start is the expensive step, and a serving figure compares only with one measured under
the same conditions. So runs are grouped by (tree, engine configuration) for one start each, the
result cache is asked first, a serving test's two sides are measured paired and interleaved (ABBA)
when ``max_parallel`` >= 2, every other start and command waits while a serving measurement runs
(a readers-writer lock), and live engines are bounded by ``max_parallel``. An engine that cannot
start, or dies, makes each run it should have served an ``error`` with its log's tail
(docs/engines.md).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import threading
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset.confine import check_relative
from patchset.engine.tree import apply_series
from patchset.errors import EnvironmentFailure, UnsafePathError
from patchset.verify.engines.definition import Delivery
from patchset.verify.engines.launch import Engine, EngineFactory, EngineLaunch, instance_name
from patchset.verify.longctx.runs import engine_tail, run_one, start_failure
from patchset.verify.outcomes import EngineRun
from patchset.verify.overlay import drop_stale_bytecode, make_overlay, remove_tree
from patchset.verify.serving import Meter, ServingError, ServingSamples, measure_alone, measure_paired
from patchset.verify.testrun import ERROR, CommandResult, LongctxResult


class QuietLock:
    """Many readers (engine starts, checks, commands) or one writer (a serving measurement); a waiting
    writer goes first."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._readers = 0
        self._writer = False
        self._waiting = 0

    def read(self) -> contextlib.AbstractContextManager[None]:
        return self._held(write=False)

    def write(self) -> contextlib.AbstractContextManager[None]:
        return self._held(write=True)

    @contextlib.contextmanager
    def _held(self, *, write: bool) -> Iterator[None]:
        with self._cond:
            if write:
                self._waiting += 1
                while self._writer or self._readers:
                    self._cond.wait()
                self._waiting -= 1
                self._writer = True
            else:
                while self._writer or self._waiting:
                    self._cond.wait()
                self._readers += 1
        try:
            yield
        finally:
            with self._cond:
                if write:
                    self._writer = False
                else:
                    self._readers -= 1
                self._cond.notify_all()


@dataclass
class EngineBatch:
    """Engine runs sharing one tree and one engine configuration."""

    key: tuple
    items: list[Any]
    spec: Any  # LongctxSpec of the first run
    record: EngineRun
    runs: list[Any] = field(default_factory=list)  # longctx runs still to run
    alone: list[Any] = field(default_factory=list)  # serving runs measured on this engine alone
    led: list[Pair] = field(default_factory=list)  # pairs this (without) group measures with its with-tree
    refs: int = 0
    engine: Engine | None = None
    tree: Path | None = None
    failure: str = ""
    failure_result: LongctxResult | None = None
    held: threading.BoundedSemaphore | None = None  # the max_parallel slot this group's engine holds
    lock: threading.Lock = field(default_factory=threading.Lock)

    def has_work(self) -> bool:
        return bool(self.runs or self.alone or self.led)


@dataclass
class Pair:
    """A serving test's two sides, measured interleaved on two live engines."""

    with_run: Any
    without_run: Any
    with_group: EngineBatch
    without_group: EngineBatch
    released: bool = False  # the hold on the with-tree's engine was given back


@dataclass
class Context:
    """What the scheduler needs from ``verify``: the base tree, how to patch it, where things go."""

    base: Path
    mapper: Callable[[str], str] | None
    work: Path
    log_dir: Path
    ledger_dir: Path
    installed_root: str
    factory: EngineFactory
    keep: bool
    jobs: int
    slot: Callable[[str], tuple[int, str]]
    done: Callable[[Any], None]
    describe_failure: Callable[[Any], str]
    damaged: Callable[[], list[str]]


class Scheduler:
    """Runs the engine groups of one verify run (see the module docstring)."""

    def __init__(self, ctx: Context, quiet: QuietLock) -> None:
        self.ctx = ctx
        self.quiet = quiet
        self.groups: list[EngineBatch] = []
        self.pairs: list[Pair] = []
        self._limits: dict[str, threading.BoundedSemaphore] = {}
        self._limits_lock = threading.Lock()

    # -- limits

    def _limit(self, group: EngineBatch) -> threading.BoundedSemaphore:
        engine = group.spec.engine
        name = engine.name if engine else "(factory)"
        n = engine.max_parallel if engine else max(1, self.ctx.jobs)
        with self._limits_lock:
            return self._limits.setdefault(name, threading.BoundedSemaphore(max(1, n)))

    # -- one engine

    def _build_tree(self, group: EngineBatch, tree: Path) -> tuple[Path | None, str]:
        """The group's tree (and its overlay directory, when the engine takes one); an error text."""
        make_overlay(self.ctx.base, tree)
        files: dict[str, str | None] = {}
        if group.items:
            res = apply_series(tree, group.items, path_for=self.ctx.mapper)
            if not res.ok:  # checked in a dry run before; the base changed under us
                return None, self.ctx.describe_failure(res)
            files = dict(res.files)
            drop_stale_bytecode(tree, files)
        engine = group.spec.engine
        if engine is None or engine.delivers != Delivery.OVERLAY:
            return None, ""
        overlay = tree.parent / f"{tree.name}.overlay"
        root = self.ctx.installed_root.strip("/")
        for rel, digest in sorted(files.items()):
            if digest is None:
                continue  # a deleted file cannot be mounted away; the overlay carries what exists
            try:
                safe = check_relative(rel, what="a patched file")
            except UnsafePathError as exc:
                return None, exc.message
            dest = overlay / root / safe if root else overlay / safe
            dest.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(tree / safe, dest)
        overlay.mkdir(parents=True, exist_ok=True)
        return overlay, ""

    def acquire(self, group: EngineBatch) -> Engine | None:
        """The group's engine, started on first use; None when it did not start (``group.failure``)."""
        with group.lock:
            if group.engine is not None or group.failure:
                return group.engine
            limit = self._limit(group)
            limit.acquire()
            group.held = limit
            slot, safe = self.ctx.slot(group.record.label)
            tree = self.ctx.work / "trees" / f"{slot:03d}-{safe}"
            log_path = self.ctx.log_dir / f"engine-{slot:03d}-{safe}.log"
            group.record.log = str(log_path)
            group.tree = tree
            engine: Engine | None = None
            try:
                with self.quiet.read():
                    overlay, problem = self._build_tree(group, tree)
                    if problem:
                        group.failure = problem
                        group.failure_result = LongctxResult(ERROR, None, 0.0, problem)
                        raise _NoEngine
                    spec = group.spec
                    engine_def = spec.engine
                    req = EngineLaunch(
                        engine_def,
                        tree,
                        spec.model,
                        log_path,
                        logdir=self.ctx.log_dir / f"engine-{slot:03d}-{safe}",
                        name=instance_name(engine_def.name if engine_def else "engine", safe, slot),
                        ledger_dir=self.ctx.ledger_dir,
                        args=list(spec.engine_args),
                        env=dict(spec.env),
                        overlay=overlay,
                        root=self.ctx.installed_root,
                        # no definition: the test's timeout bounds the start (a definition has its own)
                        ready_timeout=float(spec.timeout) if engine_def is None else None,
                    )
                    engine = self.ctx.factory(req)
                    group.record.started = True
                    engine.start()
            except _NoEngine:
                self._end(group, None)
                return None
            except EnvironmentFailure as exc:
                index = self.groups.index(group)
                group.failure = exc.message.splitlines()[0] if exc.message else "did not start"
                group.failure_result = start_failure(exc, engine, index)
                group.record.error = group.failure
                self._end(group, engine)
                return None
            except BaseException:
                self._end(group, engine)
                raise
            group.engine = engine
            group.record.startup_seconds = engine.startup_seconds
            group.record.vllm_origin = engine.vllm_origin or ""
            return engine

    def release(self, group: EngineBatch) -> None:
        """One user fewer; the last one stops the engine and removes the tree."""
        with group.lock:
            group.refs -= 1
            if group.refs > 0:
                return
            engine, group.engine = group.engine, None
            self._end(group, engine)

    def _end(self, group: EngineBatch, engine: Engine | None) -> None:
        """Stop the engine, give its max_parallel slot back, remove its tree (each at most once)."""
        try:
            if engine is not None:
                engine.stop()
        finally:
            held, group.held = group.held, None
            if held is not None:
                held.release()
            tree, group.tree = group.tree, None
            if not self.ctx.keep and tree is not None:
                remove_tree(tree)
                remove_tree(tree.parent / f"{tree.name}.overlay")

    def release_pair(self, pair: Pair) -> None:
        if not pair.released:
            pair.released = True
            self.release(pair.with_group)

    # -- the work of a group

    def work(self, group: EngineBatch) -> None:
        """Start (or reuse) the group's engine, run its checks and measurements, let it go."""
        try:
            if not group.has_work():
                return
            engine = self.acquire(group)
            index = self.groups.index(group)
            if engine is None:
                for r in [*group.runs, *group.alone]:
                    r.result = _copy_failure(group, index)
                    self.ctx.done(r)
                for pair in group.led:
                    pair.without_run.result = _copy_failure(group, index)
                    self.ctx.done(pair.without_run)
                    if pair.with_run.result is None and pair.with_run.samples is None:
                        pair.with_run.result = LongctxResult(
                            ERROR,
                            None,
                            0.0,
                            f"no baseline to compare with: the tree without the patch did not serve ({group.failure})",
                        )
                        self.ctx.done(pair.with_run)
                    self.release_pair(pair)
                return
            for r in group.runs:
                with self.quiet.read():
                    r.result = run_one(engine, r.longctx, index)
                group.record.check_seconds += r.result.seconds
                self._after(group, r)
            by_config: dict[str, list[Any]] = {}
            for r in group.alone:
                by_config.setdefault(_config_key(r.longctx), []).append(r)
            for runs in by_config.values():
                cfg = runs[0].longctx.serving
                url = engine.url
                with self.quiet.write():
                    samples, error = _measure(lambda: measure_alone(Meter(url, cfg), cfg, _session()))  # noqa: B023
                for r in runs:
                    _set_samples(r, samples, error, engine, index, group)
                    if samples is not None:
                        group.record.check_seconds += samples.seconds
                    self._after(group, r)
            for pair in group.led:
                self._paired(pair, engine, index)
        except EnvironmentFailure as exc:
            group.record.error = exc.message
            for r in [*group.runs, *group.alone] + [x for p in group.led for x in (p.with_run, p.without_run)]:
                if r.result is None and r.samples is None:
                    r.result = CommandResult(ERROR, None, 0.0, exc.message)
        finally:
            for pair in group.led:
                self.release_pair(pair)
            self.release(group)

    def _paired(self, pair: Pair, engine: Engine, index: int) -> None:
        wg = pair.with_group
        try:
            with_engine = self.acquire(wg)
            if with_engine is None:
                pair.without_run.result = LongctxResult(
                    ERROR,
                    None,
                    0.0,
                    f"no comparison: the engine of the tree with the series did not serve ({wg.failure})",
                )
                if pair.with_run.result is None:
                    pair.with_run.result = _copy_failure(wg, self.groups.index(wg))
                return
            cfg = pair.with_run.longctx.serving
            with self.quiet.write():
                both, error = _measure(
                    lambda: measure_paired(Meter(with_engine.url, cfg), Meter(engine.url, cfg), cfg, _session())
                )
            a, b = both if both is not None else (None, None)
            _set_samples(pair.with_run, a, error, with_engine, self.groups.index(wg), wg)
            _set_samples(pair.without_run, b, error, engine, index, pair.without_group)
            if a is not None:
                wg.record.check_seconds += a.seconds / 2
                pair.without_group.record.check_seconds += a.seconds / 2
            self._after(wg, pair.with_run)
            self._after(pair.without_group, pair.without_run)
        finally:
            self.release_pair(pair)

    def _after(self, group: EngineBatch, run: Any) -> None:
        changed = self.ctx.damaged()
        if changed and run.result is not None:
            run.result = CommandResult(
                ERROR,
                None,
                run.result.seconds,
                f"the engine rewrote {len(changed)} file(s) of the build tree in place (e.g. {changed[0]}), "
                "files shared with the pristine base by hard links",
            )
        self.ctx.done(run)

    # -- the whole set

    def run(self, pool_units: list[Any], other: Callable[[Any], None]) -> None:
        """Phases first: each with-tree whose engine paired measurements need is started (and does its
        own work), then the trees paired with it run on ``jobs`` threads, then it stops. Then every
        other unit (groups, and command runs via ``other``) on ``jobs`` threads."""
        leaders: list[EngineBatch] = []
        for pair in self.pairs:
            if pair.with_group not in leaders:
                leaders.append(pair.with_group)
        for w in leaders:
            if w.has_work():
                self.work(w)  # starts it; the pairs' holds keep it up
            else:
                self.acquire(w)
            followers: list[EngineBatch] = []
            for pair in self.pairs:
                if pair.with_group is w and pair.without_group not in followers:
                    followers.append(pair.without_group)
            self._pool(followers, other)
            for pair in self.pairs:
                if pair.with_group is w:
                    self.release_pair(pair)
        done = {id(g) for w in leaders for g in [w, *(p.without_group for p in self.pairs if p.with_group is w)]}
        self._pool([u for u in pool_units if id(u) not in done], other)
        for pair in self.pairs:  # every hold on a with-tree's engine is given back, whatever happened
            self.release_pair(pair)

    def _pool(self, units: list[Any], other: Callable[[Any], None]) -> None:
        def unit(u: Any) -> None:
            if isinstance(u, EngineBatch):
                self.work(u)
            else:
                other(u)

        if self.ctx.jobs <= 1 or len(units) <= 1:
            for u in units:
                unit(u)
            return
        with ThreadPoolExecutor(max_workers=self.ctx.jobs, thread_name_prefix="verify") as pool:
            list(pool.map(unit, units))


class _NoEngine(Exception):
    pass


def _session() -> str:
    return uuid.uuid4().hex[:12]


def _config_key(spec: Any) -> str:
    return json.dumps(spec.serving.key() | {"r": spec.serving.repeats, "w": spec.serving.warmup}, sort_keys=True)


def _measure(fn: Callable[[], Any]) -> tuple[Any, str]:
    """A measurement, or why there is none: a check the server refused, or an engine that stopped
    answering (then the error carries the tail of its logs)."""
    try:
        return fn(), ""
    except ServingError as exc:
        return None, str(exc)
    except EnvironmentFailure as exc:  # ServerUnreachable: the engine died during the measurement
        return None, f"the engine stopped answering: {exc.message}"


def _set_samples(
    run: Any, samples: ServingSamples | None, error: str, engine: Engine, index: int, group: EngineBatch
) -> None:
    run.engine_index = index
    run.startup = engine.startup_seconds
    run.log = str(engine.log_path)
    if samples is None:
        run.result = LongctxResult(
            ERROR,
            None,
            0.0,
            f"serving: {error}",
            engine_tail(engine),
            str(engine.log_path),
            index,
            engine.startup_seconds,
        )
        return
    run.samples = samples


def _copy_failure(group: EngineBatch, index: int) -> LongctxResult:
    base = group.failure_result
    if base is None:
        return LongctxResult(ERROR, None, 0.0, group.failure or "the engine did not start", "", group.record.log, index)
    return LongctxResult(base.outcome, base.exit_code, 0.0, base.reason, base.output, base.log, index)
