"""Freshness, age and β-currency of a Poisson page fetched at evenly spaced times.

All functions accept scalars or numpy arrays and broadcast. Rates are per day, times in days.
The formulas are docs/MODEL.md section 4; the derivatives with respect to the fetch rate f are the
left-hand sides of the Lagrange condition of section 5 (w · dObjective/df = μ).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]

# Below this r the closed forms lose precision to cancellation; a series takes over.
_SMALL_R = 1e-4


def _rates(
    change_rate_per_day: ArrayLike, fetch_rate_per_day: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    """Both rates as float arrays, as every formula here takes them."""
    return (
        np.asarray(change_rate_per_day, dtype=np.float64),
        np.asarray(fetch_rate_per_day, dtype=np.float64),
    )


def _if_static(change_rate: FloatArray, static_value: float, value: FloatArray) -> FloatArray:
    """``value``, except ``static_value`` for a page that never changes (λ ≤ 0), where the
    closed forms divide by zero."""
    return np.asarray(np.where(change_rate <= 0.0, static_value, value), dtype=np.float64)


def _if_never_fetched(
    change_rate: FloatArray, fetch_rate: FloatArray, value: FloatArray
) -> FloatArray:
    """``value``, except for a page never fetched (f ≤ 0): current only if it never changes."""
    never = np.where(change_rate <= 0.0, 1.0, 0.0)
    return np.asarray(np.where(fetch_rate <= 0.0, never, value), dtype=np.float64)


def freshness(change_rate_per_day: ArrayLike, fetch_rate_per_day: ArrayLike) -> FloatArray:
    """Time-averaged probability that the stored copy is current: F = (1 − e^{−r}) / r, r = λ/f.

    A page that is never fetched (f = 0) has freshness 0 unless it never changes (λ = 0 → 1).
    """
    # Cho & Garcia-Molina 2003, freshness of a Poisson page under a fixed revisit interval.
    change_rate, fetch_rate = _rates(change_rate_per_day, fetch_rate_per_day)
    with np.errstate(divide="ignore", invalid="ignore"):
        r = change_rate / fetch_rate
        value = -np.expm1(-r) / r
    value = np.where(r < _SMALL_R, 1.0 - r / 2.0, value)
    return _if_never_fetched(change_rate, fetch_rate, value)


def freshness_gradient(change_rate_per_day: ArrayLike, fetch_rate_per_day: ArrayLike) -> FloatArray:
    """dF/df = (1 − (1 + r) e^{−r}) / λ: the marginal freshness of one more fetch per day."""
    change_rate, fetch_rate = _rates(change_rate_per_day, fetch_rate_per_day)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = change_rate / fetch_rate
        value = (-np.expm1(-r) - r * np.exp(-r)) / change_rate
        # Series: 1 − (1 + r)e^{−r} ≈ r²/2, so dF/df ≈ λ / (2 f²) for slow pages.
        value = np.where(r < _SMALL_R, change_rate / (2.0 * np.square(fetch_rate)), value)
    return _if_static(change_rate, 0.0, value)


def age_days(change_rate_per_day: ArrayLike, fetch_rate_per_day: ArrayLike) -> FloatArray:
    """Time-averaged age (days since the copy went stale): A = I (1/2 − 1/r + (1 − e^{−r}) / r²)."""
    # Cho & Garcia-Molina 2003, age of a Poisson page under a fixed revisit interval I = 1/f.
    change_rate, fetch_rate = _rates(change_rate_per_day, fetch_rate_per_day)
    with np.errstate(divide="ignore", invalid="ignore"):
        interval = 1.0 / fetch_rate
        r = change_rate * interval
        value = interval * (0.5 - 1.0 / r - np.expm1(-r) / np.square(r))
        # Series: A ≈ I r / 6 for small r.
        value = np.where(r < _SMALL_R, interval * r / 6.0, value)
    return _if_static(change_rate, 0.0, value)


def age_gradient(change_rate_per_day: ArrayLike, fetch_rate_per_day: ArrayLike) -> FloatArray:
    """−dA/df = (r²/2 − 1 + (1 + r) e^{−r}) / λ²: age saved by one more fetch per day."""
    change_rate, fetch_rate = _rates(change_rate_per_day, fetch_rate_per_day)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        r = change_rate / fetch_rate
        value = (np.square(r) / 2.0 + np.expm1(-r) + r * np.exp(-r)) / np.square(change_rate)
        # Series: r²/2 − 1 + (1 + r)e^{−r} ≈ r³/3.
        value = np.where(r < _SMALL_R, change_rate / (3.0 * fetch_rate**3), value)
    return _if_static(change_rate, 0.0, value)


def beta_currency(
    change_rate_per_day: ArrayLike, fetch_rate_per_day: ArrayLike, beta_days: float
) -> FloatArray:
    """Probability the copy is β-current: P = β/T + (1 − e^{−λ(T−β)}) / (λT), 1 when T ≤ β."""
    # Brewington & Cybenko 2000, eq. (22), with T = 1/f the revisit interval.
    change_rate, fetch_rate = _rates(change_rate_per_day, fetch_rate_per_day)
    # T < β overflows expm1 below; np.where then picks 1 for those URLs.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        interval = 1.0 / fetch_rate
        value = beta_days / interval - np.expm1(-change_rate * (interval - beta_days)) / (
            change_rate * interval
        )
    value = _if_static(change_rate, 1.0, np.where(interval <= beta_days, 1.0, value))
    return _if_never_fetched(change_rate, fetch_rate, value)


def beta_currency_gradient(
    change_rate_per_day: ArrayLike, fetch_rate_per_day: ArrayLike, beta_days: float
) -> FloatArray:
    """dP/df = β + (1 − e^{−λ(T−β)} (1 + λT)) / λ for T > β, 0 when T ≤ β."""
    change_rate, fetch_rate = _rates(change_rate_per_day, fetch_rate_per_day)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        interval = 1.0 / fetch_rate
        decay = np.exp(-change_rate * (interval - beta_days))
        value = beta_days + (1.0 - decay * (1.0 + change_rate * interval)) / change_rate
    return _if_static(change_rate, 0.0, np.where(interval <= beta_days, 0.0, value))
