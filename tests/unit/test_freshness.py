"""Freshness, age and β-currency formulas (docs/MODEL.md section 4) and their derivatives."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from crawler.core import freshness as fr

rates = st.floats(min_value=1e-3, max_value=50.0)


def test_freshness_closed_form_values() -> None:
    # r = 1: (1 − e^{−1}) / 1.
    assert np.isclose(fr.freshness(2.0, 2.0), 1.0 - np.exp(-1.0))
    assert fr.freshness(0.0, 1.0) == 1.0
    assert fr.freshness(1.0, 0.0) == 0.0


@given(rates, rates)
def test_freshness_is_a_probability_and_increases_with_fetch_rate(lam: float, f: float) -> None:
    value = float(fr.freshness(lam, f))
    assert 0.0 < value <= 1.0
    assert float(fr.freshness(lam, f * 1.1)) >= value


@given(rates, rates)
def test_gradients_match_finite_differences(lam: float, f: float) -> None:
    step = f * 1e-6
    fresh = (fr.freshness(lam, f + step) - fr.freshness(lam, f - step)) / (2 * step)
    assert np.isclose(fr.freshness_gradient(lam, f), fresh, rtol=1e-4, atol=1e-9)
    age = -(fr.age_days(lam, f + step) - fr.age_days(lam, f - step)) / (2 * step)
    assert np.isclose(fr.age_gradient(lam, f), age, rtol=1e-4, atol=1e-7)
    beta = 0.3
    if 1.0 / (f + step) > beta:
        current = (
            fr.beta_currency(lam, f + step, beta) - fr.beta_currency(lam, f - step, beta)
        ) / (2 * step)
        assert np.isclose(fr.beta_currency_gradient(lam, f, beta), current, rtol=1e-4, atol=1e-8)


def test_beta_currency_reduces_to_freshness_at_zero_grace() -> None:
    lam, f = np.array([0.1, 1.0, 7.0]), np.array([0.5, 2.0, 1.0])
    assert np.allclose(fr.beta_currency(lam, f, 0.0), fr.freshness(lam, f))
    assert np.all(fr.beta_currency(lam, np.full(3, 4.0), 0.5) == 1.0)  # T = 0.25 ≤ β


def test_age_matches_monte_carlo_integral() -> None:
    # Average over one interval of (t − first change)^+ with first change ~ Exp(λ).
    rng = np.random.default_rng(3)
    lam, interval = 0.7, 2.0
    first = rng.exponential(1 / lam, 400_000)
    stale = np.clip(interval - first, 0.0, None)
    expected = np.mean(stale**2 / 2) / interval
    assert np.isclose(fr.age_days(lam, 1 / interval), expected, rtol=0.01)
