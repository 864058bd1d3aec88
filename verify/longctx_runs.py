"""Long-context tests of ``patchset verify``: one engine per build tree, shared by that tree's checks.

A ``[[patch.tests]]`` table with ``kind = "longctx"`` names long-context checks
(``patchset.verify.longctx``) instead of a command. ``verify`` builds the same trees as for command
tests (the series, and the series minus the patch: hard-linked overlays of one base), starts an
engine from each tree (``patchset.verify.server``: the engine venv's own ``vllm`` replaced by the
tree's), runs the checks of every test that uses that tree and that engine configuration (model,
``engine_args``, ``env``), and stops it. The tree with the whole series is the same for every patch,
so one engine serves every patch's "with" run; each "without P" tree gets its own engine.

A run's outcome:

* every named check passes -> **pass**;
* a check fails (a drift over its bar, a wrong cached-token count, an HTTP error on a long prompt),
  or the engine exits during start-up (the tree's code crashed or refused its arguments) -> **fail**;
* the engine could not be started (no engine venv, start-up timeout) or stopped answering -> **error**.

Engine start-up time, check time and the engine log path go into each run's result and into the
report's list of engines, so a slow or crashing engine can be read without rerunning.
"""

from __future__ import annotations

import math
import string
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from patchset.errors import EnvironmentFailure, InputError, Location
from patchset.verify.longctx import BASELINE_DIR, CHECKS, LongctxReport, run_checks
from patchset.verify.longctx_view import longctx_text
from patchset.verify.server import EngineConfig, EngineExited, EngineServer, venv_python
from patchset.verify.testrun import ERROR, FAIL, PASS, CommandResult

MODEL_ENV = "PATCHSET_LONGCTX_MODEL"  # the model a long-context test serves when it names none


@dataclass
class LongctxSpec:
    """A long-context test with its paths resolved (model directory, baseline file)."""

    checks: list[str]
    model: Path
    mode: str
    baseline: Path | None
    engine_args: list[str]
    env: dict[str, str]
    timeout: int

    def engine_key(self) -> tuple:
        """Tests with the same key on the same tree share one engine."""
        return (str(self.model), tuple(self.engine_args), tuple(sorted(self.env.items())))


def resolve_spec(
    test: Any, ledger_root: Path, where: Location, env: Mapping[str, str], timeout: int | None = None
) -> LongctxSpec:
    """Check a ``kind = "longctx"`` test and resolve its model and baseline; InputError names the test."""
    checks = list(test.checks)
    unknown = [c for c in checks if c not in CHECKS]
    if not checks or unknown:
        raise InputError(
            f"long-context checks {unknown or '(none)'} are not known", where=where, hint=f"one of: {', '.join(CHECKS)}"
        )
    if test.mode not in ("fixed", "control"):
        raise InputError(f"mode {test.mode!r} is not 'fixed' or 'control'", where=where)
    raw = test.model or env.get(MODEL_ENV, "")
    if not raw:
        raise InputError(
            "a long-context test needs a model to serve",
            where=where,
            hint=f'set `model = "DIR"` (a local model directory, relative to the ledger) or {MODEL_ENV}',
        )
    model = _path(raw, ledger_root, env)
    if not (model / "config.json").is_file():
        raise InputError(f"model {model} is not a model directory (no config.json)", where=where)
    baseline = None
    if test.baseline:
        baseline = _path(test.baseline, ledger_root, env)
        if not baseline.is_file():
            named = BASELINE_DIR / (test.baseline if test.baseline.endswith(".json") else f"{test.baseline}.json")
            if not named.is_file():
                known = ", ".join(sorted(p.stem for p in BASELINE_DIR.glob("*.json")))
                raise InputError(
                    f"baseline {test.baseline!r} is neither a file nor a recorded baseline",
                    where=where,
                    hint=f"a JSON file relative to the ledger, or one of: {known}",
                )
            baseline = named
    if (timeout is not None and timeout <= 0) or test.timeout <= 0:
        raise InputError(f"test timeout {test.timeout} is not a positive number of seconds", where=where)
    expanded = {k: string.Template(v).safe_substitute(env) for k, v in test.env.items()}
    return LongctxSpec(checks, model, test.mode, baseline, list(test.engine_args), expanded, timeout or test.timeout)


def _path(raw: str, root: Path, env: Mapping[str, str]) -> Path:
    p = Path(string.Template(raw).safe_substitute(env)).expanduser()
    return (p if p.is_absolute() else root / p).resolve()


# --------------------------------------------------------------------------- engines


@dataclass
class EngineRequest:
    """What ``verify`` asks an engine factory for: a server on this tree, serving this model."""

    tree: Path
    model: Path
    engine_args: list[str]
    env: dict[str, str]
    timeout: int
    log_path: Path


class Engine(Protocol):
    url: str
    log_path: Path
    startup_seconds: float | None
    vllm_origin: str | None

    def start(self) -> Any: ...

    def stop(self) -> None: ...


EngineFactory = Callable[[EngineRequest], Engine]


def vllm_cpu_engine(req: EngineRequest) -> EngineServer:
    """The default factory: the CPU vLLM engine of ``ci/setup_engine.sh``, running the tree's ``vllm``."""
    config = EngineConfig(
        model_dir=req.model,
        extra_args=tuple(req.engine_args),
        extra_env=dict(req.env),
        startup_timeout=float(req.timeout),
        tree=req.tree,
    )
    server = EngineServer(config, log_dir=req.log_path.parent)
    server.log_path = req.log_path
    return server


@dataclass
class EngineRun:
    """One engine verify started: which tree, how long start-up and checks took, where its log is."""

    label: str  # "with the series" | "without <patch>"
    variant: str  # with | without
    patch: str  # the patch left out ("" for the whole series)
    model: str
    engine_args: list[str]
    tests: list[str] = field(default_factory=list)  # "<patch>/<test>" served by this engine
    startup_seconds: float | None = None
    check_seconds: float = 0.0
    log: str = ""
    vllm_origin: str = ""
    error: str = ""

    def to_json(self) -> dict:
        return {
            "label": self.label,
            "variant": self.variant,
            "patch": self.patch or None,
            "model": self.model,
            "engine_args": self.engine_args,
            "tests": self.tests,
            "startup_seconds": None if self.startup_seconds is None else round(self.startup_seconds, 3),
            "check_seconds": round(self.check_seconds, 3),
            "log": self.log,
            "vllm_origin": self.vllm_origin or None,
            "error": self.error or None,
        }


@dataclass
class LongctxResult(CommandResult):
    """A run of a long-context test: the outcome, per-check verdicts and the engine that served it."""

    engine: int | None = None  # index into VerifyReport.engines
    startup_seconds: float | None = None
    checks: list[dict] = field(default_factory=list)

    def to_json(self) -> dict:
        out = super().to_json()
        out.update(
            {
                "engine": self.engine,
                "engine_startup_seconds": None if self.startup_seconds is None else round(self.startup_seconds, 3),
                "check_seconds": round(self.seconds, 3),
                "engine_log": self.log or None,
                "checks": self.checks,
            }
        )
        return out


def _num(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) else ("inf" if math.isinf(v) else float(f"{v:.4g}"))
    return v


def summarize(report: LongctxReport) -> tuple[str, str, list[dict]]:
    """(outcome, one-line reason, one row per check) from a long-context report."""
    rows: list[dict] = []
    failed: list[str] = []
    for res in report.results:
        bad = [m for m in res.measurements if not m.ok]
        worst = max(
            (m for m in res.measurements if isinstance(m.value, (int, float))),
            key=lambda m: float(m.value) if m.value is not None else -1.0,
            default=None,
        )
        rows.append(
            {
                "check": res.name,
                "ok": res.ok,
                "seconds": round(res.seconds, 3),
                "failed_cases": [m.case for m in bad],
                "worst": None
                if worst is None
                else {"case": worst.case, "value": _num(worst.value), "bar": _num(worst.bar)},
                "error": res.error,
            }
        )
        if not res.ok:
            first = bad[0] if bad else None
            if first is not None and first.value is not None:
                failed.append(f"{res.name} ({first.case}: {first.metric} {_num(first.value)} > bar {_num(first.bar)})")
            else:
                failed.append(f"{res.name} ({(res.error or 'no answer')[:160]})")
    if failed:
        return FAIL, "failed " + "; ".join(failed), rows
    return PASS, "", rows


def run_one(engine: Engine, spec: LongctxSpec, engine_index: int) -> LongctxResult:
    """Run one test's checks against a started engine."""
    startup = engine.startup_seconds
    try:
        report = run_checks(
            engine.url,
            checks=spec.checks,
            mode=spec.mode,
            baseline=spec.baseline,
            reference_model=spec.model if "reference" in spec.checks else None,
            reference_python=venv_python() if "reference" in spec.checks else None,
            timeout=float(spec.timeout),
        )
    except EnvironmentFailure as exc:  # ServerUnreachable: the engine stopped answering
        return LongctxResult(
            ERROR,
            None,
            0.0,
            f"the engine stopped answering: {exc.message}",
            "",
            str(engine.log_path),
            engine_index,
            startup,
        )
    except InputError as exc:
        return LongctxResult(ERROR, None, 0.0, exc.message, "", str(engine.log_path), engine_index, startup)
    outcome, reason, rows = summarize(report)
    return LongctxResult(
        outcome,
        0 if outcome == PASS else 1,
        report.seconds,
        reason,
        longctx_text(report),
        str(engine.log_path),
        engine_index,
        startup,
        rows,
    )


def start_failure(exc: EnvironmentFailure, engine: Engine | None, engine_index: int) -> LongctxResult:
    """The result of every test of an engine that did not start: a crash is a failure, the rest errors."""
    log = str(engine.log_path) if engine is not None else ""
    first = exc.message.splitlines()[0] if exc.message else "the engine did not start"
    if isinstance(exc, EngineExited):
        return LongctxResult(
            FAIL, None, 0.0, f"the engine exits during start-up: {first}", exc.message[-3000:], log, engine_index
        )
    return LongctxResult(ERROR, None, 0.0, first + (f" ({exc.hint})" if exc.hint else ""), "", log, engine_index)
