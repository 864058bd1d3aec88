"""What a ``check longctx`` run found: each measurement against its bar, each check, the run.

Why this module exists: the checks fill these records, the terminal view (``verify.longctx.view``)
and the per-patch tests (``verify.longctx.runs``) read them; JSON has no NaN, so ``to_dict`` cleans.
"""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, field
from typing import Any

from patchset.errors import EXIT_FINDING, EXIT_OK
from patchset.text import json_fields
from patchset.verify.longctx.params import Lengths, Thresholds


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
            **json_fields(self, "ok url model mode"),
            "seconds": round(self.seconds, 3),
            **json_fields(self, "server baseline"),
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
