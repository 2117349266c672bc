"""Plan a whole population's fetch rates for a budget, and judge the result.

Pure: the daemon's planner task and the tests call it with arrays read from the database.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.core.freshness import beta_currency, freshness
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.plan import Objective, solve_mu

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


BUDGET_CONFIGURED = 1.0  # planner_state "budget_configured": CRAWLER_BUDGET_PER_DAY was set
BUDGET_DEFAULT = 0.0


def default_budget_per_day(urls: int, default_interval_seconds: float) -> float:
    """What uniform revisits at the default interval spend: each URL once per interval.

    The polite default: with no budget configured the optimum redistributes what
    the uniform schedule would spend, instead of the most politeness allows.
    """
    return max(urls, 0) * SECONDS_PER_DAY / default_interval_seconds


def budget_in_force(
    configured_per_day: float | None, urls: int, default_interval_seconds: float,
    politeness_cap_per_day: float,
) -> tuple[float, float]:
    """The budget the planner spends and where it came from (BUDGET_CONFIGURED or _DEFAULT).

    An explicit budget replaces the default; the default never exceeds what politeness allows.
    """
    if configured_per_day is not None:
        return configured_per_day, BUDGET_CONFIGURED
    default = default_budget_per_day(urls, default_interval_seconds)
    return min(default, politeness_cap_per_day), BUDGET_DEFAULT


def collection_estimates(
    change_rates_per_day: ArrayLike, fetch_rates_per_day: ArrayLike, weights: ArrayLike,
    beta_days: float,
) -> tuple[float, float]:
    """Importance-weighted expected freshness and β-currency (docs/MODEL.md section 4)."""
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
    min_interval_days: ArrayLike,
    max_interval_days: ArrayLike,
    host_index: ArrayLike | None = None,
    host_delays_seconds: ArrayLike | None = None,
    mu_hint: float | None = None,
) -> PopulationPlan:
    """Solve μ for the budget under per-host caps; report the plan's expected quality.

    The interval bounds are one value for all URLs or one per URL (a watcher's own bounds,
    crawler.core.url_bounds): box constraints in the same solve."""
    rates = np.asarray(change_rates_per_day, dtype=np.float64)
    w = np.asarray(weights, dtype=np.float64)
    caps = None if host_delays_seconds is None else host_caps_per_day(host_delays_seconds)
    result = solve_mu(
        rates, w, budget_per_day, objective, beta_days=beta_days,
        min_interval_days=min_interval_days, max_interval_days=max_interval_days,
        host_ids=host_index, host_caps_per_day=caps, mu_hint=mu_hint,
    )
    fresh, current = collection_estimates(rates, result.rates_per_day, w, beta_days)
    return PopulationPlan(result.mu, result.rates_per_day, result.total_per_day, fresh, current)


def fleet_budget_per_day(all_hosts_per_day: float, busiest_hosts_per_day: float) -> float:
    """The derived budget of a whole fleet, from two sums the database computes.

    ``all_hosts_per_day`` is Σ over hosts of one request per politeness delay;
    ``busiest_hosts_per_day`` is the same sum over the C fastest hosts, where C is the summed
    concurrency of every live daemon. Same rule as ``derived_budget_per_day``.
    """
    return float(DERIVED_BUDGET_HEADROOM * max(0.0, min(all_hosts_per_day, busiest_hosts_per_day)))


@dataclass(frozen=True, slots=True)
class IdStrata:
    """A stratified sample of a sequence key: one random start in each of equal-width ranges."""

    lows: NDArray[np.int64]
    starts: NDArray[np.int64]
    ends: NDArray[np.int64]  # exclusive


def id_strata(min_id: int, max_id: int, strata: int, rng: np.random.Generator) -> IdStrata:
    """Split [min_id, max_id] into ``strata`` ranges and draw a random start in each.

    The database reads a few rows from each start upward (primary-key index), so the sample
    spreads over the whole key space at a cost bounded by its size, not the table's.
    """
    width = max(1, max_id - min_id + 1)
    count = max(1, min(strata, width))
    edges = min_id + (np.arange(count + 1, dtype=np.float64) * width / count).astype(np.int64)
    edges[-1] = max_id + 1
    lows, highs = edges[:-1], edges[1:]
    starts = lows + (rng.random(count) * (highs - lows)).astype(np.int64)
    return IdStrata(lows.astype(np.int64), starts.astype(np.int64), highs.astype(np.int64))


def estimated_population(
    strata: IdStrata, rows_read: NDArray[np.int64], last_ids: NDArray[np.int64], per_stratum: int
) -> float:
    """Live rows in the key space, from each stratum's density of live rows after its start.

    A stratum that returned fewer than ``per_stratum`` rows was read to its end: its density
    is exact over [start, end). One that filled up covered [start, last id]. Each density is
    extrapolated over the stratum's whole width (stratified estimator of a total).
    """
    starts, ends = strata.starts, strata.ends
    widths_from_start = np.where(rows_read < per_stratum, ends - starts, last_ids - starts + 1)
    density = rows_read / np.maximum(widths_from_start, 1)
    return float(np.sum(density * (ends - strata.lows)))
