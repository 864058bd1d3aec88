"""The inputs of the long-context checks: which checks, prompt lengths, bars, recorded baselines.

Why this module exists: the checks (``verify.longctx.checks``), the runner (``verify.longctx``), the
per-patch tests (``verify.longctx.runs``: a test's parameters and its result-cache key) and the
reports read these; ``METHOD`` versions how the checks measure (a change re-measures cached results).
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from patchset.errors import InputError
from patchset.verify import Word

CHECKS = ("causality", "resume", "cached", "rescore", "reference", "copy")
DEFAULT_CHECKS = ("causality", "resume", "cached", "rescore")
CONTROLLED = ("causality", "resume", "rescore")  # checks whose bar may come from a control
BASELINE_DIR = Path(__file__).resolve().parents[1] / "baselines"
DEFAULT_BASELINE = BASELINE_DIR / "cpu-vllm-0.30.0.json"
METHOD = 1  # how the checks measure; part of verify's result-cache key (a change re-measures)


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

        for name in (f for f in self.__dataclass_fields__ if f not in ("causal", "resume")):
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


class Mode(Word):
    """How a drift is judged."""

    FIXED = "fixed"  # against a fixed bar (a deterministic engine)
    CONTROL = "control"  # against a multiple of the drift between two sends of the same request


@dataclass
class Thresholds:
    """How a drift is judged. ``bar`` returns the largest drift that passes."""

    mode: Mode = Mode.FIXED
    fixed: dict[str, float] = field(default_factory=lambda: dict(FIXED_BARS))
    multiple: float = 2.0
    floor: float = 1e-4

    def __post_init__(self) -> None:
        if self.mode not in tuple(Mode):
            raise InputError(f"threshold mode must be 'fixed' or 'control', got {self.mode!r}")
        self.mode = Mode(self.mode)
        if self.multiple <= 0 or self.floor < 0:
            raise InputError(f"control multiple must be > 0 and floor >= 0 (got {self.multiple}, {self.floor})")
        self.fixed = {**FIXED_BARS, **self.fixed}

    def uses_control(self, check: str) -> bool:
        return self.mode == Mode.CONTROL and check in CONTROLLED

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


@dataclass
class LongctxRun:
    """One run of the long-context suite against the server at ``url``.

    ``checks`` default to causality, resume, cached, rescore (and reference with a
    ``reference_model``); ``mode`` "fixed" or "control" (unless ``thresholds``); ``baseline`` a JSON
    of ``cached`` cases (default: the recorded CPU vLLM 0.30.0 one); ``reference_python`` the
    reference pass's interpreter; ``token_range``, ``top_k``, ``measure_control``, ``timeout`` (s)."""

    url: str
    model: str | None = None
    checks: Sequence[str] | None = None
    lengths: Lengths | Mapping[str, Any] | None = None
    mode: Mode = Mode.FIXED
    thresholds: Thresholds | None = None
    baseline: Path | str | None = None
    reference_model: Path | str | None = None
    reference_python: Path | str | None = None
    seed: int = 0
    token_range: tuple[int, int] = (100, 1000)
    top_k: int = 5
    measure_control: bool = False
    timeout: float = 600.0
