"""The verify statistics (``patchset.verify.stats``) against exact oracles: the intervals' cut points
against the signed-rank and rank-sum null distributions counted here in exact fractions, the drift
test's p-values and power against ``scipy.stats.fisher_exact`` on every outcome (arms of unequal
size too), the trials it asks for against a search with that oracle, and every verdict's words."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as sps

from patchset.verify.stats import (
    BUG,
    DRIFT_NOISE,
    IMPROVEMENT,
    INCONCLUSIVE,
    NOISE,
    REGRESSION,
    decide,
    drift_verdict,
    fisher_one_sided,
    fisher_power,
    fmt_ratio,
    json_number,
    ratio_interval,
    ratio_verdict,
    reaches,
    trials_for_power,
)

ALPHA = Fraction(5, 100)


def _signed_rank_counts(n: int) -> list[int]:
    """How many of the 2^n sign patterns of the ranks 1..n give T+ = t, for every t."""
    counts = [1]
    for r in range(1, n + 1):
        nxt = counts + [0] * r
        for t, c in enumerate(counts):
            nxt[t + r] += c
        counts = nxt
    return counts


def _rank_sum_counts(m: int, n: int) -> list[int]:
    """How many of the C(m + n, m) rank assignments give U = u, for every u (a partition count)."""
    # f[i][j][u]: i x-values, j y-values; U counts (x, y) pairs with x above y
    f = {(0, 0): [1]}
    for i in range(m + 1):
        for j in range(n + 1):
            if (i, j) == (0, 0):
                continue
            out = [0] * (i * j + 1)
            if i > 0:  # the largest value is an x: above all j ys
                for u, c in enumerate(f[(i - 1, j)]):
                    out[u + j] += c
            if j > 0:
                for u, c in enumerate(f[(i, j - 1)]):
                    out[u] += c
            f[(i, j)] = out
    return f[(m, n)]


def _cut(counts: list[int]) -> int:
    """k = t + 1 for the largest t with P(T <= t) <= alpha / 2, in exact fractions (0: none)."""
    total, acc, k = sum(counts), 0, 0
    for t, c in enumerate(counts):
        acc += c
        if Fraction(acc, total) <= ALPHA / 2:
            k = t + 1
        else:
            break
    return k


def _spread(n: int, seed: int) -> np.ndarray:
    return 100 * np.exp(np.random.default_rng(seed).normal(0, 0.2, n))


@pytest.mark.parametrize("n", [5, 6, 7, 8, 9, 10, 12, 15, 20, 26])
def test_the_paired_interval_cuts_where_the_signed_rank_null_says(n: int) -> None:
    c, b = _spread(n, n), _spread(n, 100 + n)
    d = np.log(c) - np.log(b)
    w = np.sort([(d[i] + d[j]) / 2 for i in range(n) for j in range(i, n)])
    k = _cut(_signed_rank_counts(n))
    point, lo, hi = ratio_interval(c, b, paired=True)
    assert point == pytest.approx(math.exp(float(np.median(w))), rel=1e-12)
    assert reaches(n, n, paired=True) == (k > 0)
    if k == 0:
        assert (lo, hi) == (0.0, math.inf)
    else:
        assert (lo, hi) == (
            pytest.approx(math.exp(w[k - 1]), rel=1e-12),
            pytest.approx(math.exp(w[w.size - k]), rel=1e-12),
        )


@pytest.mark.parametrize(("m", "n"), [(2, 2), (3, 3), (3, 5), (3, 7), (4, 4), (2, 9), (5, 8), (6, 6), (7, 3), (10, 12)])
def test_the_unpaired_interval_cuts_where_the_rank_sum_null_says(m: int, n: int) -> None:
    """(3, 7): 3 of C(10, 3) = 1/40 exactly alpha / 2, on the side the exact count puts it."""
    c, b = _spread(m, m), _spread(n, 50 + n)
    w = np.sort([math.log(x) - math.log(y) for x in c for y in b])
    k = _cut(_rank_sum_counts(m, n))
    point, lo, hi = ratio_interval(c, b, paired=False)
    assert point == pytest.approx(math.exp(float(np.median(w))), rel=1e-12)
    assert reaches(m, n, paired=False) == (k > 0)
    if k == 0:
        assert (lo, hi) == (0.0, math.inf)
    else:
        assert (lo, hi) == (
            pytest.approx(math.exp(w[k - 1]), rel=1e-12),
            pytest.approx(math.exp(w[w.size - k]), rel=1e-12),
        )


def _cut_index(w: np.ndarray, lo: float, hi: float) -> int:
    """k of an interval [w[k - 1], w[size - k]] of the sorted averages ``w``."""
    k = int(np.argmin(np.abs(w - math.log(lo)))) + 1
    assert math.log(hi) == pytest.approx(w[w.size - k], rel=1e-12)
    return k


def _normal_cut(mean: float, sd: float) -> int:
    """The normal approximation's cut: the null's 2.5% point (scipy.stats.norm), rounded down."""
    return max(0, math.floor(sps.norm.ppf(0.025, mean, sd)))


@pytest.mark.parametrize("n", [200, 201, 230])
def test_large_paired_samples_cut_exactly_up_to_200_then_by_the_normal(n: int) -> None:
    """Up to 200 pairs the exact signed-rank null; beyond it the normal approximation, a rank or two
    from exact (at 200 they differ: the exact count is the one used)."""
    c, b = _spread(n, 1), _spread(n, 2)
    d = np.log(c) - np.log(b)
    i, j = np.triu_indices(n)
    w = np.sort((d[i] + d[j]) / 2)
    got = _cut_index(w, *ratio_interval(c, b, paired=True)[1:])
    exact = _cut(_signed_rank_counts(n))
    top = n * (n + 1) // 2
    normal = _normal_cut(top / 2, math.sqrt(n * (n + 1) * (2 * n + 1) / 24))
    assert got == (exact if n <= 200 else normal) and abs(normal - exact) <= 3


@pytest.mark.parametrize(("m", "n"), [(150, 300), (230, 230)])
def test_large_unpaired_samples_cut_by_the_normal(m: int, n: int) -> None:
    """Over 40,000 pairs, or both sides over 200: the rank-sum null's normal approximation."""
    c, b = _spread(m, 3), _spread(n, 4)
    w = np.sort((np.log(c)[:, None] - np.log(b)[None, :]).ravel())
    got = _cut_index(w, *ratio_interval(c, b, paired=False)[1:])
    assert got == _normal_cut(m * n / 2, math.sqrt(m * n * (m + n + 1) / 12))


def test_samples_are_checked() -> None:
    assert ratio_interval([1.0] * 1000, [1.0] * 1000, paired=True)[0] == 1.0  # 1000 a side is allowed
    for cand, said in (
        ([], "both sides"),
        ([1.0] * 1001, "more than 1000"),
        ([1.0, float("nan")], ">= 0"),
        ([1.0, -0.5], ">= 0"),
    ):
        with pytest.raises(ValueError, match=said):
            ratio_interval(cand, [1.0, 2.0], paired=False)
    assert ratio_interval([0.0, 0.0], [0.0, 0.0], paired=True) == (1.0, 0.0, math.inf)  # 0/0 is no change
    assert ratio_interval([math.inf] * 6, [math.inf] * 6, paired=True) == (1.0, 1.0, 1.0)
    point, lo, hi = ratio_interval([0.0, math.inf, 0.0, math.inf], [1.0] * 4, paired=False)
    assert (point, lo, hi) == (1.0, 0.0, math.inf)  # +inf against -inf: no side wins


def _power_oracle(n1: int, n0: int, p0: float, p1: float, alpha: float = 0.05) -> float:
    """P(scipy's one-sided Fisher test rejects) over every outcome of both arms."""
    return sum(
        sps.binom.pmf(k1, n1, p1) * sps.binom.pmf(k0, n0, p0)
        for k1 in range(n1 + 1)
        for k0 in range(n0 + 1)
        if sps.fisher_exact([[k1, n1 - k1], [k0, n0 - k0]], alternative="greater").pvalue <= alpha * (1 + 1e-9)
    )


@pytest.mark.parametrize(
    ("n", "p0", "p1"), [(1, 0.0, 0.9), (3, 0.0, 0.8), (6, 0.1, 0.7), (9, 0.2, 0.5), (12, 0.0, 0.125)]
)
def test_fisher_power_is_scipys_rejection_rate(n: int, p0: float, p1: float) -> None:
    assert fisher_power(n, p0, p1) == pytest.approx(_power_oracle(n, n, p0, p1), abs=1e-12)
    for alpha in (0.2, 0.5):  # at 0.5 one trial a side can reject already
        assert fisher_power(n, p0, p1, alpha=alpha) == pytest.approx(_power_oracle(n, n, p0, p1, alpha), abs=1e-12)
    assert fisher_power(0, p0, p1) == 0.0 and fisher_power(-3, p0, p1) == 0.0


@pytest.mark.parametrize(
    ("k1", "n1", "k0", "n0"), [(3, 3, 0, 3), (4, 20, 0, 5), (0, 7, 0, 2), (5, 6, 1, 11), (2, 2, 2, 2)]
)
def test_the_drift_p_value_is_scipys_with_unequal_arms(k1: int, n1: int, k0: int, n0: int) -> None:
    want = sps.fisher_exact([[k1, n1 - k1], [k0, n0 - k0]], alternative="greater").pvalue
    v = drift_verdict(k1, n1, k0, n0)
    assert v.p_value == pytest.approx(want, rel=1e-12) and fisher_one_sided(k1, n1, k0, n0) == v.p_value
    assert (v.verdict == BUG) == (want <= 0.05 * (1 + 1e-9))  # 3 of 3 against 0 of 3: 1/20, a bug exactly at alpha
    assert v.power == pytest.approx(
        _power_oracle(min(n1, n0), min(n1, n0), k0 / n0, min(1.0, k0 / n0 + 0.125)), abs=1e-12
    )


def test_counts_outside_their_trials_are_refused() -> None:
    for args in ((-1, 3, 0, 3), (4, 3, 0, 3), (0, 3, -1, 3), (0, 3, 4, 3)):
        with pytest.raises(ValueError, match="within their trials"):
            fisher_one_sided(*args)
    assert fisher_one_sided(0, 3, 0, 3) == 1.0 and fisher_one_sided(3, 3, 3, 3) == 1.0
    one = drift_verdict(0, 1, 0, 1)  # one trial a side is a (weak) verdict, not an error
    assert one.verdict == INCONCLUSIVE and one.power == 0.0
    for trials, control in ((0, 5), (5, 0)):
        with pytest.raises(ValueError, match="trials on both sides"):
            drift_verdict(0, trials, 0, control)


def _fewest(p0: float, p1: float, start: int, cap: int, power: float = 0.8) -> int | None:
    return next((n for n in range(max(1, start), cap + 1) if _power_oracle(n, n, p0, p1) >= power), None)


@pytest.mark.parametrize(
    ("p0", "p1", "start", "cap"),
    [
        (0.0, 0.5, 1, 40),
        (0.0, 0.9, 1, 40),
        (0.1, 0.8, 1, 40),
        (0.0, 0.5, 6, 40),
        (0.0, 0.5, 30, 40),
        (0.0, 0.6, 3, 5),
        (0.0, 0.5, 1, 5),
        (0.0, 0.3, 1, 20),
    ],
)
def test_trials_for_power_is_the_fewest_that_reach_it(p0: float, p1: float, start: int, cap: int) -> None:
    """The fewest trials per arm (from ``start``, up to ``cap``) at which scipy's test has 80% power."""
    assert trials_for_power(p0, p1, start=start, cap=cap) == _fewest(p0, p1, start, cap)


def test_trials_for_power_needs_an_excess() -> None:
    assert trials_for_power(0.3, 0.3) is None and trials_for_power(0.4, 0.2) is None
    assert trials_for_power(0.0, 0.5, start=0) == _fewest(0.0, 0.5, 1, 40)


def test_a_large_excess_asks_for_the_trials_that_make_it_significant() -> None:
    """2 of 4 against 0 of 4 is not significant; at that rate, the fewest trials that would be."""
    v = drift_verdict(2, 4, 0, 4)
    assert v.verdict == INCONCLUSIVE and v.more_trials is not None

    def significant(n: int) -> bool:
        k1 = min(n, math.ceil(0.5 * n))
        return sps.fisher_exact([[k1, n - k1], [0, n]], alternative="greater").pvalue <= 0.05 * (1 + 1e-9)

    n = 4 + v.more_trials
    assert significant(n) and not any(significant(x) for x in range(5, n))
    assert v.label == f"inconclusive: {v.more_trials} more trials"
    assert v.text() == (
        f"inconclusive: {v.more_trials} more trials (2/4 trials over the bar vs 0/4 for the control, one-sided "
        f"Fisher p = {v.p_value:.3g}; power {v.power:.0%})"
    )
    never = drift_verdict(1, 2, 0, 2, cap=3)
    assert never.verdict == INCONCLUSIVE and never.more_trials is None
    assert never.label == "inconclusive" and never.text().startswith("inconclusive: many more trials (")


def test_too_few_clean_trials_ask_for_the_trials_that_give_power() -> None:
    v = drift_verdict(0, 5, 0, 5)
    want = trials_for_power(0.0, 0.125, start=5)
    assert v.verdict == INCONCLUSIVE and want is not None and v.more_trials == want - 5
    assert _power_oracle(want, want, 0.0, 0.125) >= 0.8 > _power_oracle(want - 1, want - 1, 0.0, 0.125)
    capped = drift_verdict(0, 5, 0, 5, cap=10)
    assert capped.more_trials is None


def test_the_drift_verdicts_words() -> None:
    bug = drift_verdict(6, 6, 0, 6)
    assert bug.verdict == BUG and bug.more_trials is None and bug.label == "bug"
    assert (
        bug.text()
        == f"bug: 6/6 trials over the bar vs 0/6 for the control, one-sided Fisher p = {bug.p_value:.3g} <= 0.05"
    )
    noise = drift_verdict(20, 200, 20, 200)
    assert noise.verdict == DRIFT_NOISE and noise.more_trials == 0 and noise.label == "noise"
    assert noise.text() == (
        f"noise: 20/200 trials over the bar vs 20/200 for the control, one-sided Fisher p = {noise.p_value:.3g}; "
        f"{noise.power:.0%} power to see 0.125 more exceedances per trial than the control, and fewer were seen"
    )
    doc = noise.to_json()
    assert doc["label"] == "noise" and doc["text"] == noise.text() and doc["control_trials"] == 200
    # an excess of exactly min_effect is not noise, however many trials
    edge = drift_verdict(45, 200, 20, 200, min_effect=0.125)
    assert edge.verdict != DRIFT_NOISE
    # enough power but an excess just under min_effect: noise
    under = drift_verdict(44, 200, 20, 200, min_effect=0.125)
    assert under.verdict in (DRIFT_NOISE, BUG)
    assert (under.verdict == BUG) == (under.p_value <= 0.05)


def test_decide_at_the_tolerance_edges() -> None:
    """The whole interval strictly beyond the band: touching it is within noise (exact binary values)."""
    assert decide(0.5, 0.75, 0.25, "higher") == NOISE and decide(0.5, 0.7499, 0.25, "higher") == REGRESSION
    assert decide(1.25, 2.0, 0.25, "higher") == NOISE and decide(1.2501, 2.0, 0.25, "higher") == IMPROVEMENT
    assert decide(1.25, 2.0, 0.25, "lower") == NOISE and decide(1.2501, 2.0, 0.25, "lower") == REGRESSION
    assert decide(0.5, 0.75, 0.25, "lower") == NOISE and decide(0.5, 0.7499, 0.25, "lower") == IMPROVEMENT
    assert decide(0.5, 2.0, 0.25, "higher") == decide(0.5, 2.0, 0.25, "lower") == NOISE


def test_numbers_in_reports() -> None:
    assert [fmt_ratio(x) for x in (math.inf, -math.inf, math.nan, 1.23456)] == ["inf", "inf", "nan", "1.235"]
    assert [json_number(x) for x in (math.inf, -math.inf, math.nan, 1.23456789)] == ["inf", "-inf", "nan", 1.234568]


def test_an_excess_of_exactly_min_effect_asks_for_significance_not_power() -> None:
    """25/40 against 20/40: an excess of exactly 1/8, not significant: the trials at which that rate
    would be significant (searched in steps of a tenth), not the trials for 80% power."""
    v = drift_verdict(25, 40, 20, 40)
    assert v.verdict == INCONCLUSIVE and v.more_trials is not None

    def significant(n: int) -> bool:
        k1, k0 = min(n, math.ceil(0.625 * n)), math.floor(0.5 * n)
        return sps.fisher_exact([[k1, n - k1], [k0, n - k0]], alternative="greater").pvalue <= 0.05 * (1 + 1e-9)

    first = next(n for n in range(41, 2000) if significant(n))
    n = 40 + v.more_trials
    assert significant(n) and first <= n < first + max(1, n // 10) + 1
    assert n != trials_for_power(0.5, 0.625, start=40)


def test_the_ratio_verdicts_words() -> None:
    c, b = [90.0, 91.0, 89.0, 92.0, 90.5, 90.0], [100.0, 101.0, 99.0, 102.0, 100.5, 100.0]
    v = ratio_verdict("decode tok/s", c, b, paired=True, unit="tok/s")
    assert v.verdict == REGRESSION
    assert v.text() == (
        f"decode tok/s: regression, ratio {v.ratio:.3f} [95% CI {v.low:.3f}, {v.high:.3f}], tolerance 3% "
        "(paired, 6 vs 6 repeats)"
    )
    u = ratio_verdict("decode tok/s", c[:3], b, tolerance=0.25)
    assert u.verdict == NOISE and u.text().endswith("tolerance 25% (unpaired, 3 vs 6 repeats)")
    doc = u.to_json()
    assert (doc["metric"], doc["paired"], doc["tolerance"], doc["baseline"]) == ("decode tok/s", False, 0.25, b)
    assert doc["low"] == round(u.low, 6) and doc["high"] == round(u.high, 6)
