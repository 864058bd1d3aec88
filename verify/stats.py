"""Verdicts that know noise: exact intervals of serving ratios and an exact test for drift counts.

A serving figure moves from run to run on the same code by 10% and more, so "slower than the
baseline" says nothing until the noise is measured (docs/serving.md):

* ratios (``ratio_verdict``): a Hodges-Lehmann estimate of the log ratio and its distribution-free
  95% interval (Wilcoxon signed-rank for paired repeats, Mann-Whitney otherwise); a regression or
  improvement only when the whole interval lies beyond the tolerance. Fewer than 6 pairs admit no
  95% interval (``reaches``).
* drift counts (``drift_verdict``): trials whose drift exceeds the bar against control
  measurements that do; a one-sided Fisher exact test says ``bug``, 80% power to see
  ``min_effect`` says ``noise``, else ``inconclusive: K more trials``.

The distributions are ``scipy.stats``'; the Hodges-Lehmann interval and Fisher's power are built
here. scipy is imported inside the functions (half a second every start would pay otherwise).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from statistics import NormalDist
from types import ModuleType
from typing import Any

import numpy as np

REGRESSION, IMPROVEMENT, NOISE = "regression", "improvement", "within noise"
BUG, DRIFT_NOISE, INCONCLUSIVE = "bug", "noise", "inconclusive"
CONFIDENCE = 0.95


# --------------------------------------------------------------------------- ratios

MAX_SAMPLES = 1000  # per side: the intervals below sort every pairwise average (n^2)
_EXACT = 200  # exact null distributions up to this many samples (a side), a normal approximation beyond


def _logs(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    if x.size == 0:
        raise ValueError("a ratio needs samples on both sides")
    if x.size > MAX_SAMPLES:
        raise ValueError(f"more than {MAX_SAMPLES} samples on one side")
    if np.isnan(x).any() or (x < 0).any():
        raise ValueError("samples must be numbers >= 0")
    with np.errstate(divide="ignore"):
        return np.log(x)


def _diff(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """log(a / b) elementwise, with 0/0 = 1 (a log of 0)."""
    with np.errstate(invalid="ignore"):
        d = a - b
    return np.where(np.isnan(d), 0.0, d)  # inf - inf: both sides 0 (or both inf): the same


def _mid(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore"):
        m = (a + b) / 2
    return np.where(np.isnan(m), 0.0, m)  # +inf and -inf: no side wins


def _largest_below(cdf: Callable[[int], float], top: int, alpha: float) -> int:
    """k = t + 1 for the largest t in [0, top] with P(T <= t) <= alpha / 2 (0: none), by bisection
    on the null's non-decreasing cdf. The relative 1e-9 keeps an exact 1/40 (e.g. 3 of C(10, 3))
    on the side the exact integer count put it."""
    bound = alpha / 2 * (1 + 1e-9)
    if cdf(0) > bound:
        return 0
    lo, hi = 0, top  # cdf(lo) <= bound; the answer lies in [lo, hi]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if cdf(mid) <= bound:
            lo = mid
        else:
            hi = mid - 1
    return lo + 1


def _scipy_stats() -> ModuleType:
    """scipy.stats, imported on first use: importing it takes about half a second, which every
    ``patchset`` start would pay (the CLI imports ``verify``), not only the runs that judge."""
    from scipy import stats

    return stats


@functools.lru_cache(maxsize=256)
def _signed_rank_cut(n: int, alpha: float) -> int:
    """k: the interval [W(k), W(M + 1 - k)] of the M = n(n+1)/2 sorted Walsh averages covers the
    centre of a symmetric distribution with probability >= 1 - alpha (the Wilcoxon signed-rank
    statistic's exact null distribution: every sign of the n ranks equally likely). 0: no such interval."""
    top = n * (n + 1) // 2
    if n > _EXACT:
        mean, sd = top / 2, math.sqrt(n * (n + 1) * (2 * n + 1) / 24)
        return max(0, math.floor(mean - _z(alpha) * sd))
    stats = _scipy_stats()

    def cdf(t: int) -> float:
        # scipy keeps the exact null private; its exact test reads it out at T+ = t: the ranks 1..n,
        # positive on a subset summing to t (greedy from the largest), no ties, no zeros
        d, rest = [], t
        for r in range(n, 0, -1):
            d.append(r if r <= rest else -r)
            rest -= r if r <= rest else 0
        return float(stats.wilcoxon(d, alternative="less", method="exact").pvalue)

    return _largest_below(cdf, top // 2, alpha)


@functools.lru_cache(maxsize=256)
def _rank_sum_cut(m: int, n: int, alpha: float) -> int:
    """k for the m*n sorted differences of two samples: the Mann-Whitney U statistic's exact null
    distribution (every assignment of the m + n ranks to the sides equally likely)."""
    if min(m, n) > _EXACT or m * n > 40_000:
        mean, sd = m * n / 2, math.sqrt(m * n * (m + n + 1) / 12)
        return max(0, math.floor(mean - _z(alpha) * sd))
    stats = _scipy_stats()
    ys = list(range(n))

    def cdf(u: int) -> float:
        # read the exact null out of scipy's exact test at U = u: the i-th x above c_i of the ys
        # (c_i = n for the first u // n, then the remainder), all values distinct
        xs, rest = [], u
        for i in range(m):
            c = min(n, rest)
            rest -= c
            xs.append(c - 1 + (i + 1) / (m + 1))
        return float(stats.mannwhitneyu(xs, ys, alternative="less", method="exact").pvalue)

    return _largest_below(cdf, m * n // 2, alpha)


def _z(alpha: float) -> float:
    """The standard normal's upper alpha/2 point."""
    return float(NormalDist().inv_cdf(1 - alpha / 2))


def reaches(n_candidate: int, n_baseline: int, *, paired: bool, confidence: float = CONFIDENCE) -> bool:
    """Can repeats this many give an interval at ``confidence`` at all? (paired: 6 or more pairs;
    unpaired: e.g. 3 against 5, 4 against 4)."""
    alpha = 1 - confidence
    if paired:
        return n_candidate == n_baseline and _signed_rank_cut(n_candidate, alpha) > 0
    return _rank_sum_cut(n_candidate, n_baseline, alpha) > 0


def ratio_interval(
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    paired: bool,
    confidence: float = CONFIDENCE,
) -> tuple[float, float, float]:
    """(ratio, low, high) of candidate / baseline: a Hodges-Lehmann estimate and its exact
    distribution-free interval, on log ratios.

    Paired: the per-repeat log ratios; the estimate is the median of their Walsh averages (every
    pair's mean, each with itself too) and the interval the Wilcoxon signed-rank one. Unpaired: every
    candidate/baseline log ratio; the median, and the Mann-Whitney interval. When the two sides are
    the same code their repeats are exchangeable, and then the interval excludes 1 in at most
    1 - confidence of the comparisons whatever the noise's size or shape: a bound by counting, not
    by resampling. Too few repeats for any such interval (fewer than 6 pairs): (ratio, 0, inf)."""
    c, b = _logs(candidate), _logs(baseline)
    alpha = 1 - confidence
    if paired:
        if c.size != b.size:
            raise ValueError("paired samples must have the same length")
        d = _diff(c, b)
        i, j = np.triu_indices(d.size)
        w = np.sort(_mid(d[i], d[j]))
        k = _signed_rank_cut(d.size, alpha)
    else:
        w = np.sort(_diff(c[:, None], b[None, :]).ravel())
        k = _rank_sum_cut(c.size, b.size, alpha)
    point = float(np.exp(_mid(w[(w.size - 1) // 2], w[w.size // 2])))  # the median, with infinities
    if k <= 0:
        return point, 0.0, math.inf
    return point, float(np.exp(w[k - 1])), float(np.exp(w[w.size - k]))


@dataclass
class RatioVerdict:
    """One metric, candidate against baseline: the median ratio, its interval and the verdict."""

    metric: str
    unit: str
    better: str  # "higher" | "lower"
    ratio: float
    low: float
    high: float
    tolerance: float
    verdict: str
    paired: bool
    candidate: list[float]
    baseline: list[float]

    def text(self) -> str:
        return (
            f"{self.metric}: {self.verdict}, ratio {fmt_ratio(self.ratio)} "
            f"[95% CI {fmt_ratio(self.low)}, {fmt_ratio(self.high)}], tolerance {self.tolerance:.0%}"
            f" ({'paired' if self.paired else 'unpaired'}, {len(self.candidate)} vs {len(self.baseline)} repeats)"
        )

    def to_json(self) -> dict:
        out = asdict(self)
        for key in ("ratio", "low", "high"):
            out[key] = json_number(out[key])
        return out


def fmt_ratio(x: float) -> str:
    if math.isinf(x):
        return "inf"
    if math.isnan(x):
        return "nan"
    return f"{x:.3f}"


def json_number(x: float) -> float | str:
    if math.isinf(x):
        return "inf" if x > 0 else "-inf"
    if math.isnan(x):
        return "nan"
    return round(x, 6)


def decide(ratio_lo: float, ratio_hi: float, tolerance: float, better: str) -> str:
    """regression / improvement when the whole interval lies beyond the tolerance, else within noise."""
    if better == "higher":
        if ratio_hi < 1 - tolerance:
            return REGRESSION
        if ratio_lo > 1 + tolerance:
            return IMPROVEMENT
    else:
        if ratio_lo > 1 + tolerance:
            return REGRESSION
        if ratio_hi < 1 - tolerance:
            return IMPROVEMENT
    return NOISE


def ratio_verdict(
    metric: str,
    candidate: Sequence[float],
    baseline: Sequence[float],
    *,
    better: str = "higher",
    unit: str = "",
    tolerance: float = 0.03,
    paired: bool = False,
) -> RatioVerdict:
    """The verdict on one metric (deterministic: the same samples give the same report)."""
    if better not in ("higher", "lower"):
        raise ValueError(f"better must be 'higher' or 'lower', got {better!r}")
    point, lo, hi = ratio_interval(candidate, baseline, paired=paired)
    return RatioVerdict(
        metric,
        unit,
        better,
        point,
        lo,
        hi,
        tolerance,
        decide(lo, hi, tolerance, better),
        paired,
        [float(x) for x in candidate],
        [float(x) for x in baseline],
    )


# --------------------------------------------------------------------------- exact tests


def _significant(p: Any, alpha: float) -> Any:
    """p <= alpha, with a p that is exactly alpha (1/20 = 1/C(6, 3)) counted as it is, not as
    floating point rounds it."""
    return p <= alpha * (1 + 1e-9)


def fisher_one_sided(k1: int, n1: int, k0: int, n0: int) -> float:
    """P(X >= k1), X hypergeometric: the chance that the first arm gets ``k1`` or more of the
    ``k1 + k0`` exceedances if both arms had the same rate (Fisher's exact test, one-sided)."""
    if not (0 <= k1 <= n1 and 0 <= k0 <= n0):
        raise ValueError("counts must lie within their trials")
    stats = _scipy_stats()
    table = [[k1, n1 - k1], [k0, n0 - k0]]
    return float(min(1.0, stats.fisher_exact(table, alternative="greater").pvalue))


def _binom_pmf(n: int, p: float) -> np.ndarray:
    stats = _scipy_stats()
    return np.asarray(stats.binom.pmf(np.arange(n + 1), n, p), dtype=float)


@functools.lru_cache(maxsize=64)
def _critical(n: int, alpha: float) -> np.ndarray:
    """crit[k1, k0]: does the one-sided Fisher test on n trials per arm reject at ``alpha``?

    One pass over the whole table: the hypergeometric pmf of every (x, m = k1 + k0) at once, its
    upper tails by a reversed cumulative sum. Cached: the region depends on n and alpha only."""
    stats = _scipy_stats()
    x = np.arange(n + 1)[:, None]
    m = np.arange(2 * n + 1)[None, :]
    rest = m - x
    valid = (rest >= 0) & (rest <= n)
    # hypergeom(2n, m, n).pmf(x) = C(n, x) C(n, m - x) / C(2n, m): three binomial(p = 1/2) pmfs,
    # whose 2^-n factors cancel, in logs (scipy's hypergeom.pmf per element takes ~35x as long on
    # the 1000-trial table trials_for_power may ask for)
    half = stats.binom.logpmf(np.arange(n + 1), n, 0.5)
    logp = half[x] + half[np.clip(rest, 0, n)] - stats.binom.logpmf(m, 2 * n, 0.5)
    pmf = np.where(valid, np.exp(np.where(valid, logp, 0.0)), 0.0)
    tail = np.cumsum(pmf[::-1], axis=0)[::-1]
    k1, k0 = np.indices((n + 1, n + 1))
    return np.asarray(_significant(tail[k1, k1 + k0], alpha))


def fisher_power(n: int, p0: float, p1: float, alpha: float = 0.05) -> float:
    """The chance that the one-sided Fisher test on n trials per arm finds rate ``p1`` above ``p0``."""
    if n <= 0:
        return 0.0
    crit = _critical(int(n), float(alpha))
    return float(_binom_pmf(n, p1) @ crit @ _binom_pmf(n, p0))


def trials_for_power(
    p0: float, p1: float, *, alpha: float = 0.05, power: float = 0.8, start: int = 1, cap: int = 1000
) -> int | None:
    """The fewest trials per arm (>= start) at which the test reaches ``power``; None beyond ``cap``."""
    if p1 <= p0:
        return None
    n = max(1, start)
    if fisher_power(n, p0, p1, alpha) >= power:
        return n
    hi = n
    while fisher_power(hi, p0, p1, alpha) < power:
        n = hi
        hi *= 2
        if hi > cap:
            if fisher_power(cap, p0, p1, alpha) >= power:
                hi = cap
                break
            return None
    lo = n  # power(lo) < target <= power(hi)
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if fisher_power(mid, p0, p1, alpha) >= power:
            hi = mid
        else:
            lo = mid
    return hi


def _trials_until_significant(p0: float, p1: float, *, alpha: float, start: int, cap: int) -> int | None:
    """The fewest trials per arm at which exceedances at the observed rates would be significant."""
    n = start
    while n <= cap:
        if _significant(fisher_one_sided(min(n, math.ceil(p1 * n)), n, math.floor(p0 * n), n), alpha):
            return n
        n += max(1, n // 10)
    return None


@dataclass
class DriftVerdict:
    """Exceedances of a repeated drift check against its control's, and what they say."""

    verdict: str  # bug | noise | inconclusive
    exceed: int
    trials: int
    control_exceed: int
    control_trials: int
    p_value: float
    power: float  # to see an excess of min_effect with these trials
    more_trials: int | None  # inconclusive: trials per arm still needed (None: more than the cap)
    alpha: float
    min_effect: float

    def text(self) -> str:
        head = (
            f"{self.exceed}/{self.trials} trials over the bar vs {self.control_exceed}/{self.control_trials} "
            f"for the control, one-sided Fisher p = {self.p_value:.3g}"
        )
        if self.verdict == BUG:
            return f"bug: {head} <= {self.alpha}"
        if self.verdict == DRIFT_NOISE:
            return (
                f"noise: {head}; {self.power:.0%} power to see {self.min_effect:.3g} more exceedances per trial "
                "than the control, and fewer were seen"
            )
        more = f"{self.more_trials} more trials" if self.more_trials is not None else "many more trials"
        return f"inconclusive: {more} ({head}; power {self.power:.0%})"

    @property
    def label(self) -> str:
        if self.verdict == INCONCLUSIVE:
            return f"inconclusive: {self.more_trials} more trials" if self.more_trials is not None else "inconclusive"
        return self.verdict

    def to_json(self) -> dict:
        out = asdict(self)
        out["label"] = self.label
        out["text"] = self.text()
        return out


def drift_verdict(
    exceed: int,
    trials: int,
    control_exceed: int,
    control_trials: int,
    *,
    alpha: float = 0.05,
    power: float = 0.8,
    min_effect: float = 0.125,
    cap: int = 1000,
) -> DriftVerdict:
    """bug / noise / inconclusive from exceedance counts (see the module docstring)."""
    if trials <= 0 or control_trials <= 0:
        raise ValueError("a drift verdict needs trials on both sides")
    p = fisher_one_sided(exceed, trials, control_exceed, control_trials)
    p0 = control_exceed / control_trials
    p1 = exceed / trials
    n = min(trials, control_trials)
    target = min(1.0, p0 + min_effect)
    pw = fisher_power(n, p0, target, alpha)
    if _significant(p, alpha):
        return DriftVerdict(BUG, exceed, trials, control_exceed, control_trials, p, pw, None, alpha, min_effect)
    if pw >= power and p1 - p0 < min_effect:
        return DriftVerdict(DRIFT_NOISE, exceed, trials, control_exceed, control_trials, p, pw, 0, alpha, min_effect)
    if p1 - p0 >= min_effect:  # a large excess, not yet significant: trials until that rate would be
        want = _trials_until_significant(p0, p1, alpha=alpha, start=n + 1, cap=cap)
    else:  # too few trials to rule out a min_effect excess
        want = trials_for_power(p0, target, alpha=alpha, power=power, start=n, cap=cap)
    more = None if want is None else max(1, want - n)
    return DriftVerdict(INCONCLUSIVE, exceed, trials, control_exceed, control_trials, p, pw, more, alpha, min_effect)
