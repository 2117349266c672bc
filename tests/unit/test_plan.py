"""The Lagrange planner (docs/MODEL.md section 5)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from crawler.core import freshness as fr
from crawler.core import plan
from crawler.core.periodic import PeriodicModel


def test_published_example_cho_garcia_molina() -> None:
    result = plan.solve_mu([1, 2, 3, 4, 5], 1.0, 5.0, max_interval_days=math.inf)
    assert np.allclose(result.rates_per_day, [1.15, 1.36, 1.35, 1.14, 0.0], atol=0.01)
    assert math.isclose(result.total_per_day, 5.0, rel_tol=1e-6)


@pytest.mark.parametrize("objective", plan.OBJECTIVES)
def test_lagrange_condition_holds_for_every_fetched_page(objective: plan.Objective) -> None:
    rng = np.random.default_rng(2)
    lam = rng.lognormal(0.0, 1.5, 300)
    weights = rng.uniform(0.5, 2.0, 300)
    beta = 0.2
    result = plan.solve_mu(
        lam,
        weights,
        200.0,
        objective,
        beta_days=beta,
        min_interval_days=0.0,
        max_interval_days=math.inf,
    )
    assert math.isclose(result.total_per_day, 200.0, rel_tol=1e-6)
    f = result.rates_per_day
    fetched = f > 1e-9
    if objective == "freshness":
        gradient = weights * fr.freshness_gradient(lam, f)
    elif objective == "age":
        gradient = weights * fr.age_gradient(lam, f)
    elif objective == "beta_currency":
        gradient = weights * fr.beta_currency_gradient(lam, f, beta)
    else:
        # Kolobov et al. 2019: marginal harmonic-staleness gain w λ / (ρ (ρ + λ)).
        gradient = weights * lam / (f * (f + lam))
    assert np.allclose(gradient[fetched], result.mu, rtol=1e-5)


@settings(max_examples=30, deadline=None)
@given(
    st.lists(st.floats(1e-3, 20.0), min_size=1, max_size=40),
    st.floats(0.05, 50.0),
    st.sampled_from(plan.OBJECTIVES),
)
def test_budget_is_spent_and_local_rate_matches(
    lam: list[float], budget_per_page: float, objective: plan.Objective
) -> None:
    # Beyond λ/f ≈ 20 the freshness condition hangs on 1 − μλ/w ≈ (1 + r)e^{−r}, which doubles
    # resolve only to ~1e-16 / e^{−r}: such pages are worth nothing, and the test skips them.
    assume(max(lam) / budget_per_page < 20.0)
    budget = budget_per_page * len(lam)
    result = plan.solve_mu(lam, 1.0, budget, objective)
    bounds_total = len(lam) / plan.DEFAULT_MAX_INTERVAL_DAYS
    # β-currency gains nothing from fetching faster than once per β (1 day by default).
    ceiling = len(lam) / plan.DEFAULT_BETA_DAYS if objective == "beta_currency" else math.inf
    expected = max(min(budget, ceiling), bounds_total)
    # A page exactly at the starvation edge (μλ/w → 1) jumps from about λ/37 to 0 in floating
    # point (1 − μλ/w cannot be smaller than ~1e-16): Σf may miss the budget by that much.
    edge = max(lam) / 30.0 if objective in ("freshness", "beta_currency") else 0.0
    assert abs(result.total_per_day - expected) <= 1e-4 * expected + edge
    for index in range(0, len(lam), 7):
        local = plan.fetch_rate_for(lam[index], 1.0, result.mu, objective)
        assert local == pytest.approx(result.rates_per_day[index], rel=1e-5, abs=1e-12)


def test_starved_page_is_still_checked_at_max_interval() -> None:
    result = plan.solve_mu([1, 2, 3, 4, 5], 1.0, 5.0, max_interval_days=30.0)
    assert result.rates_per_day[4] == pytest.approx(1 / 30.0)
    assert result.total_per_day == pytest.approx(5.0)


def test_host_caps_are_honoured_and_the_rest_resolved() -> None:
    lam = np.array([1.0, 1.0, 1.0, 0.5, 0.5, 0.5])
    hosts = np.array([0, 0, 0, 1, 1, 1])
    free = plan.solve_mu(lam, 1.0, 6.0)
    capped = plan.solve_mu(lam, 1.0, 6.0, host_ids=hosts, host_caps_per_day=[1.5, 100.0])
    assert free.rates_per_day[:3].sum() > 1.5
    assert capped.rates_per_day[:3].sum() == pytest.approx(1.5, rel=1e-6)
    assert capped.total_per_day == pytest.approx(6.0, rel=1e-6)
    assert capped.host_mu[0] > capped.mu
    assert np.all(capped.rates_per_day[3:] > free.rates_per_day[3:])


def test_large_population_uses_sampled_search_and_still_spends_budget() -> None:
    rng = np.random.default_rng(5)
    lam = 1.0 / (152.2 * rng.weibull(1.4, 450_000))
    result = plan.solve_mu(lam, 1.0, 450_000 / 30.0)
    assert result.total_per_day == pytest.approx(15_000.0, rel=1e-4)
    small = plan.solve_mu(lam[:50_000], 1.0, 50_000 / 30.0)
    assert result.mu == pytest.approx(small.mu, rel=0.05)


def test_next_fetch_time_evenly_spaced_and_periodic() -> None:
    assert plan.next_fetch_time(10.0, 0.5) == pytest.approx(12.0)
    assert plan.next_fetch_time(10.0, 0.0, max_interval_days=30.0) == pytest.approx(40.0)
    daily = PeriodicModel(period_days=1.0, phase_days=0.25, jitter_days=0.001, strength=10.0)
    # Rate once per 2.5 days: the latest update before the even time, plus the jitter margin.
    assert plan.next_fetch_time(10.3, 0.4, daily) == pytest.approx(12.25 + 0.003)
    # Rate faster than the page updates: wait for its next update instead.
    assert plan.next_fetch_time(10.3, 10.0, daily) == pytest.approx(11.25 + 0.003)
    # Fetched just before the jitter window closed: the next cycle, not minutes later.
    assert plan.next_fetch_time(11.252, 1.0, daily) == pytest.approx(12.253)
