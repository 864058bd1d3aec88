"""Long-context tests of ``patchset verify``: one engine per build tree, shared by that tree's checks.

``kind = "longctx"`` tests name checks (``patchset.verify.longctx``) instead of a command. An
engine is started from each tree (the series, and the series minus the patch) and serves every
test on that tree and engine configuration. A run passes when every check does; fails on a check
or when the engine exits during start-up (the tree's code crashed); is an error when the engine
could not be started or stopped answering. Start-up and check times and the log path go into the
result.
"""

from __future__ import annotations

import hashlib
import json
import math
import statistics
import string
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from patchset.errors import EnvironmentFailure, InputError, Location
from patchset.ledger.model import SERVING_CHECKS
from patchset.verify.engines.definition import EngineDef, Preset
from patchset.verify.engines.launch import Engine
from patchset.verify.engines.vllm_cpu import venv_python
from patchset.verify.longctx.params import BASELINE_DIR, CHECKS, METHOD, LongctxRun, Mode
from patchset.verify.longctx.report import LongctxReport
from patchset.verify.longctx.suite import run_checks
from patchset.verify.longctx.view import longctx_text
from patchset.verify.serving import CPU_STREAMS, DEFAULT_MAX_TOKENS, DEFAULT_REPEATS, DEFAULT_STREAMS, ServingConfig
from patchset.verify.stats import BUG, INCONCLUSIVE, drift_verdict
from patchset.verify.testrun import ERROR, FAIL, PASS, LongctxResult, Outcome

MODEL_ENV = "PATCHSET_LONGCTX_MODEL"  # the model a long-context test serves when it names none


@dataclass
class LongctxSpec:
    """A test that starts an engine (``kind = "longctx"`` or ``"serving"``) with its paths resolved
    (model, baseline file) and its engine definition (``patchset.verify.engines``)."""

    checks: list[str]
    model: Path | str
    mode: Mode
    baseline: Path | None
    engine_args: list[str]
    env: dict[str, str]
    timeout: int
    kind: str = "longctx"
    engine: EngineDef | None = None  # None: an engine factory of the caller decides
    serving: ServingConfig | None = None
    repeats: int = 1  # longctx, control mode: trials of the resume check

    def engine_key(self) -> tuple:
        """Tests with the same key on the same tree share one engine."""
        fp = self.engine.fingerprint() if self.engine else ""
        return (fp, str(self.model), tuple(self.engine_args), tuple(sorted(self.env.items())))

    def fingerprint(self) -> str:
        """What the test measures, for the result cache: kind, checks, parameters (not its tags or name)."""
        data = {
            "method": METHOD,
            "kind": self.kind,
            "checks": self.checks,
            "mode": self.mode,
            "baseline": _file_digest(self.baseline) if self.baseline else "",
            "repeats": self.repeats,
            "serving": self.serving.key() | {"repeats": self.serving.repeats, "warmup": self.serving.warmup}
            if self.serving
            else None,
            "model": _model_digest(self.model),
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()[:16]


def _file_digest(path: Path) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()[:16]
    except OSError:
        return "absent"


def _model_digest(model: Path | str) -> str:
    """A model directory's files (name, size, mtime); a model name as it is."""
    p = Path(model) if isinstance(model, Path) else None
    if p is None or not p.is_dir():
        return str(model)
    h = hashlib.sha256()
    for f in sorted(q for q in p.rglob("*") if q.is_file()):
        st = f.stat()
        h.update(f"{f.relative_to(p)}\0{st.st_size}\0{st.st_mtime_ns}\0".encode())
    return h.hexdigest()[:16]


def resolve_spec(
    test: Any,
    ledger_root: Path,
    where: Location,
    env: Mapping[str, str],
    timeout: int | None = None,
    engine: EngineDef | None = None,
) -> LongctxSpec:
    """Check a ``kind = "longctx"`` or ``"serving"`` test and resolve its model and baseline; InputError
    names the test. ``engine``: the engine it runs on (its ``model`` is the default model)."""
    kind = getattr(test, "kind", "longctx")
    checks = list(test.checks)
    known = CHECKS if kind == "longctx" else SERVING_CHECKS
    unknown = [c for c in checks if c not in known]
    if not checks or unknown:
        what = "long-context" if kind == "longctx" else "serving"
        raise InputError(
            f"{what} checks {unknown or '(none)'} are not known", where=where, hint=f"one of: {', '.join(known)}"
        )
    if test.mode not in tuple(Mode):
        raise InputError(f"mode {test.mode!r} is not 'fixed' or 'control'", where=where)
    model = _model(test, kind, checks, ledger_root, where, env, engine)
    baseline = _baseline(test.baseline, ledger_root, where, env) if test.baseline else None
    if (timeout is not None and timeout <= 0) or test.timeout <= 0:
        raise InputError(f"test timeout {test.timeout} is not a positive number of seconds", where=where)
    expanded = {k: string.Template(v).safe_substitute(env) for k, v in test.env.items()}
    serving = None
    repeats = int(getattr(test, "repeats", 0) or 0)
    if kind == "serving":
        serving = _serving_config(test, checks, repeats, timeout, engine)
        repeats = serving.repeats
    elif repeats > 1 and not (test.mode == Mode.CONTROL and "resume" in checks):
        raise InputError(
            "`repeats` of a long-context test repeats the resume check in control mode",
            where=where,
            hint='add "resume" to checks and mode = "control", or remove `repeats`',
        )
    return LongctxSpec(
        checks,
        model,
        Mode(test.mode),
        baseline,
        list(test.engine_args),
        expanded,
        timeout or test.timeout,
        kind,
        engine,
        serving,
        max(1, repeats),
    )


def _model(
    test: Any,
    kind: str,
    checks: list[str],
    root: Path,
    where: Location,
    env: Mapping[str, str],
    engine: EngineDef | None,
) -> Path | str:
    """The model directory a test serves, or a name the engine knows it by (a remote engine's)."""
    local_engine = engine is None or engine.preset == Preset.VLLM_CPU
    raw = test.model or (engine.model if engine else "") or env.get(MODEL_ENV, "")
    if not raw and local_engine:
        raise InputError(
            "a long-context test needs a model to serve" if kind == "longctx" else "a serving test needs a model",
            where=where,
            hint=f'set `model = "DIR"` (a local model directory, relative to the ledger) or {MODEL_ENV}',
        )
    if not raw:
        return ""
    path = _path(raw, root, env)
    if (path / "config.json").is_file():
        return path
    if local_engine or "reference" in checks or path.exists():
        raise InputError(f"model {path} is not a model directory (no config.json)", where=where)
    return string.Template(raw).safe_substitute(env)  # a model the engine knows by name


def _baseline(name: str, root: Path, where: Location, env: Mapping[str, str]) -> Path:
    """A baseline file relative to the ledger, else a recorded one by name."""
    baseline = _path(name, root, env)
    if baseline.is_file():
        return baseline
    named = BASELINE_DIR / (name if name.endswith(".json") else f"{name}.json")
    if not named.is_file():
        known_b = ", ".join(sorted(p.stem for p in BASELINE_DIR.glob("*.json")))
        raise InputError(
            f"baseline {name!r} is neither a file nor a recorded baseline",
            where=where,
            hint=f"a JSON file relative to the ledger, or one of: {known_b}",
        )
    return named


def _serving_config(
    test: Any, checks: list[str], repeats: int, timeout: int | None, engine: EngineDef | None
) -> ServingConfig:
    streams = int(getattr(test, "streams", 0) or 0) or (
        CPU_STREAMS if engine is None or engine.preset == Preset.VLLM_CPU else DEFAULT_STREAMS
    )
    return ServingConfig(
        checks=checks,
        repeats=repeats or DEFAULT_REPEATS,
        warmup=int(getattr(test, "warmup", 1)),
        streams=streams,
        max_tokens=int(getattr(test, "max_tokens", 0) or 0) or DEFAULT_MAX_TOKENS,
        tolerance=float(getattr(test, "tolerance", 0.03)),
        tolerances={k: float(v) for k, v in (getattr(test, "tolerances", {}) or {}).items()},
        timeout=float(timeout or test.timeout),
    )


def _path(raw: str, root: Path, env: Mapping[str, str]) -> Path:
    p = Path(string.Template(raw).safe_substitute(env)).expanduser()
    return (p if p.is_absolute() else root / p).resolve()


def _num(v: Any) -> Any:
    if isinstance(v, float):
        return None if math.isnan(v) else ("inf" if math.isinf(v) else float(f"{v:.4g}"))
    return v


def summarize(report: LongctxReport) -> tuple[Outcome, str, list[dict]]:
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


def engine_tail(engine: Engine) -> str:
    """The tail of an engine's log, for the engines that keep one (``log_tail``)."""
    tail = getattr(engine, "log_tail", None)
    return tail() if callable(tail) else ""


def run_one(engine: Engine, spec: LongctxSpec, engine_index: int) -> LongctxResult:
    """Run one test's checks against a started engine (control mode with ``repeats``: the resume
    check N times, judged by the exact test of ``patchset.verify.stats``)."""
    startup = engine.startup_seconds
    trials = spec.repeats if (spec.repeats > 1 and spec.mode == Mode.CONTROL and "resume" in spec.checks) else 0
    once = [c for c in spec.checks if not (trials and c == "resume")]

    def checks_of(names: list[str]) -> LongctxReport:
        reference = "reference" in names
        return run_checks(
            LongctxRun(
                engine.url,
                checks=names,
                mode=spec.mode,
                baseline=spec.baseline,
                reference_model=spec.model if reference else None,
                reference_python=venv_python() if reference else None,
                timeout=float(spec.timeout),
            )
        )

    try:
        report = checks_of(once) if once else None
        trial_reports = [checks_of(["resume"]) for _ in range(trials)]
    except EnvironmentFailure as exc:  # ServerUnreachable: the engine stopped answering
        return LongctxResult(
            ERROR,
            None,
            0.0,
            f"the engine stopped answering: {exc.message}",
            engine_tail(engine),
            str(engine.log_path),
            engine_index,
            startup,
        )
    except InputError as exc:
        return LongctxResult(ERROR, None, 0.0, exc.message, "", str(engine.log_path), engine_index, startup)
    outcome, reason, rows = summarize(report) if report else (PASS, "", [])
    text = longctx_text(report) if report else ""
    seconds = (report.seconds if report else 0.0) + sum(r.seconds for r in trial_reports)
    drift = None
    if trials:
        verdict, row = resume_trials(trial_reports)
        drift = verdict.to_json() | {"bar": row["worst"]["bar"], "repeats": trials}
        rows.append(row)
        text += f"\nresume x {trials} trials (control mode): {verdict.text()}\n"
        if verdict.verdict == BUG:
            outcome = FAIL
            reason = "; ".join(x for x in (reason, f"resume over {trials} trials: {verdict.text()}") if x)
        elif verdict.verdict == INCONCLUSIVE and outcome == PASS:
            outcome = ERROR
            reason = f"resume over {trials} trials: {verdict.label} ({verdict.text()})"
    return LongctxResult(
        outcome,
        0 if outcome == PASS else 1,
        seconds,
        reason,
        text,
        str(engine.log_path),
        engine_index,
        startup,
        rows,
        drift=drift,
    )


def resume_trials(reports: list[LongctxReport], multiple: float = 2.0, floor: float = 1e-4) -> tuple[Any, dict]:
    """Exceedance counts of repeated resume trials against their controls, and the exact test's verdict.

    The bar is ``multiple`` x the median control over every trial and case (the maintainer's "2x the
    control"), at least ``floor``; a resume exceeds it when its drift does, a control when its own
    drift (cold against cold) does: under no bug both are the same kind of noise."""
    drifts, controls = [], []
    for rep in reports:
        for m in rep.result("resume").measurements:
            drifts.append(math.inf if m.value is None else float(m.value))
            if m.control is not None and math.isfinite(m.control):
                controls.append(float(m.control))
    bar = max(multiple * statistics.median(controls), floor) if controls else floor
    exceed = sum(1 for d in drifts if d > bar)
    control_exceed = sum(1 for c in controls if c > bar)
    verdict = drift_verdict(exceed, max(1, len(drifts)), control_exceed, max(1, len(controls)))
    row = {
        "check": "resume",
        "ok": verdict.verdict != BUG,
        "seconds": round(sum(r.result("resume").seconds for r in reports), 3),
        "failed_cases": [],
        "worst": {"case": f"{len(reports)} trials", "value": _num(max(drifts, default=0.0)), "bar": _num(bar)},
        "error": None,
        "trials": {"drifts": [_num(d) for d in drifts], "controls": [_num(c) for c in controls]},
        "verdict": verdict.label,
    }
    return verdict, row


def start_failure(exc: EnvironmentFailure, engine: Engine | None, engine_index: int) -> LongctxResult:
    """The result of every test of an engine that did not start or died: an error (never a pass or a
    fail), with the tail of its logs."""
    log = str(engine.log_path) if engine is not None else ""
    first = exc.message.splitlines()[0] if exc.message else "the engine did not start"
    tail = exc.message[-3000:] if "\n" in exc.message else ""
    if not tail and engine is not None:
        tail = engine_tail(engine)
    return LongctxResult(ERROR, None, 0.0, first + (f" ({exc.hint})" if exc.hint else ""), tail, log, engine_index)
