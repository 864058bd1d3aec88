"""Serving checks: the figures users watch, measured on an engine and compared with a baseline.

The maintainer's A/B harness, made a per-patch regression test (``kind = "serving"``): decode and
concurrent tok/s, time to the first token of a resumed session, prefix-cache hits of an agent
session and speculative-decoding acceptance, each repeat with its own ``cache_salt``. A repeat in
which ``/metrics`` moved more than its own requests explain carries **foreign traffic** and is
left out of the statistics (``ServingSamples.clean``). Verdicts come from
``patchset.verify.stats``; docs/serving.md describes every check.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset import atomic
from patchset.errors import InputError
from patchset.verify import Word
from patchset.verify.engines.client import BadResponse, CompletionsClient, ServerRejected, new_salt
from patchset.verify.longctx.measures import make_document
from patchset.verify.stats import MAX_SAMPLES, RatioVerdict, ratio_verdict, reaches

CHECKS = ("decode", "concurrent", "ttft-resume", "cache-hits", "spec-accept")
SHAPES = (32, 512, 2048)  # prompt tokens of the decode check
DEFAULT_REPEATS = 6  # the fewest paired repeats that admit a 95% interval (stats.reaches)
DEFAULT_MAX_TOKENS = 64
DEFAULT_STREAMS = 32
CPU_STREAMS = 8
RESUME_CONTEXT = 4096  # tokens of the resumed session
MIN_CLEAN = 3  # repeats without foreign traffic a verdict needs
METHOD = 5  # how the checks measure; part of the result cache's key (a change re-measures)

COUNTERS = {
    "requests": "vllm:request_success_total",
    "generation": "vllm:generation_tokens_total",
    "cache_queries": "vllm:prefix_cache_queries_total",
    "cache_hits": "vllm:prefix_cache_hits_total",
    "spec_accepted": "vllm:spec_decode_num_accepted_tokens_total",
    "spec_draft": "vllm:spec_decode_num_draft_tokens_total",
    "spec_drafts": "vllm:spec_decode_num_drafts_total",
}
# server-side timings (vLLM's histograms: their _sum over a window holding one request is its time)
DECODE_TIME = "vllm:request_decode_time_seconds_sum"
TTFT_TIME = "vllm:time_to_first_token_seconds_sum"
_SAMPLE = re.compile(r"^([A-Za-z_:][A-Za-z0-9_:]*)(\{[^}]*\})?\s+([-+0-9.eEinfNa]+)(\s+\d+)?\s*$")


class ServingError(Exception):
    """A check could not measure (the server refused a request, answered nonsense)."""


def parse_metrics(text: str) -> dict[str, float]:
    """Prometheus text -> {metric name: sum over its label sets} (counters without ``_total`` too)."""
    out: dict[str, float] = {}
    for line in text.splitlines():
        if not line or line.startswith("#"):
            continue
        m = _SAMPLE.match(line.strip())
        if not m:
            continue
        try:
            value = float(m.group(3))
        except ValueError:
            continue
        out[m.group(1)] = out.get(m.group(1), 0.0) + value
    return out


def counter(values: dict[str, float], name: str) -> float | None:
    """A counter's value, found under ``name`` or without its ``_total`` suffix."""
    if name in values:
        return values[name]
    return values.get(name.removesuffix("_total"))


class Better(Word):
    """Which direction of a metric is better."""

    HIGHER = "higher"  # a rate (tok/s, hits)
    LOWER = "lower"  # a time


@dataclass
class MetricSpec:
    """What one measured number is: its unit, which direction is better, the check it belongs to."""

    check: str
    unit: str
    better: Better


@dataclass
class Window:
    """One check of one repeat: the numbers it measured and what ``/metrics`` said meanwhile."""

    values: dict[str, float] = field(default_factory=dict)
    requests: int = 0
    generated: int = 0
    foreign: str = ""  # why this window's counters moved more than its own requests explain
    counters: dict[str, float] = field(default_factory=dict)  # deltas over the window


@dataclass
class ServingConfig:
    """A serving test's parameters, with the defaults filled in."""

    checks: list[str]
    repeats: int = DEFAULT_REPEATS
    warmup: int = 1
    streams: int = DEFAULT_STREAMS
    max_tokens: int = DEFAULT_MAX_TOKENS
    tolerance: float = 0.03
    tolerances: dict[str, float] = field(default_factory=dict)
    seed: int = 0
    timeout: float = 600.0
    shapes: tuple[int, ...] = SHAPES
    context: int = RESUME_CONTEXT
    token_range: tuple[int, int] = (100, 1000)

    def __post_init__(self) -> None:
        unknown = [c for c in self.checks if c not in CHECKS]
        if unknown or not self.checks:
            raise InputError(f"unknown serving check(s) {unknown or '(none)'}; known: {', '.join(CHECKS)}")
        if self.repeats < MIN_CLEAN:
            raise InputError(f"a serving test needs at least {MIN_CLEAN} repeats, got {self.repeats}")
        if self.streams < 1 or self.max_tokens < 2 or self.warmup < 0:
            raise InputError("streams must be >= 1, max_tokens >= 2 and warmup >= 0")

    def key(self) -> dict[str, Any]:
        """What makes two measurements comparable (everything but the verdict's tolerance)."""
        return {
            "method": METHOD,
            "checks": list(self.checks),
            "streams": self.streams,
            "max_tokens": self.max_tokens,
            "shapes": list(self.shapes),
            "context": self.context,
            "seed": self.seed,
        }


@dataclass
class ServingSamples:
    """Every sample of one engine's serving measurement: per metric, one value per repeat."""

    metrics: dict[str, MetricSpec] = field(default_factory=dict)
    values: dict[str, list[float | None]] = field(default_factory=dict)
    foreign: list[dict[str, Any]] = field(default_factory=list)  # {"repeat", "check", "why"}
    skipped: dict[str, str] = field(default_factory=dict)  # check -> why it measured nothing
    repeats: int = 0
    session: str = ""  # measurements taken together (interleaved) share a session
    seconds: float = 0.0
    has_metrics: bool = False

    def add(self, repeat: int, check: str, window: Window, specs: dict[str, MetricSpec]) -> None:
        for name, value in window.values.items():
            self.metrics.setdefault(name, specs[name])
            row = self.values.setdefault(name, [])
            row.extend([None] * (repeat - len(row)))
            row.append(value)
        if window.foreign:
            self.foreign.append({"repeat": repeat, "check": check, "why": window.foreign})

    def clean(self, metric: str) -> list[tuple[int, float]]:
        """(repeat, value) of a metric's repeats without foreign traffic."""
        check = self.metrics[metric].check
        bad = {f["repeat"] for f in self.foreign if f["check"] == check}
        return [(i, v) for i, v in enumerate(self.values.get(metric, [])) if v is not None and i not in bad]

    def to_json(self) -> dict[str, Any]:
        return {
            "session": self.session,
            "repeats": self.repeats,
            "seconds": round(self.seconds, 3),
            "has_metrics": self.has_metrics,
            "metrics": {
                name: {
                    "check": spec.check,
                    "unit": spec.unit,
                    "better": spec.better,
                    "samples": self.values.get(name, []),
                }
                for name, spec in self.metrics.items()
            },
            "foreign_traffic": self.foreign,
            "skipped": self.skipped,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ServingSamples:
        out = cls(
            repeats=int(data.get("repeats", 0)),
            session=str(data.get("session", "")),
            seconds=float(data.get("seconds", 0.0)),
            has_metrics=bool(data.get("has_metrics", False)),
        )
        for name, m in (data.get("metrics") or {}).items():
            out.metrics[name] = MetricSpec(str(m["check"]), str(m.get("unit", "")), Better(m.get("better", "higher")))
            out.values[name] = [None if v is None else float(v) for v in m.get("samples", [])]
        out.foreign = list(data.get("foreign_traffic") or [])
        out.skipped = dict(data.get("skipped") or {})
        return out


class Meter:
    """Measures the serving checks of one engine, one repeat at a time."""

    def __init__(self, url: str, config: ServingConfig, model: str | None = None) -> None:
        self.config = config
        self.client = CompletionsClient(url, model, timeout=config.timeout, keepalive=False)
        self.doc = make_document(
            max(max(config.shapes), config.context) + 4096,
            seed=config.seed + 101,
            low=config.token_range[0],
            high=config.token_range[1],
        )
        self.specs: dict[str, MetricSpec] = {}
        self.samples = ServingSamples()
        self.samples.has_metrics = self.scrape() is not None
        self._repeat = 0
        self._t0: float | None = None
        self._salt: str | None = None

    # -- /metrics

    def scrape(self) -> dict[str, float] | None:
        text = self.client.metrics_text()
        if text is None:
            return None
        values = parse_metrics(text)
        return values if counter(values, COUNTERS["requests"]) is not None else None

    def settled(self) -> dict[str, float] | None:
        """Counters once they stop moving (the server records a request's stats just after answering it)."""
        if not self.samples.has_metrics:
            return None
        last = self.scrape()
        deadline = time.monotonic() + 1.0
        while last is not None and time.monotonic() < deadline:
            time.sleep(0.05)
            now = self.scrape()
            if now is None or all(counter(now, c) == counter(last, c) for c in COUNTERS.values()):
                return now
            last = now
        return last

    def _window(self, body: Callable[[Window], None]) -> Window:
        w = Window()
        before = self.settled()
        body(w)
        after = self.settled()
        if before is None or after is None:
            return w
        for key, name in COUNTERS.items():
            a, b = counter(after, name), counter(before, name)
            if a is not None and b is not None:
                w.counters[key] = a - b
        extra_req = w.counters.get("requests", 0.0) - w.requests
        extra_gen = w.counters.get("generation", 0.0) - w.generated
        if extra_req > 0 or extra_gen > 0:
            w.foreign = (
                f"/metrics moved by {w.counters.get('requests', 0):.0f} requests and "
                f"{w.counters.get('generation', 0):.0f} generated tokens; this check sent {w.requests} "
                f"and got {w.generated}"
            )
        return w

    def _spec(self, name: str, check: str, unit: str, better: Better = Better.HIGHER) -> str:
        self.specs[name] = MetricSpec(check, unit, better)
        return name

    # -- the checks

    def _server_seconds(self, name: str, body: Callable[[], Any]) -> tuple[Any, float | None]:
        """Run one request; the server's own time for it from a histogram's ``_sum`` (None: no such
        histogram). The server's clock is not the client's: a client starved of CPU on a shared
        machine reads a stream's chunks late and in bursts, the server timed the tokens as it made them."""
        before = self.settled()
        out = body()
        after = self.settled()
        if before is None or after is None:
            return out, None
        a, b = counter(after, name), counter(before, name)
        return out, (a - b) if a is not None and b is not None and a > b else None

    def _decode(self, w: Window, salt: str) -> None:
        n = self.config.max_tokens
        for shape in self.config.shapes:
            prompt, tag = self.doc[:shape], f"{salt}-d{shape}"
            s, server = self._server_seconds(
                DECODE_TIME,
                lambda: self.client.stream(prompt, max_tokens=n, cache_salt=tag),  # noqa: B023 - called at once
            )
            w.requests += 1
            w.generated += s.usage.completion_tokens
            rate = (s.usage.completion_tokens - 1) / server if server else s.decode_tokens_per_second
            if rate is None:
                raise ServingError(f"decode: a {shape}-token prompt streamed {s.usage.completion_tokens} token(s)")
            w.values[self._spec(f"decode tok/s (prompt {shape})", "decode", "tok/s")] = rate

    def _concurrent(self, w: Window, salt: str) -> None:
        k, n = self.config.streams, self.config.max_tokens
        results: list[int | BaseException] = [0] * k
        shape = min(self.config.shapes)

        def one(i: int) -> None:
            try:
                off = (i * 37) % max(1, len(self.doc) - shape)
                c = self.client.complete(self.doc[off : off + shape], max_tokens=n, cache_salt=f"{salt}-c{i}")
                results[i] = c.usage.completion_tokens
            except BaseException as exc:  # re-raised below, in the measuring thread
                results[i] = exc

        threads = [threading.Thread(target=one, args=(i,), daemon=True) for i in range(k)]
        t0 = time.monotonic()
        for t in threads:
            t.start()
        for t in threads:
            t.join(self.config.timeout)
        wall = time.monotonic() - t0
        for r in results:
            if isinstance(r, BaseException):
                raise r
        tokens = sum(int(r) for r in results if not isinstance(r, BaseException))
        w.requests += k
        w.generated += tokens
        w.values[self._spec(f"concurrent tok/s ({k} streams)", "concurrent", "tok/s")] = tokens / wall

    def _ttft(self, w: Window, salt: str) -> None:
        ctx = self.config.context
        history = self.doc[:ctx]
        turn = self.doc[ctx : ctx + 40]
        warm = self.client.complete(history, max_tokens=1, cache_salt=salt)  # the session so far
        resumed, r_server = self._server_seconds(
            TTFT_TIME, lambda: self.client.stream(history + turn, max_tokens=2, cache_salt=salt)
        )
        cold, c_server = self._server_seconds(
            TTFT_TIME, lambda: self.client.stream(history + turn, max_tokens=2, cache_salt=f"{salt}-cold")
        )
        w.requests += 3
        w.generated += warm.usage.completion_tokens + resumed.usage.completion_tokens + cold.usage.completion_tokens
        t_resumed = r_server or resumed.first_token_seconds
        t_cold = c_server or cold.first_token_seconds
        w.values[self._spec(f"ttft resumed s ({ctx} tokens)", "ttft-resume", "s", Better.LOWER)] = t_resumed
        w.values[self._spec(f"ttft cold s ({ctx} tokens)", "ttft-resume", "s", Better.LOWER)] = t_cold
        w.values[self._spec("resume speed-up (cold / resumed)", "ttft-resume", "x")] = (
            t_cold / t_resumed if t_resumed > 0 else 0.0
        )

    def agent_script(self) -> tuple[list[int], list[list[int]]]:
        """The scripted agent session's system prompt (with six tools) and its short turns."""
        lo, hi = self.config.token_range
        system = make_document(1200, seed=self.config.seed + 7, low=lo, high=hi)
        tools = [make_document(110, seed=self.config.seed + 20 + i, low=lo, high=hi) for i in range(6)]
        turns = [make_document(24 + 9 * i, seed=self.config.seed + 40 + i, low=lo, high=hi) for i in range(6)]
        return system + [t for tool in tools for t in tool], turns

    def _cache_hits(self, w: Window, salt: str) -> None:
        prefix, turns = self.agent_script()
        reply = 16
        sessions: dict[str, list[int]] = {"a": list(prefix), "b": list(prefix)}
        prompt_total = cached_total = 0
        # session a: 3 turns; session b: 3 turns; then a and b resume for one more turn each
        plan = [("a", 0), ("a", 1), ("a", 2), ("b", 3), ("b", 4), ("b", 5), ("a", 3), ("b", 0)]
        for who, t in plan:
            history = sessions[who] + turns[t]
            c = self.client.complete(history, max_tokens=reply, logprobs=1, cache_salt=salt)
            w.requests += 1
            w.generated += c.usage.completion_tokens
            if c.usage.cached_tokens is None:
                raise ServingError(
                    "cache-hits: the server reports no usage.prompt_tokens_details.cached_tokens "
                    "(vLLM: start it with --enable-prompt-tokens-details)"
                )
            prompt_total += c.usage.prompt_tokens
            cached_total += c.usage.cached_tokens
            sessions[who] = history + c.tokens
        w.values[self._spec("cache hits % (usage)", "cache-hits", "%")] = 100.0 * cached_total / max(1, prompt_total)

    def _spec_accept(self, w: Window, salt: str) -> None:
        for shape in self.config.shapes[:2]:
            s = self.client.stream(self.doc[:shape], max_tokens=self.config.max_tokens, cache_salt=f"{salt}-s{shape}")
            w.requests += 1
            w.generated += s.usage.completion_tokens

    # -- one repeat

    def repeat(self, *, record: bool = True) -> None:
        """One repeat of every check (``record=False``: a warm-up, not kept)."""
        for check in self.config.checks:
            self.check(check, record=record)
        self.end_repeat(record=record)

    def check(self, check: str, *, record: bool = True) -> None:
        """One check of the current repeat."""
        if self._t0 is None:
            self._t0 = time.monotonic()
        if check in self.samples.skipped:
            return
        if check == "spec-accept" and not self.samples.has_metrics:
            self.samples.skipped[check] = "the server has no /metrics: no speculative-decoding counters to read"
            return
        idx = self._repeat
        if self._salt is None:
            self._salt = new_salt(f"serving-r{idx}" if record else "serving-warmup")
        runners: dict[str, Callable[[Window, str], None]] = {
            "decode": self._decode,
            "concurrent": self._concurrent,
            "ttft-resume": self._ttft,
            "cache-hits": self._cache_hits,
            "spec-accept": self._spec_accept,
        }
        run, tag = runners[check], f"{self._salt}-{check}"
        try:
            w = self._window(lambda win: run(win, tag))
        except (ServerRejected, BadResponse) as exc:
            raise ServingError(f"{check}: {exc}") from exc
        if check == "cache-hits" and w.counters.get("cache_queries"):
            name = self._spec("cache hits % (/metrics)", "cache-hits", "%")
            w.values[name] = 100.0 * w.counters.get("cache_hits", 0.0) / w.counters["cache_queries"]
        if check == "spec-accept":
            draft = w.counters.get("spec_draft", 0.0)
            if not draft:
                self.samples.skipped[check] = (
                    "the server's /metrics shows no speculative-decoding drafts (not enabled?)"
                )
                return
            w.values[self._spec("spec acceptance %", "spec-accept", "%")] = (
                100.0 * w.counters.get("spec_accepted", 0.0) / draft
            )
            drafts = w.counters.get("spec_drafts", 0.0)
            if drafts:
                w.values[self._spec("spec mean accepted length", "spec-accept", "tokens")] = (
                    1.0 + w.counters.get("spec_accepted", 0.0) / drafts
                )
        if record:
            self.samples.add(idx, check, w, self.specs)

    def end_repeat(self, *, record: bool = True) -> None:
        self._salt = None
        if record:
            self._repeat += 1
            self.samples.repeats = self._repeat
            if self._t0 is not None:
                self.samples.seconds = time.monotonic() - self._t0


def measure_alone(meter: Meter, config: ServingConfig, session: str) -> ServingSamples:
    """Warm-ups, then ``repeats`` repeats of every check on one engine."""
    meter.samples.session = session
    for _ in range(config.warmup):
        meter.repeat(record=False)
    for _ in range(config.repeats):
        meter.repeat()
    return meter.samples


def measure_paired(a: Meter, b: Meter, config: ServingConfig, session: str) -> tuple[ServingSamples, ServingSamples]:
    """Both engines measured check by check, in turn: a machine that slows down for a few seconds
    slows both sides of the same check alike, and a pair of samples is seconds apart. Each check
    alternates which side goes first from one repeat to the next (AB, BA, ...), whatever the number
    of checks: going first or second is then no side's lot."""
    a.samples.session = b.samples.session = session
    for _ in range(config.warmup):
        a.repeat(record=False)
        b.repeat(record=False)
    for r in range(config.repeats):
        for j, check in enumerate(config.checks):
            first, second = (a, b) if (r + j) % 2 == 0 else (b, a)
            first.check(check)
            second.check(check)
        a.end_repeat()
        b.end_repeat()
    return a.samples, b.samples


# --------------------------------------------------------------------------- verdicts


@dataclass
class Comparison:
    """A candidate's serving samples against a baseline's: one verdict per metric both measured."""

    verdicts: list[RatioVerdict]
    notes: list[str] = field(default_factory=list)
    paired: bool = False

    @property
    def regressions(self) -> list[RatioVerdict]:
        return [v for v in self.verdicts if v.verdict == "regression"]

    @property
    def improvements(self) -> list[RatioVerdict]:
        return [v for v in self.verdicts if v.verdict == "improvement"]

    def to_json(self) -> dict[str, Any]:
        return {"paired": self.paired, "verdicts": [v.to_json() for v in self.verdicts], "notes": self.notes}


def compare(candidate: ServingSamples, baseline: ServingSamples, config: ServingConfig) -> Comparison:
    """Per metric: the ratio, its exact 95% interval and the verdict (stats.ratio_verdict)."""
    paired = bool(candidate.session) and candidate.session == baseline.session
    out = Comparison([], paired=paired)
    for name, spec in candidate.metrics.items():
        if name not in baseline.metrics:
            out.notes.append(f"{name}: not in the baseline")
            continue
        c, b = candidate.clean(name), baseline.clean(name)
        if paired:
            both = sorted({i for i, _ in c} & {i for i, _ in b})
            cv = [v for i, v in c if i in both]
            bv = [v for i, v in b if i in both]
        else:
            cv, bv = [v for _, v in c], [v for _, v in b]
        if min(len(cv), len(bv)) < MIN_CLEAN:
            out.notes.append(
                f"{name}: only {min(len(cv), len(bv))} repeat(s) without foreign traffic; no verdict "
                f"(needs {MIN_CLEAN})"
            )
            continue
        if max(len(cv), len(bv)) > MAX_SAMPLES:
            out.notes.append(f"{name}: more than {MAX_SAMPLES} samples on a side; no verdict")
            continue
        if not reaches(len(cv), len(bv), paired=paired):
            out.notes.append(
                f"{name}: {len(cv)} against {len(bv)} {'paired ' if paired else ''}repeat(s) admit no 95% "
                f"interval (paired: at least 6; unpaired: e.g. 3 against 5); within noise by default"
            )
        out.verdicts.append(
            ratio_verdict(
                name,
                cv,
                bv,
                better=spec.better,
                unit=spec.unit,
                tolerance=float(config.tolerances.get(spec.check, config.tolerance)),
                paired=paired,
            )
        )
    for side, s in (("candidate", candidate), ("baseline", baseline)):
        for f in s.foreign:
            out.notes.append(f"foreign traffic on the {side} in repeat {f['repeat'] + 1} ({f['check']}): {f['why']}")
        for check, why in s.skipped.items():
            out.notes.append(f"{check} skipped on the {side}: {why}")
    return out


# --------------------------------------------------------------------------- stored baselines

BASELINE_FORMAT = "patchset-serving-baseline"
MAX_BASELINE = 16 * 1024 * 1024


def load_serving_baseline(path: Path) -> dict[str, ServingSamples]:
    """``{"<patch>/<test>": samples}`` from a file ``--save-baseline`` (or the gate) wrote."""
    try:
        with open(path, "rb") as fh:
            raw = fh.read(MAX_BASELINE + 1)
    except FileNotFoundError:
        raise InputError(f"{path}: serving baseline not found", hint="write one with --save-baseline FILE") from None
    except OSError as exc:
        raise InputError(f"{path}: cannot read the serving baseline: {exc.strerror or exc}") from None
    if len(raw) > MAX_BASELINE:
        raise InputError(f"{path}: the serving baseline is larger than {MAX_BASELINE} bytes")
    try:
        doc = json.loads(raw)
    except ValueError as exc:
        raise InputError(f"{path}: the serving baseline is not JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != BASELINE_FORMAT or not isinstance(doc.get("tests"), dict):
        raise InputError(
            f"{path}: not a serving baseline (expected {{'format': {BASELINE_FORMAT!r}, 'tests': {{...}}}})",
            hint="write one with `patchset verify --save-baseline FILE`",
        )
    out: dict[str, ServingSamples] = {}
    for name, entry in doc["tests"].items():
        try:
            out[str(name)] = ServingSamples.from_json(entry["samples"])
        except (KeyError, TypeError, ValueError, AttributeError) as exc:
            raise InputError(
                f"{path}: tests.{name}: not a serving measurement ({exc.__class__.__name__}: {exc})"
            ) from None
    return out


def write_serving_baseline(path: Path, tests: dict[str, ServingSamples], *, target: str, note: str = "") -> None:
    """Store serving samples per test, atomically (``load_serving_baseline`` reads them)."""
    doc = {
        "format": BASELINE_FORMAT,
        "target": target,
        "written": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "note": note,
        "tests": {name: {"samples": s.to_json()} for name, s in sorted(tests.items())},
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic.write_text(path, json.dumps(doc, indent=1, sort_keys=True) + "\n")
