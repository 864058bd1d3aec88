"""The numbers of the long-context checks: token documents and logprob drifts.

Why this module exists: pure functions, shared by the checks and by the serving measurements
(``make_document``), and tested on their own.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable, Mapping, Sequence

from patchset.errors import InputError

BIN = 256  # tokens per bin in per-position summaries


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
    n = min(len(a), len(b))
    return [max_abs_diff(a[lo : lo + bin_size], b[lo : lo + bin_size])[0] for lo in range(0, n, bin_size)]


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


def top1(top: Mapping[int, float]) -> int | None:
    return max(top, key=lambda t: top[t]) if top else None


def mean_nll(lps: Iterable[float | None]) -> float | None:
    vals = [-float(x) for x in lps if x is not None]
    return sum(vals) / len(vals) if vals else None
