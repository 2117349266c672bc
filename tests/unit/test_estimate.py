"""Change-rate estimators, checked by simulating Poisson pages (docs/MODEL.md section 2)."""

from __future__ import annotations

import math
import random

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.core import estimate
from crawler.core.estimate import (
    DEFAULT_PRIOR,
    MAX_CHANGED_INTERVALS,
    ChangeHistory,
    GammaPrior,
    LastModifiedHistory,
    dated_change_days,
    fast_posterior_rate,
    fit_gamma_prior,
    last_modified_is_credible,
    last_modified_rate,
    mle_rate_irregular,
    posterior_rate,
)


def simulate_history(
    rng: np.random.Generator, rate_per_day: float, intervals_days: np.ndarray
) -> ChangeHistory:
    history = ChangeHistory()
    detected = rng.random(intervals_days.size) < -np.expm1(-rate_per_day * intervals_days)
    for interval, changed in zip(intervals_days.tolist(), detected.tolist(), strict=True):
        history = history.observe(interval, changed)
    return history


def test_mle_from_irregular_intervals_is_unbiased_on_average() -> None:
    rng = np.random.default_rng(13)
    true_rate = 1.3
    estimates = []
    for _page in range(1000):
        intervals = rng.uniform(0.1, 2.0, 200)
        detected = rng.random(200) < -np.expm1(-true_rate * intervals)
        estimate = mle_rate_irregular(
            intervals[detected].tolist(), float(intervals[~detected].sum())
        )
        assert estimate is not None
        estimates.append(estimate)
    assert np.mean(estimates) == pytest.approx(true_rate, rel=0.03)


def test_mle_has_no_finite_value_without_a_change_or_without_an_unchanged_interval() -> None:
    assert mle_rate_irregular([], 30.0) is None
    assert mle_rate_irregular([1.0, 2.0], 0.0) is None


@settings(max_examples=60, deadline=None)
@given(
    changed=st.lists(st.floats(0.01, 50.0), min_size=1, max_size=40),
    unchanged_days=st.floats(0.01, 500.0),
)
def test_mle_solves_the_likelihood_equation(changed: list[float], unchanged_days: float) -> None:
    rate = mle_rate_irregular(changed, unchanged_days)
    assert rate is not None and rate > 0.0
    intervals = np.array(changed)
    # Cho & Garcia-Molina: sum_changed t / (e^{lam t} - 1) = sum_unchanged t
    left = float(np.sum(intervals / np.expm1(np.minimum(rate * intervals, 700.0))))
    assert left == pytest.approx(unchanged_days, rel=1e-6)


@pytest.mark.parametrize("true_rate", [0.5, 1.0, 2.0])
def test_last_modified_estimator_by_simulation(true_rate: float) -> None:
    rng = np.random.default_rng(14)
    fetches, interval_days = 50, 1.0
    estimates = []
    for _page in range(1000):
        counts = rng.poisson(true_rate * interval_days, fetches)
        # The last of c uniform change times in an interval is I * U^(1/c).
        last_change = interval_days * rng.random(fetches) ** (1.0 / np.maximum(counts, 1))
        history = LastModifiedHistory()
        for count, last in zip(counts.tolist(), last_change.tolist(), strict=True):
            history = history.observe(interval_days, count > 0, interval_days - last)
        estimate = last_modified_rate(history.fetches, history.changes, history.observed_days)
        assert estimate is not None
        estimates.append(estimate)
    assert np.mean(estimates) == pytest.approx(true_rate, rel=0.03)


def test_last_modified_rate_edge_cases() -> None:
    assert last_modified_rate(10, 10, 4.0) == pytest.approx(9 / 4.0)
    assert last_modified_rate(10, 0, 4.0) is None
    assert last_modified_rate(0, 0, 0.0) is None
    one_change = last_modified_rate(10, 1, 5.0)
    assert one_change is not None and 0.0 < one_change < 1.0 / 5.0


def test_last_modified_credibility() -> None:
    fetched = [100.0, 101.0, 102.0, 103.0]
    assert last_modified_is_credible([90.0, 100.5, 100.5, 102.2], fetched)
    # A dynamic page stamps every response with the time it was generated.
    assert not last_modified_is_credible([t - 1e-5 for t in fetched], fetched)
    assert not last_modified_is_credible([90.0, 100.5, 102.5, 102.5], fetched)  # future
    assert not last_modified_is_credible([90.0, 100.5, 95.0, 102.2], fetched)  # backwards
    assert not last_modified_is_credible([], [])
    # Stamped at fetch time once is fine as long as not every time.
    assert last_modified_is_credible([90.0, 101.0, 101.0, 101.0], fetched)


def test_posterior_without_changes_is_finite_positive_and_shrinks_with_quiet_time() -> None:
    empty = posterior_rate(ChangeHistory(), DEFAULT_PRIOR)
    assert empty == pytest.approx(DEFAULT_PRIOR.mean_rate_per_day)
    quiet = ChangeHistory(unchanged_days=300.0, fetches=30)
    rate = posterior_rate(quiet, DEFAULT_PRIOR)
    assert math.isfinite(rate) and 0.0 < rate < empty
    assert rate == pytest.approx(DEFAULT_PRIOR.shape / (DEFAULT_PRIOR.rate + 300.0))


def reference_posterior_mean(history: ChangeHistory, prior: GammaPrior) -> float:
    """Dense trapezoid in log lam over a range wider than any posterior here."""
    log_rates = np.linspace(math.log(1e-12), math.log(1e6), 60_001)
    rates = np.exp(log_rates)
    intervals = np.array(history.changed_intervals_days)
    log_kernel = (
        prior.shape * log_rates
        - (prior.rate + history.unchanged_days) * rates
        + np.log(-np.expm1(-np.multiply.outer(rates, intervals))).sum(axis=1)
    )
    weights = np.exp(log_kernel - log_kernel.max())
    return float(np.trapezoid(weights * rates, log_rates) / np.trapezoid(weights, log_rates))


@settings(max_examples=40, deadline=None)
@given(
    changed=st.lists(st.floats(0.01, 30.0), min_size=1, max_size=MAX_CHANGED_INTERVALS),
    unchanged_days=st.floats(0.0, 1000.0),
    shape=st.floats(0.05, 20.0),
    rate=st.floats(0.05, 200.0),
)
def test_posterior_mean_matches_dense_quadrature(
    changed: list[float], unchanged_days: float, shape: float, rate: float
) -> None:
    history = ChangeHistory(tuple(changed), unchanged_days, len(changed) + 3)
    prior = GammaPrior(shape, rate)
    fast = posterior_rate(history, prior)
    assert math.isfinite(fast) and fast > 0.0
    assert fast == pytest.approx(reference_posterior_mean(history, prior), rel=1e-3)


def test_posterior_approaches_the_mle_with_plenty_of_data() -> None:
    rng = np.random.default_rng(15)
    intervals = rng.uniform(0.2, 2.0, 2000)
    detected = rng.random(2000) < -np.expm1(-0.7 * intervals)
    changed, unchanged = intervals[detected], float(intervals[~detected].sum())
    mle = mle_rate_irregular(changed.tolist(), unchanged)
    assert mle is not None
    # Not via observe (which keeps 64 changes): the full record.
    history = ChangeHistory(tuple(changed.tolist()), unchanged, 2000)
    assert posterior_rate(history, DEFAULT_PRIOR) == pytest.approx(mle, rel=0.01)


def test_history_keeps_a_bounded_window_and_follows_a_drifting_rate() -> None:
    rng = np.random.default_rng(17)
    intervals = rng.uniform(0.5, 1.5, 3000)
    history = simulate_history(rng, 2.0, intervals)
    assert history.changes == MAX_CHANGED_INTERVALS
    assert history.fetches >= history.changes
    before = posterior_rate(history, DEFAULT_PRIOR)
    assert before == pytest.approx(2.0, rel=0.3)
    for interval in rng.uniform(0.5, 1.5, 3000).tolist():
        history = history.observe(interval, bool(rng.random() < -math.expm1(-0.2 * interval)))
    assert history.changes == MAX_CHANGED_INTERVALS
    assert posterior_rate(history, DEFAULT_PRIOR) == pytest.approx(0.2, rel=0.3)


def test_dropping_an_old_change_does_not_jump_the_estimate() -> None:
    full = ChangeHistory((1.0,) * MAX_CHANGED_INTERVALS, 40.0, 104)
    after = full.observe(1.0, True)
    assert after.changes == MAX_CHANGED_INTERVALS
    assert after.unchanged_days == pytest.approx(40.0 * 64 / 65)
    assert posterior_rate(after, DEFAULT_PRIOR) == pytest.approx(
        posterior_rate(full, DEFAULT_PRIOR), rel=0.02
    )


@pytest.mark.parametrize("interval", [0.0, -1.0, math.inf, math.nan])
def test_observe_rejects_meaningless_intervals(interval: float) -> None:
    with pytest.raises(ValueError):
        ChangeHistory().observe(interval, True)


def simulate_population(
    rng: np.random.Generator, prior: GammaPrior, urls: int, fetches: int
) -> list[ChangeHistory]:
    rates = rng.gamma(prior.shape, 1.0 / prior.rate, urls)
    return [simulate_history(rng, r, rng.uniform(0.3, 3.0, fetches)) for r in rates.tolist()]


def test_fitted_prior_recovers_the_population() -> None:
    rng = np.random.default_rng(18)
    truth = GammaPrior(shape=1.5, rate=3.0)
    fitted = fit_gamma_prior(simulate_population(rng, truth, 2000, 30))
    assert fitted is not None
    assert fitted.shape == pytest.approx(truth.shape, rel=0.15)
    assert fitted.rate == pytest.approx(truth.rate, rel=0.15)


def test_no_prior_from_too_few_urls_or_a_population_that_never_changes() -> None:
    rng = np.random.default_rng(19)
    assert fit_gamma_prior(simulate_population(rng, DEFAULT_PRIOR, 10, 20)) is None
    static = [ChangeHistory(unchanged_days=float(d), fetches=10) for d in range(10, 100)]
    assert fit_gamma_prior(static) is None


def test_fast_posterior_stays_within_three_percent_of_the_exact_posterior() -> None:
    """The estimator the daemon and the simulator schedule with, against the quadrature."""
    rng = random.Random(5)
    errors = []
    for _ in range(200):
        rate = 10 ** rng.uniform(-2.5, 1.5)
        history = ChangeHistory()
        for _ in range(rng.randint(1, 120)):
            interval = rng.uniform(0.05, 3.0) / rate
            history = history.observe(interval, rng.random() < 1 - math.exp(-rate * interval))
        prior = GammaPrior(rng.uniform(0.1, 5.0), rng.uniform(0.5, 200.0))
        exact = posterior_rate(history, prior)
        errors.append(abs(fast_posterior_rate(history, prior) / exact - 1.0))
        # The previous estimate only seeds the search: same answer from a poor guess.
        guessed = fast_posterior_rate(history, prior, exact * rng.uniform(0.1, 10.0))
        assert guessed == pytest.approx(exact, rel=0.03)
    assert max(errors) < 0.03
    assert float(np.median(errors)) < 0.005


def _random_cases(rng: random.Random, count: int) -> list[tuple[ChangeHistory, GammaPrior, float]]:
    cases = []
    for _ in range(count):
        rate = 10 ** rng.uniform(-2.5, 1.5)
        history = ChangeHistory()
        for _ in range(rng.randint(1, 200)):
            interval = rng.uniform(0.05, 3.0) / rate
            history = history.observe(interval, rng.random() < 1 - math.exp(-rate * interval))
        prior = GammaPrior(rng.uniform(0.1, 5.0), rng.uniform(0.5, 200.0))
        cases.append((history, prior, rate * rng.uniform(0.3, 3.0)))
    return cases


def test_fast_posterior_newton_stop_moves_the_mean_by_under_1e4(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mode search stops at a step of 1e-3 (speed); the mean it returns is within 1e-4
    of a search run to full convergence, whatever the seed guess."""
    cases = _random_cases(random.Random(11), 150)
    assert any(h.changes > 40 for h, _, _ in cases) and any(h.changes < 12 for h, _, _ in cases)
    default = [fast_posterior_rate(h, p, g) for h, p, g in cases]
    monkeypatch.setattr(estimate, "_NEWTON_TOLERANCE", 1e-13)
    converged = [fast_posterior_rate(h, p, g) for h, p, g in cases]
    errors = [abs(a / b - 1.0) for a, b in zip(default, converged, strict=True)]
    assert max(errors) < 1e-4
    assert max(errors) > 0.0  # the stop does cut the search short somewhere


def test_fast_posterior_numpy_and_float_passes_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Long records take the Newton steps and weigh the Gauss-Hermite nodes in numpy, short
    ones in floats: the same formulas, so the same value to rounding."""
    cases = [c for c in _random_cases(random.Random(12), 120) if c[0].changes > 0]
    monkeypatch.setattr(estimate, "_SCALAR_MODE_MAX_INTERVALS", 0)
    monkeypatch.setattr(estimate, "_SCALAR_NODES_MAX_INTERVALS", 0)
    in_numpy = [fast_posterior_rate(h, p, g) for h, p, g in cases]
    monkeypatch.setattr(estimate, "_SCALAR_MODE_MAX_INTERVALS", MAX_CHANGED_INTERVALS)
    monkeypatch.setattr(estimate, "_SCALAR_NODES_MAX_INTERVALS", MAX_CHANGED_INTERVALS)
    in_floats = [fast_posterior_rate(h, p, g) for h, p, g in cases]
    for a, b in zip(in_numpy, in_floats, strict=True):
        assert a == pytest.approx(b, rel=1e-12)


def test_a_credible_last_modified_dates_the_change() -> None:
    assert dated_change_days(0.0, 10.0, 6.0, None) == pytest.approx(4.0)
    assert dated_change_days(0.0, 10.0, 6.0, 7.0) is None  # went backwards
    assert dated_change_days(0.0, 10.0, -1.0, None) is None  # before the interval
    assert dated_change_days(0.0, 10.0, 10.0, None) is None  # stamped with the response time
    assert dated_change_days(0.0, 10.0, None, None) is None
