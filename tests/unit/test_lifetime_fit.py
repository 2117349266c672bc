"""Weibull fits of mean lifetimes (Brewington & Cybenko eqs. 9–16) on synthetic pages."""

from __future__ import annotations

import numpy as np
import pytest

from crawler.core import lifetime_fit
from crawler.core.lifetime_fit import PageObservation

SHAPE, SCALE_DAYS = 1.4, 152.2


@pytest.fixture(scope="module")
def paper_pages() -> list[PageObservation]:
    """4000 Poisson pages, 1/λ ~ Weibull(1.4, 152.2 d), watched 30–400 days each."""
    rng = np.random.default_rng(20_000)
    spans = rng.uniform(30.0, 400.0, size=4_000)
    return lifetime_fit.simulate_observations(spans, SHAPE, SCALE_DAYS, rng)


@pytest.mark.parametrize("include_unchanged", [True, False])
def test_span_corrected_fit_recovers_parameters(
    paper_pages: list[PageObservation], include_unchanged: bool
) -> None:
    fit = lifetime_fit.fit_lifetimes(paper_pages, include_unchanged=include_unchanged)
    assert fit.shape == pytest.approx(SHAPE, rel=0.10)
    assert fit.scale_days == pytest.approx(SCALE_DAYS, rel=0.10)
    assert fit.mean_lifetime_days == pytest.approx(
        lifetime_fit.weibull_mean(SHAPE, SCALE_DAYS), rel=0.10
    )
    # The model is the truth here: the χ² test must not reject it.
    assert fit.chi_square_p_value > 0.001


def test_fit_without_span_correction_is_biased(paper_pages: list[PageObservation]) -> None:
    corrected = lifetime_fit.fit_lifetimes(paper_pages)
    naive = lifetime_fit.fit_lifetimes(paper_pages, span_correction=False)
    # Pages that showed a change over-represent short lifetimes: the naive mean is too short.
    assert naive.scale_days < 0.8 * SCALE_DAYS
    assert naive.mean_lifetime_days < 0.8 * corrected.mean_lifetime_days
    assert naive.chi_square_p_value < 1e-6 < corrected.chi_square_p_value
    assert naive.pages_used < corrected.pages_used


def test_fit_recovers_other_parameters_and_short_spans() -> None:
    rng = np.random.default_rng(3)
    spans = rng.choice([14.0, 60.0, 180.0], size=3_000)
    pages = lifetime_fit.simulate_observations(spans, 0.8, 40.0, rng)
    fit = lifetime_fit.fit_lifetimes(pages)
    assert fit.shape == pytest.approx(0.8, rel=0.10)
    assert fit.scale_days == pytest.approx(40.0, rel=0.10)


def test_fit_needs_an_observed_change() -> None:
    with pytest.raises(ValueError):
        lifetime_fit.fit_lifetimes([PageObservation(span_days=30.0, change_count=0)] * 5)


def test_observed_lifetime_cdf_matches_simulated_intervals() -> None:
    # A narrow distribution (no extremely fast pages dominating the pooled intervals).
    rng = np.random.default_rng(11)
    spans = rng.uniform(30.0, 400.0, size=1_000)
    pages = lifetime_fit.simulate_observations(spans, 5.0, 20.0, rng)
    intervals = np.sort(np.array([x for p in pages for x in p.intervals_days]))
    probabilities = (np.arange(1, 100) / 100.0)
    points = np.quantile(intervals, probabilities)
    corrected = lifetime_fit.observed_lifetime_cdf(points, spans, 5.0, 20.0)
    naive = lifetime_fit.observed_lifetime_cdf(points, spans, 5.0, 20.0, span_correction=False)
    assert np.max(np.abs(corrected - probabilities)) < 0.02
    # Ignoring that intervals longer than the span are never seen misplaces the curve.
    assert np.max(np.abs(naive - probabilities)) > 0.04
    assert np.all(np.diff(corrected) >= 0)
