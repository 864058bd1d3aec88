"""The statistics behind serving and drift verdicts (``patchset.verify.stats``), against exact values
and seeded known distributions: the false-alarm rate on healthy noise, the power on real effects."""

from __future__ import annotations

import math

import numpy as np
import pytest

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
    ratio_interval,
    ratio_verdict,
    reaches,
    trials_for_power,
)


def _hypergeom_tail(k1: int, n1: int, k0: int, n0: int) -> float:
    m, total = k1 + k0, n1 + n0
    return sum(math.comb(n1, x) * math.comb(n0, m - x) for x in range(k1, min(m, n1) + 1)) / math.comb(total, m)


@pytest.mark.parametrize("k1,n1,k0,n0", [(1, 8, 0, 8), (5, 40, 0, 40), (3, 40, 2, 40), (0, 5, 3, 5), (7, 9, 2, 12)])
def test_fisher_matches_the_hypergeometric_sum(k1: int, n1: int, k0: int, n0: int) -> None:
    assert fisher_one_sided(k1, n1, k0, n0) == pytest.approx(_hypergeom_tail(k1, n1, k0, n0), rel=1e-9)


def test_fisher_known_values() -> None:
    assert fisher_one_sided(1, 8, 0, 8) == pytest.approx(0.5)  # one resume in eight: a coin toss
    assert fisher_one_sided(8, 8, 0, 8) == pytest.approx(1 / math.comb(16, 8))
    assert fisher_one_sided(0, 10, 4, 10) == pytest.approx(1.0)
    with pytest.raises(ValueError):
        fisher_one_sided(9, 8, 0, 8)


def test_fisher_power_size_and_growth() -> None:
    # equal rates: the test's size never exceeds alpha (Fisher's test is conservative)
    for n, p in ((10, 0.2), (30, 0.1), (60, 0.3)):
        assert fisher_power(n, p, p) <= 0.05 + 1e-9
    # a real excess is found more often with more trials
    assert fisher_power(10, 0.1, 0.6) < fisher_power(40, 0.1, 0.6)
    assert fisher_power(40, 0.1, 0.6) > 0.95
    n = trials_for_power(0.0, 0.125)
    assert n is not None and fisher_power(n, 0.0, 0.125) >= 0.8 > fisher_power(n - 1, 0.0, 0.125)
    assert trials_for_power(0.2, 0.1) is None  # no excess to find


def test_drift_verdicts() -> None:
    bug = drift_verdict(8, 8, 0, 8)
    assert bug.verdict == BUG and bug.p_value < 0.001 and bug.label == "bug"
    one_in_eight = drift_verdict(1, 8, 0, 8)
    assert one_in_eight.verdict == INCONCLUSIVE and one_in_eight.more_trials and one_in_eight.more_trials > 8
    assert one_in_eight.label == f"inconclusive: {one_in_eight.more_trials} more trials"
    # would the observed rate become significant with that many more trials? it does
    n = 8 + one_in_eight.more_trials
    assert fisher_one_sided(math.ceil(n / 8), n, 0, n) <= 0.05
    few = drift_verdict(0, 5, 0, 5)
    assert few.verdict == INCONCLUSIVE and "power" in few.text()  # 5 clean trials cannot rule out 1 in 8
    many = drift_verdict(30, 200, 31, 200)
    assert many.verdict == DRIFT_NOISE and many.power >= 0.8 and many.label == "noise"
    data = many.to_json()
    assert data["verdict"] == "noise" and "Fisher" in data["text"]


def _drift_trials(rng: np.random.Generator, n: int, bug_rate: float) -> tuple[int, int, int, int]:
    """n resume trials and n controls of the same exponential noise; a bug makes bug_rate of the
    resumes jump; counts over the bar of 2x the median control (the rule verify applies)."""
    controls = rng.exponential(0.05, n)
    drifts = rng.exponential(0.05, n)
    hit = rng.random(n) < bug_rate
    drifts[hit] += 1.0
    bar = 2 * float(np.median(controls))
    return int((drifts > bar).sum()), n, int((controls > bar).sum()), n


def test_drift_false_alarms_stay_below_alpha() -> None:
    rng = np.random.default_rng(20261201)
    runs = [drift_verdict(*_drift_trials(rng, 40, 0.0)) for _ in range(300)]
    bugs = sum(v.verdict == BUG for v in runs)
    assert bugs / len(runs) <= 0.05, bugs
    # a bug in half the resumes is found nearly always
    found = [drift_verdict(*_drift_trials(rng, 40, 0.5)).verdict == BUG for _ in range(100)]
    assert sum(found) >= 95


def _walsh_median(d: list[float]) -> float:
    w = sorted((d[i] + d[j]) / 2 for i in range(len(d)) for j in range(i, len(d)))
    return float(np.median(w))


def test_ratio_interval_paired_and_unpaired() -> None:
    cand = [90.0, 91.0, 89.0, 92.0, 90.5, 90.0]
    base = [100.0, 101.0, 99.0, 102.0, 100.5, 100.0]
    point, lo, hi = ratio_interval(cand, base, paired=True)
    logs = [math.log(c / b) for c, b in zip(cand, base, strict=True)]
    assert point == pytest.approx(math.exp(_walsh_median(logs)))  # Hodges-Lehmann
    # 6 pairs: the signed-rank interval is the smallest and largest ratio (1/64 beyond each end)
    per = [c / b for c, b in zip(cand, base, strict=True)]
    assert (lo, hi) == (pytest.approx(min(per)), pytest.approx(max(per)))
    point_u, lo_u, hi_u = ratio_interval(cand, base, paired=False)
    ratios = sorted(c / b for c in cand for b in base)
    assert point_u == pytest.approx(float(np.median(ratios)))
    assert (lo_u, hi_u) == (pytest.approx(ratios[5]), pytest.approx(ratios[-6]))  # Mann-Whitney 6 v 6: U <= 5
    assert ratio_interval([0, 0, 0], [0, 0, 0], paired=False)[0] == 1.0
    assert ratio_interval([5] * 6, [0] * 6, paired=True) == (math.inf, math.inf, math.inf)
    assert ratio_interval([0] * 6, [83.5] * 6, paired=True) == (0.0, 0.0, 0.0)  # no hits left: 0, exactly
    assert ratio_interval([2.0] * 5, [1.0] * 5, paired=True) == (2.0, 0.0, math.inf)  # 5 pairs: no 95% interval
    with pytest.raises(ValueError):
        ratio_interval([1, 2], [1, 2, 3], paired=True)
    with pytest.raises(ValueError):
        ratio_interval([1, -2], [1, 2], paired=False)


def test_which_repeats_admit_a_95_percent_interval() -> None:
    assert not reaches(5, 5, paired=True) and reaches(6, 6, paired=True)  # 2/32 > 5% >= 2/64
    assert not reaches(3, 3, paired=False) and reaches(3, 5, paired=False) and reaches(4, 4, paired=False)
    assert not reaches(6, 5, paired=True)


def test_decide_needs_the_whole_interval_beyond_the_tolerance() -> None:
    assert decide(0.80, 0.96, 0.03, "higher") == REGRESSION
    assert decide(0.80, 0.975, 0.03, "higher") == NOISE  # touches the tolerance band
    assert decide(1.04, 1.2, 0.03, "higher") == IMPROVEMENT
    assert decide(1.04, 1.2, 0.03, "lower") == REGRESSION  # time to first token went up
    assert decide(0.5, 0.9, 0.03, "lower") == IMPROVEMENT


def _healthy(rng: np.random.Generator, r: int, sigma: float) -> tuple[np.ndarray, np.ndarray]:
    return np.exp(rng.normal(0, sigma, r)) * 100, np.exp(rng.normal(0, sigma, r)) * 100


@pytest.mark.parametrize("paired", [True, False])
def test_ratio_false_alarm_rate_on_healthy_noise(paired: bool) -> None:
    """Both sides drawn from one distribution (5% noise, the default 6 repeats, 3% tolerance): at most
    5% of the comparisons may call a regression or an improvement."""
    rng = np.random.default_rng(7)
    alarms = 0
    trials = 400
    for _ in range(trials):
        c, b = _healthy(rng, 6, 0.05)
        alarms += ratio_verdict("decode", c, b, paired=paired).verdict != NOISE
    assert alarms / trials <= 0.05, alarms


def test_ratio_power_on_a_real_slowdown() -> None:
    rng = np.random.default_rng(11)
    called = 0
    for _ in range(200):
        c, b = _healthy(rng, 6, 0.05)
        v = ratio_verdict("decode", c * 0.7, b, paired=True)
        called += v.verdict == REGRESSION
        assert v.high < 1.0 or v.verdict != REGRESSION
    assert called >= 190


def test_ratio_verdict_text_and_json() -> None:
    v = ratio_verdict("ttft resumed s", [0.3, 0.31, 0.29, 0.3, 0.32], [0.1, 0.11, 0.1, 0.09, 0.1], better="lower")
    assert v.verdict == REGRESSION and v.ratio > 2.5
    text = v.text()
    assert text.startswith("ttft resumed s: regression, ratio ") and "[95% CI " in text and "tolerance 3%" in text
    data = v.to_json()
    assert data["candidate"] == [0.3, 0.31, 0.29, 0.3, 0.32] and data["better"] == "lower"
    zero = ratio_verdict("cache hits %", [50.0] * 5, [0.0] * 5)
    assert zero.verdict == IMPROVEMENT and zero.to_json()["ratio"] == "inf"
    with pytest.raises(ValueError):
        ratio_verdict("x", [1.0], [1.0], better="sideways")


@pytest.mark.parametrize("paired", [True, False])
@pytest.mark.parametrize("repeats", [3, 5, 6, 8])
@pytest.mark.parametrize("noise", ["lognormal", "student-t"])
def test_the_interval_alone_keeps_false_alarms_below_5_percent(paired: bool, repeats: int, noise: str) -> None:
    """Tolerance 0, healthy noise of any size and shape: "95%" must mean it. A percentile bootstrap
    of the median of 5 paired ratios is their [min, max], which excludes 1 in 2/32 = 6.25% of
    healthy comparisons (75% at 3 repeats); on the CPU engine's noisiest metric (a log-ratio spread
    of 0.5) the 3% tolerance hides almost none of that. 4,000 healthy comparisons: at most 5% plus
    two binomial standard errors may alarm."""
    rng = np.random.default_rng(20261202 + repeats)
    trials, alarms = 4000, 0
    for _ in range(trials):
        e = rng.normal(0, 1.0, (2, repeats)) if noise == "lognormal" else rng.standard_t(2, (2, repeats))
        e = np.clip(e, -300, 300)  # t's tails, kept finite
        c, b = 100 * np.exp(e[0]), 100 * np.exp(e[1])
        alarms += ratio_verdict("decode", c, b, paired=paired, tolerance=0.0).verdict != NOISE
    assert alarms / trials <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / trials), alarms


def _power_by_enumeration(n: int, p0: float, p1: float, alpha: float) -> float:
    """The one-sided Fisher test's power, every outcome of both arms enumerated (the oracle)."""

    def pmf(k: int, p: float) -> float:
        return math.comb(n, k) * p**k * (1 - p) ** (n - k)

    return sum(
        pmf(k1, p1) * pmf(k0, p0)
        for k1 in range(n + 1)
        for k0 in range(n + 1)
        if _hypergeom_tail(k1, n, k0, n) <= alpha * (1 + 1e-9)
    )


def test_drift_power_with_unequal_arms_counts_the_smaller_arm() -> None:
    # 200 clean trials against a control of 5: the control arm limits what the test can see
    lopsided = drift_verdict(0, 200, 0, 5)
    assert lopsided.power == pytest.approx(_power_by_enumeration(5, 0.0, 0.125, 0.05), abs=1e-12)
    assert lopsided.power < 0.8 and lopsided.verdict == INCONCLUSIVE
    assert lopsided.more_trials is not None and lopsided.more_trials >= 1
    assert drift_verdict(0, 5, 0, 200).power == lopsided.power
    assert drift_verdict(0, 200, 0, 200).verdict == DRIFT_NOISE
    # the target rate is capped at 1 (a control that always exceeds)
    full = drift_verdict(5, 5, 5, 5)
    assert full.verdict != BUG and full.power == pytest.approx(_power_by_enumeration(5, 1.0, 1.0, 0.05), abs=1e-12)
