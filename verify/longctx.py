"""Long-context correctness checks past 2,048 tokens against any OpenAI-compatible completions server.

Why this module exists: three upstream attention/KV-cache bugs in this project's history only showed
past 2,048 tokens, and the maintainer checked for them by hand. These checks send token-id prompts to
``/v1/completions`` and compare numbers the server returns with numbers it must agree with:

* ``causality`` — prompt logprobs of the first N tokens of a long prompt equal those of the N-token
  prompt alone, for N on both sides of 2,048 (a later token must never change an earlier logprob);
* ``resume``    — the first generated token's top-k logprobs with a cold prefix cache (fresh
  ``cache_salt``) equal those after warming a prefix of 1,024/2,048/3,072/4,096 tokens (a mid-block
  resume: the resumed prompt is the prefix plus a few tokens). vLLM never reads the prefix cache for
  requests that ask for ``prompt_logprobs``, so generated-token logprobs are compared;
* ``cached``    — ``usage.prompt_tokens_details.cached_tokens`` of those resumes against a recorded
  baseline (``verify/baselines/*.json``);
* ``rescore``   — logprobs of a greedy reply that crosses position 2,048 equal those of a clean
  prefill of the same tokens (decode and prefill must read the same KV);
* ``reference`` — server prompt logprobs against a transformers float32 forward pass of the same weights;
* ``copy``      — a long-document probe for trained models: a repeated passage longer than 2,048 tokens
  must become near-free to predict the second time: mean NLL per token of the second copy over that
  of the first must stay under 0.25 (SmolLM2-135M on random tokens: ~1.4 / ~9.9 nats).

Thresholds: ``fixed`` compares each drift to a fixed bar (right for a deterministic engine, e.g. vLLM on
CPU); ``control`` resends the same request, measures the drift between the two sends (the control) and
fails when drift > multiple x control (the maintainer's "2x the control" rule; the control is the
largest one measured over the check's cases, and a floor keeps a zero control from making the bar zero). ``reference``, ``copy`` and ``cached`` always use their fixed rule.
A server that answers a long prompt with an HTTP error FAILS the check; an unreachable server raises
``ServerUnreachable`` (exit 2).
"""

from __future__ import annotations

import json
import math
import random
import time
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from patchset.errors import EXIT_FINDING, EXIT_OK, InputError
from patchset.verify.openai_client import BadResponse, Completion, CompletionsClient, ServerRejected, new_salt

CHECKS = ("causality", "resume", "cached", "rescore", "reference", "copy")
DEFAULT_CHECKS = ("causality", "resume", "cached", "rescore")
CONTROLLED = ("causality", "resume", "rescore")  # checks whose bar may come from a control
BASELINE_DIR = Path(__file__).resolve().parent / "baselines"
DEFAULT_BASELINE = BASELINE_DIR / "cpu-vllm-0.30.0.json"
BIN = 256  # tokens per bin in per-position summaries
METHOD = 1  # how the checks measure; part of verify's result-cache key (a change re-measures)


# ------------------------------------------------------------------------------------------ inputs


@dataclass(frozen=True)
class Lengths:
    """Prompt lengths (tokens) each check uses. ``boundary`` is the position the checks straddle."""

    total: int = 4096
    causal: tuple[int, ...] = (1000, 2048, 3000)
    resume: tuple[int, ...] = (1024, 2048, 3072, 4096)
    resume_tail: int = 37
    rescore_prompt: int = 2000
    rescore_reply: int = 96
    reference: int = 4096
    copy_passage: int = 2500
    boundary: int = 2048

    def validate(self) -> None:
        def bad(msg: str) -> InputError:
            return InputError(f"lengths: {msg}", hint="lengths must be positive token counts")

        for name in (
            "total",
            "resume_tail",
            "rescore_prompt",
            "rescore_reply",
            "reference",
            "copy_passage",
            "boundary",
        ):
            if int(getattr(self, name)) <= 0:
                raise bad(f"{name} must be > 0, got {getattr(self, name)}")
        if not self.causal or any(n <= 1 or n >= self.total for n in self.causal):
            raise bad(f"causal lengths {list(self.causal)} must each be in 2..{self.total - 1} (< total)")
        if not self.resume or any(n <= 0 for n in self.resume):
            raise bad(f"resume lengths {list(self.resume)} must be > 0")

    def doc_tokens(self) -> int:
        return max(self.total, max(self.resume) + self.resume_tail, self.rescore_prompt, self.reference)

    @classmethod
    def coerce(cls, value: Lengths | Mapping[str, Any] | None) -> Lengths:
        if value is None:
            out = cls()
        elif isinstance(value, Lengths):
            out = value
        elif isinstance(value, Mapping):
            known = set(cls.__dataclass_fields__)
            unknown = set(value) - known
            if unknown:
                raise InputError(f"lengths: unknown key(s) {sorted(unknown)}; known: {sorted(known)}")
            conv: dict[str, Any] = {
                k: tuple(int(x) for x in v) if k in ("causal", "resume") else int(v) for k, v in value.items()
            }
            out = cls(**conv)
        else:
            raise InputError(f"lengths must be a Lengths or a mapping, got {type(value).__name__}")
        out.validate()
        return out


FIXED_BARS: dict[str, float] = {
    "causality": 1e-3,  # max |logprob diff|, nats
    "resume": 1e-3,
    "rescore": 1e-3,
    "reference": 2e-2,
    "copy": 0.25,  # mean NLL per token of the second copy / of the first copy
}


@dataclass
class Thresholds:
    """How a drift is judged. ``bar`` returns the largest drift that passes."""

    mode: str = "fixed"  # "fixed" | "control"
    fixed: dict[str, float] = field(default_factory=lambda: dict(FIXED_BARS))
    multiple: float = 2.0
    floor: float = 1e-4

    def __post_init__(self) -> None:
        if self.mode not in ("fixed", "control"):
            raise InputError(f"threshold mode must be 'fixed' or 'control', got {self.mode!r}")
        if self.multiple <= 0 or self.floor < 0:
            raise InputError(f"control multiple must be > 0 and floor >= 0 (got {self.multiple}, {self.floor})")
        merged = dict(FIXED_BARS)
        merged.update(self.fixed)
        self.fixed = merged

    def uses_control(self, check: str) -> bool:
        return self.mode == "control" and check in CONTROLLED

    def bar(self, check: str, control: float | None = None) -> float:
        """The largest passing drift; NaN in control mode when no finite control was measured."""
        if self.uses_control(check):
            if control is None or not math.isfinite(control):
                return math.nan
            return max(self.multiple * control, self.floor)
        return self.fixed[check]

    def passes(self, check: str, drift: float | None, control: float | None = None) -> bool:
        bar = self.bar(check, control)
        if drift is None or math.isnan(drift) or math.isnan(bar):
            return False
        return drift <= bar


# ------------------------------------------------------------------------------------------ results


@dataclass
class Measurement:
    """One number compared with its bar. ``value`` None means the server gave no answer (a failure)."""

    case: str
    metric: str
    value: float | int | None
    ok: bool
    bar: float | int | None = None
    control: float | None = None
    details: dict[str, Any] = field(default_factory=dict)


@dataclass
class CheckResult:
    """One long-context check: its verdict and what it measured."""

    name: str
    ok: bool
    measurements: list[Measurement] = field(default_factory=list)
    error: str | None = None
    skipped: str | None = None
    seconds: float = 0.0


@dataclass
class LongctxReport:
    """A ``check longctx`` run: the server, the model and every check."""

    url: str
    model: str
    mode: str
    lengths: Lengths
    thresholds: Thresholds
    results: list[CheckResult]
    seconds: float
    server: dict[str, Any] = field(default_factory=dict)
    baseline: str | None = None

    @property
    def ok(self) -> bool:
        return all(r.ok for r in self.results if r.skipped is None)

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.ok else EXIT_FINDING

    def result(self, name: str) -> CheckResult:
        for res in self.results:
            if res.name == name:
                return res
        raise KeyError(name)

    def to_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "url": self.url,
            "model": self.model,
            "mode": self.mode,
            "seconds": round(self.seconds, 3),
            "server": self.server,
            "baseline": self.baseline,
            "lengths": asdict(self.lengths),
            "thresholds": asdict(self.thresholds),
            "checks": [_clean(asdict(r)) for r in self.results],
        }

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent, sort_keys=False, allow_nan=False)


def fmt_number(value: Any) -> str:
    """A measured number for people: 3 significant digits, ``-`` for none, ``inf``."""
    if value is None:
        return "-"
    if isinstance(value, float):
        if value == 0:
            return "0"
        if math.isinf(value):
            return "inf"
        return f"{value:.3g}" if abs(value) < 1e4 else f"{value:.0f}"
    return str(value)


def _clean(obj: Any) -> Any:
    """JSON has no NaN/inf: turn them into strings so the report stays valid JSON."""
    if isinstance(obj, float):
        if math.isnan(obj):
            return "nan"
        if math.isinf(obj):
            return "inf" if obj > 0 else "-inf"
        return obj
    if isinstance(obj, dict):
        return {str(k): _clean(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_clean(v) for v in obj]
    return obj


# ------------------------------------------------------------------------------------------ numbers


def make_document(n_tokens: int, *, seed: int = 0, low: int = 100, high: int = 1000) -> list[int]:
    """Deterministic pseudo-random token ids in [low, high): the same seed gives the same document."""
    if not 0 <= low < high:
        raise InputError(f"token range [{low}, {high}) is empty or negative")
    rng = random.Random(seed)
    return [rng.randrange(low, high) for _ in range(n_tokens)]


def max_abs_diff(a: Sequence[float | None], b: Sequence[float | None], start: int = 0) -> tuple[float, int]:
    """Largest |a[i] - b[i]| over positions where both are numbers, and its position (-1 if none).

    A position where exactly one side is missing counts as an infinite drift."""
    worst, where = 0.0, -1
    for i in range(start, min(len(a), len(b))):
        x, y = a[i], b[i]
        if x is None and y is None:
            continue
        d = math.inf if (x is None or y is None) else abs(float(x) - float(y))
        if math.isnan(d):
            d = math.inf
        if d > worst or where < 0:
            worst, where = d, i
    return worst, where


def binned_max(a: Sequence[float | None], b: Sequence[float | None], bin_size: int = BIN) -> list[float]:
    """Max |a-b| per bin of ``bin_size`` positions: shows where a drift starts (e.g. at 2,048)."""
    out: list[float] = []
    n = min(len(a), len(b))
    for lo in range(0, n, bin_size):
        worst, _ = max_abs_diff(a[lo : lo + bin_size], b[lo : lo + bin_size])
        out.append(worst)
    return out


def topk_drift(a: Mapping[int, float], b: Mapping[int, float]) -> float:
    """Max |a[t] - b[t]| over the union of both top-k sets.

    A token missing from one side's top-k is compared with that side's smallest listed logprob (its
    true value is at most that), which gives a lower bound on the drift for that token."""
    if not a or not b:
        return math.inf
    floor_a, floor_b = min(a.values()), min(b.values())
    worst = 0.0
    for tok in set(a) | set(b):
        if tok in a and tok in b:
            d = abs(a[tok] - b[tok])
        elif tok in a:
            d = max(0.0, a[tok] - floor_b)
        else:
            d = max(0.0, b[tok] - floor_a)
        worst = max(worst, d)
    return worst


def _top1(top: Mapping[int, float]) -> int | None:
    return max(top, key=lambda t: top[t]) if top else None


# ------------------------------------------------------------------------------------------ baselines


@dataclass(frozen=True)
class CachedCase:
    """A prefix-cache case of a baseline: tokens warmed, prompted and reported cached."""

    case: str
    warm_tokens: int
    prompt_tokens: int
    cached_tokens: int


def load_baseline(path: Path | str) -> tuple[dict[str, Any], list[CachedCase]]:
    """Read a baseline JSON file; its ``cached`` list gives warm/prompt lengths and expected cached tokens."""
    path = Path(path)
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError as exc:
        raise InputError(f"{path}: baseline file not found", hint=f"recorded baselines live in {BASELINE_DIR}") from exc
    except json.JSONDecodeError as exc:
        raise InputError(f"{path}:{exc.lineno}: baseline is not valid JSON: {exc.msg}") from exc
    cases = []
    for i, item in enumerate(data.get("cached") or []):
        try:
            replay = item.get("replay") or item
            case = CachedCase(
                case=str(item.get("case") or item.get("session") or f"case{i}"),
                warm_tokens=int(replay["warm_tokens"]),
                prompt_tokens=int(replay["prompt_tokens"]),
                cached_tokens=int(item["cached_tokens"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(
                f"{path}: cached[{i}] needs integer warm_tokens, prompt_tokens and cached_tokens "
                f"(directly or under 'replay'): {exc}"
            ) from exc
        if case.prompt_tokens < case.warm_tokens or case.warm_tokens <= 0:
            raise InputError(f"{path}: cached[{i}]: prompt_tokens must be >= warm_tokens > 0")
        cases.append(case)
    if not cases:
        raise InputError(f"{path}: baseline has no 'cached' cases")
    return data, cases


# ------------------------------------------------------------------------------------------ the run


class _Run:
    """State shared by the checks of one run: client, document, thresholds, memoised warm resumes."""

    def __init__(
        self,
        client: CompletionsClient,
        lengths: Lengths,
        thresholds: Thresholds,
        *,
        seed: int,
        token_range: tuple[int, int],
        top_k: int,
        measure_control: bool,
        extra_doc: int = 0,
    ) -> None:
        self.client = client
        self.lengths = lengths
        self.th = thresholds
        self.seed = seed
        self.token_range = token_range
        self.top_k = top_k
        self.measure_control = measure_control or thresholds.mode == "control"
        self.doc = make_document(
            max(lengths.doc_tokens(), extra_doc), seed=seed, low=token_range[0], high=token_range[1]
        )
        self._warm: dict[tuple[int, int], tuple[Completion, Completion]] = {}

    def prompt_lps(self, n: int, tag: str) -> list[float | None]:
        prompt = self.doc[:n]
        comp = self.client.complete(prompt, max_tokens=1, prompt_logprobs=1, cache_salt=new_salt(tag))
        lps = comp.prompt_token_logprobs(prompt)
        if len(comp.prompt_logprobs) < n:
            raise BadResponse(f"server returned {len(comp.prompt_logprobs)} prompt logprobs for {n} prompt tokens")
        return lps

    def warm_resume(self, warm: int, prompt: int) -> tuple[Completion, Completion]:
        """Send doc[:warm], then doc[:prompt] under the same salt: (warm answer, resumed answer)."""
        key = (warm, prompt)
        if key not in self._warm:
            salt = new_salt(f"warm{warm}")
            first = self.client.complete(self.doc[:warm], max_tokens=1, logprobs=self.top_k, cache_salt=salt)
            second = self.client.complete(self.doc[:prompt], max_tokens=1, logprobs=self.top_k, cache_salt=salt)
            self._warm[key] = (first, second)
        return self._warm[key]

    def ensure_doc(self, n: int) -> None:
        if len(self.doc) < n:
            self.doc = make_document(n, seed=self.seed, low=self.token_range[0], high=self.token_range[1])


def _pool_control(th: Thresholds, check: str, measurements: list[Measurement]) -> None:
    """In control mode, judge every case of a check against the largest control of that check.

    One resend per case is a noisy estimate of the engine's noise (a max over a few top-k logprobs);
    pooling the cases' controls gives a steadier bar. Each case keeps its own control in the report."""
    if not th.uses_control(check):
        return
    controls = [m.control for m in measurements if m.control is not None and math.isfinite(m.control)]
    if not controls:
        return
    pooled = max(controls)
    for m in measurements:
        if m.value is None:
            continue
        m.bar = th.bar(check, pooled)
        m.ok = th.passes(check, float(m.value), pooled)
        m.details["pooled_control"] = pooled


def _failed_case(case: str, metric: str, exc: Exception) -> Measurement:
    return Measurement(case=case, metric=metric, value=None, ok=False, details={"error": str(exc)})


def _judged(
    run: _Run, check: str, case: str, metric: str, drift: float, control: float | None, details: dict[str, Any]
) -> Measurement:
    """A drift held against the check's bar: fixed, or (control mode) a multiple of ``control``."""
    return Measurement(
        case=case,
        metric=metric,
        value=drift,
        control=control,
        bar=run.th.bar(check, control),
        ok=run.th.passes(check, drift, control),
        details=details,
    )


def _check_causality(run: _Run) -> list[Measurement]:
    L = run.lengths
    out: list[Measurement] = []
    try:
        full = run.prompt_lps(L.total, "causal-full")
    except (ServerRejected, BadResponse) as exc:
        return [_failed_case(f"N={n} of {L.total}", "max |dlogprob|", exc) for n in L.causal]
    for n in L.causal:
        case = f"N={n} of {L.total}"
        try:
            part = run.prompt_lps(n, f"causal{n}")
            control = None
            if run.measure_control:
                again = run.prompt_lps(n, f"causal{n}-control")
                control, _ = max_abs_diff(part, again)
        except (ServerRejected, BadResponse) as exc:
            out.append(_failed_case(case, "max |dlogprob|", exc))
            continue
        drift, where = max_abs_diff(full[:n], part)
        details = {
            "worst_position": where,
            "positions": n - 1,
            "past_boundary": n > L.boundary,
            "binned_max": binned_max(full[:n], part),
        }
        out.append(_judged(run, "causality", case, "max |dlogprob|", drift, control, details))
    return out


def _check_resume(run: _Run) -> list[Measurement]:
    L = run.lengths
    out: list[Measurement] = []
    for warm in L.resume:
        prompt_len = warm + L.resume_tail
        case = f"warm {warm} + {L.resume_tail}"
        try:
            cold = run.client.complete(
                run.doc[:prompt_len], max_tokens=1, logprobs=run.top_k, cache_salt=new_salt(f"cold{warm}")
            )
            _, resumed = run.warm_resume(warm, prompt_len)
            control = None
            if run.measure_control:
                cold2 = run.client.complete(
                    run.doc[:prompt_len], max_tokens=1, logprobs=run.top_k, cache_salt=new_salt(f"cold{warm}-control")
                )
                control = topk_drift(cold.top_logprobs[0], cold2.top_logprobs[0])
            cold_top, warm_top = cold.top_logprobs[0], resumed.top_logprobs[0]
        except (ServerRejected, BadResponse, IndexError) as exc:
            out.append(
                _failed_case(
                    case,
                    "top-k drift",
                    exc
                    if not isinstance(exc, IndexError)
                    else BadResponse("no top_logprobs for the first generated token"),
                )
            )
            continue
        details = {
            "cached_tokens": resumed.usage.cached_tokens,
            "prompt_tokens": prompt_len,
            "note": (
                None
                if resumed.usage.cached_tokens
                else "no prefix-cache hit reported: this case compared two cold prefills"
            ),
            "top1_cold": _top1(cold_top),
            "top1_warm": _top1(warm_top),
            "cold_top": cold_top,
            "warm_top": warm_top,
        }
        out.append(_judged(run, "resume", case, "top-k drift", topk_drift(cold_top, warm_top), control, details))
    return out


def _check_cached(run: _Run, cases: Sequence[CachedCase]) -> list[Measurement]:
    out: list[Measurement] = []
    run.ensure_doc(max(c.prompt_tokens for c in cases))
    for c in cases:
        case = f"{c.case}: warm {c.warm_tokens} -> {c.prompt_tokens}"
        try:
            first, second = run.warm_resume(c.warm_tokens, c.prompt_tokens)
        except (ServerRejected, BadResponse) as exc:
            out.append(_failed_case(case, "cached_tokens", exc))
            continue
        got = second.usage.cached_tokens
        details: dict[str, Any] = {
            "expected": c.cached_tokens,
            "prompt_tokens": second.usage.prompt_tokens,
            "warm_cached_tokens": first.usage.cached_tokens,
        }
        if got is None:
            details["error"] = (
                "server reports no usage.prompt_tokens_details.cached_tokens "
                "(start vLLM with --enable-prompt-tokens-details)"
            )
        out.append(
            Measurement(
                case=case,
                metric="cached_tokens",
                value=got,
                bar=c.cached_tokens,
                ok=(got == c.cached_tokens),
                details=details,
            )
        )
    return out


def _check_rescore(run: _Run) -> list[Measurement]:
    L = run.lengths
    case = f"{L.rescore_prompt} + {L.rescore_reply} greedy"
    prompt = run.doc[: L.rescore_prompt]
    try:
        gen = run.client.complete(prompt, max_tokens=L.rescore_reply, logprobs=1, cache_salt=new_salt("gen"))
        if len(gen.tokens) != L.rescore_reply or len(gen.token_logprobs) != len(gen.tokens):
            raise BadResponse(
                f"asked for {L.rescore_reply} tokens with logprobs, got {len(gen.tokens)} tokens "
                f"and {len(gen.token_logprobs)} logprobs"
            )
        full = prompt + gen.tokens
        pre = run.client.complete(full, max_tokens=1, prompt_logprobs=1, cache_salt=new_salt("rescore"))
        rescored = pre.prompt_token_logprobs(full)[len(prompt) :]
        control = None
        same = len(gen.tokens)
        if run.measure_control:
            gen2 = run.client.complete(prompt, max_tokens=L.rescore_reply, logprobs=1, cache_salt=new_salt("gen2"))
            # compare the resend up to the first token where the greedy paths part (noise can flip a near tie)
            same = next(
                (i for i, (a, b) in enumerate(zip(gen.tokens, gen2.tokens, strict=False)) if a != b),
                min(len(gen.tokens), len(gen2.tokens)),
            )
            control = max_abs_diff(gen.token_logprobs[:same], gen2.token_logprobs[:same])[0] if same else math.nan
    except (ServerRejected, BadResponse) as exc:
        return [_failed_case(case, "max |dlogprob|", exc)]
    decoded: list[float | None] = list(gen.token_logprobs)
    drift, where = max_abs_diff(decoded, rescored)
    diffs = [None if (a is None or b is None) else abs(a - b) for a, b in zip(decoded, rescored, strict=False)]
    cross = L.boundary - len(prompt)  # index of the first reply token at position >= boundary
    before = [d for d in diffs[: max(cross, 0)] if d is not None]
    after = [d for d in diffs[max(cross, 0) :] if d is not None]
    details = {
        "worst_reply_index": where,
        "worst_position": len(prompt) + where if where >= 0 else None,
        "max_before_boundary": max(before) if before else None,
        "max_past_boundary": max(after) if after else None,
        "reply_tokens": gen.tokens,
        "per_token_diff": diffs,
        "control_tokens_compared": same if run.measure_control else None,
    }
    return [_judged(run, "rescore", case, "max |dlogprob|", drift, control, details)]


def _check_reference(run: _Run, reference: Callable[[Sequence[int]], Sequence[float | None]]) -> list[Measurement]:
    L = run.lengths
    case = f"{L.reference} tokens vs transformers fp32"
    try:
        server = run.prompt_lps(L.reference, "reference")
    except (ServerRejected, BadResponse) as exc:
        return [_failed_case(case, "max |dlogprob|", exc)]
    ref = list(reference(run.doc[: L.reference]))
    drift, where = max_abs_diff(server, ref)
    before, _ = max_abs_diff(server[: L.boundary], ref[: L.boundary])
    after, _ = max_abs_diff(server[L.boundary :], ref[L.boundary :]) if L.reference > L.boundary else (0.0, -1)
    details = {
        "worst_position": where,
        "max_before_boundary": before,
        "max_past_boundary": after,
        "binned_max": binned_max(server, ref),
        "mean_nll_server": _mean_nll(server),
        "mean_nll_reference": _mean_nll(ref),
    }
    return [_judged(run, "reference", case, "max |dlogprob|", drift, None, details)]


def _mean_nll(lps: Iterable[float | None]) -> float | None:
    vals = [-float(x) for x in lps if x is not None]
    return sum(vals) / len(vals) if vals else None


def _check_copy(run: _Run) -> list[Measurement]:
    L = run.lengths
    n = L.copy_passage
    passage = make_document(n, seed=run.seed + 7919, low=run.token_range[0], high=run.token_range[1])
    prompt = passage + passage
    case = f"passage {n} x 2"
    try:
        comp = run.client.complete(prompt, max_tokens=1, prompt_logprobs=1, cache_salt=new_salt("copy"))
    except (ServerRejected, BadResponse) as exc:
        return [_failed_case(case, "NLL 2nd/1st copy", exc)]
    lps = comp.prompt_token_logprobs(prompt)
    first = _mean_nll(lps[1:n])
    second = _mean_nll(lps[n + 1 :])  # the first token of the second copy is not predictable
    bins = [_mean_nll(lps[lo : lo + BIN]) for lo in range(0, len(lps), BIN)]
    ratio = (second / first) if (first and second is not None) else None
    bar = run.th.fixed["copy"]
    ok = ratio is not None and ratio <= bar
    return [
        Measurement(
            case=case,
            metric="NLL 2nd/1st copy",
            value=ratio,
            bar=bar,
            ok=ok,
            details={
                "nll_first_copy": first,
                "nll_second_copy": second,
                "binned_nll": bins,
                "prompt_tokens": len(prompt),
            },
        )
    ]


def run_checks(
    url: str,
    model: str | None = None,
    checks: Sequence[str] | None = None,
    lengths: Lengths | Mapping[str, Any] | None = None,
    mode: str = "fixed",
    *,
    thresholds: Thresholds | None = None,
    baseline: Path | str | None = None,
    reference_model: Path | str | None = None,
    reference_python: Path | str | None = None,
    seed: int = 0,
    token_range: tuple[int, int] = (100, 1000),
    top_k: int = 5,
    measure_control: bool = False,
    timeout: float = 600.0,
) -> LongctxReport:
    """Run the long-context checks against the server at ``url`` and return the report.

    ``checks`` defaults to causality, resume, cached, rescore (plus reference when ``reference_model``
    is given). ``mode`` is "fixed" or "control" (ignored when ``thresholds`` is given). ``baseline``
    is a JSON file with ``cached`` cases (default: the recorded CPU vLLM 0.30.0 baseline).
    Raises InputError for bad arguments and ServerUnreachable when the server cannot be reached."""
    t0 = time.monotonic()
    lengths = Lengths.coerce(lengths)
    thresholds = thresholds or Thresholds(mode=mode)
    if checks is None:
        checks = list(DEFAULT_CHECKS) + (["reference"] if reference_model else [])
    unknown = [c for c in checks if c not in CHECKS]
    if unknown or not checks:
        raise InputError(f"unknown check(s) {unknown}; known: {', '.join(CHECKS)}")
    if "reference" in checks and not reference_model:
        raise InputError(
            "the reference check needs reference_model: a local directory with the served "
            "weights (config.json + safetensors)"
        )
    if reference_model and not (Path(reference_model) / "config.json").exists():
        raise InputError(f"{reference_model}: not a model directory (no config.json)")
    baseline_path = Path(baseline) if baseline else DEFAULT_BASELINE
    cached_cases: list[CachedCase] = []
    if "cached" in checks:
        _, cached_cases = load_baseline(baseline_path)
    lo, hi = token_range
    if not 0 <= lo < hi:
        raise InputError(f"token_range {token_range} is empty")

    client = CompletionsClient(url, model, timeout=timeout)
    run = _Run(
        client,
        lengths,
        thresholds,
        seed=seed,
        token_range=(lo, hi),
        top_k=top_k,
        measure_control=measure_control,
        extra_doc=max((c.prompt_tokens for c in cached_cases), default=0),
    )

    def reference_fn(tokens: Sequence[int]) -> Sequence[float | None]:
        from patchset.verify.reference import reference_logprobs

        assert reference_model is not None  # the reference check runs only with a reference model
        return reference_logprobs(
            Path(reference_model), tokens, python=Path(reference_python) if reference_python else None
        )

    runners: dict[str, Callable[[], list[Measurement]]] = {
        "causality": lambda: _check_causality(run),
        "resume": lambda: _check_resume(run),
        "cached": lambda: _check_cached(run, cached_cases),
        "rescore": lambda: _check_rescore(run),
        "reference": lambda: _check_reference(run, reference_fn),
        "copy": lambda: _check_copy(run),
    }
    results: list[CheckResult] = []
    for name in checks:
        c0 = time.monotonic()
        measurements = runners[name]()
        _pool_control(thresholds, name, measurements)
        errors = [m.details["error"] for m in measurements if m.details.get("error")]
        results.append(
            CheckResult(
                name=name,
                ok=bool(measurements) and all(m.ok for m in measurements),
                measurements=measurements,
                error=errors[0] if errors else None,
                seconds=time.monotonic() - c0,
            )
        )
    info = client.model_info()
    return LongctxReport(
        url=client.base_url,
        model=client.model,
        mode=thresholds.mode,
        lengths=lengths,
        thresholds=thresholds,
        results=results,
        seconds=time.monotonic() - t0,
        server={"max_model_len": info.get("max_model_len"), "owned_by": info.get("owned_by")},
        baseline=str(baseline_path) if "cached" in checks else None,
    )
