"""Plan a whole population's fetch rates for a budget, and judge the result.

Pure: the daemon's planner task and the tests call it with arrays read from the database.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.core.freshness import beta_currency, freshness
from crawler.core.plan import Objective, solve_mu

SECONDS_PER_DAY = 86400.0
# Plan for a little less than the politeness limits allow: requests take time too.
DERIVED_BUDGET_HEADROOM = 0.8


@dataclass(frozen=True, slots=True)
class PopulationPlan:
    mu: float
    fetch_rates_per_day: NDArray[np.float64]
    total_per_day: float
    estimated_freshness: float
    estimated_beta_currency: float


def host_caps_per_day(host_delays_seconds: ArrayLike) -> NDArray[np.float64]:
    """Most fetches per day a host can take at one request per delay (Kolobov et al. 2019)."""
    delays = np.maximum(np.asarray(host_delays_seconds, dtype=np.float64), 1e-3)
    return SECONDS_PER_DAY / delays


def derived_budget_per_day(
    host_delays_seconds: ArrayLike, concurrency: int, request_seconds: float = 0.0
) -> float:
    """The budget when none is configured: what politeness and concurrency allow, less headroom.

    Each host can take one request per delay; a daemon works ``concurrency`` hosts at once.
    """
    delays = np.asarray(host_delays_seconds, dtype=np.float64)
    if delays.size == 0:
        return 0.0
    per_host = SECONDS_PER_DAY / np.maximum(delays + request_seconds, 1e-3)
    busiest = np.sort(per_host)[::-1][:concurrency]
    return float(DERIVED_BUDGET_HEADROOM * min(per_host.sum(), busiest.sum()))


def collection_estimates(
    change_rates_per_day: ArrayLike,
    fetch_rates_per_day: ArrayLike,
    weights: ArrayLike,
    beta_days: float,
) -> tuple[float, float]:
    """Importance-weighted expected freshness and β-currency (MODEL.md section 4)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.size == 0 or w.sum() <= 0:
        return 1.0, 1.0
    fresh = freshness(change_rates_per_day, fetch_rates_per_day)
    current = beta_currency(change_rates_per_day, fetch_rates_per_day, beta_days)
    return float(np.dot(w, fresh) / w.sum()), float(np.dot(w, current) / w.sum())


def plan_population(
    change_rates_per_day: ArrayLike,
    weights: ArrayLike,
    budget_per_day: float,
    *,
    objective: Objective = "freshness",
    beta_days: float = 1.0,
    min_interval_days: float,
    max_interval_days: float,
    host_index: ArrayLike | None = None,
    host_delays_seconds: ArrayLike | None = None,
    mu_hint: float | None = None,
) -> PopulationPlan:
    """Solve μ for the budget under per-host caps; report the plan's expected quality."""
    rates = np.asarray(change_rates_per_day, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    caps = None if host_delays_seconds is None else host_caps_per_day(host_delays_seconds)
    result = solve_mu(
        rates,
        w,
        budget_per_day,
        objective,
        beta_days=beta_days,
        min_interval_days=min_interval_days,
        max_interval_days=max_interval_days,
        host_ids=host_index,
        host_caps_per_day=caps,
        mu_hint=mu_hint,
    )
    fresh, current = collection_estimates(rates, result.rates_per_day, w, beta_days)
    return PopulationPlan(result.mu, result.rates_per_day, result.total_per_day, fresh, current)
