"""Allocate a fetch budget across URLs: the Lagrange optimum with one multiplier μ.

docs/MODEL.md section 5. For every URL that gets fetched, w_i · ∂Objective/∂f_i = μ; one scalar μ,
found by bisection so that Σ f_i equals the budget, decides every URL, and a single URL's rate is
then a local computation from (λ_i, w_i, μ). That is what lets the daemon reschedule one URL
after each fetch from the stored μ, while a side task re-solves μ for the whole population.

Pure: no I/O, no clock. Rates are per day, times and intervals in days.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.core.periodic import PeriodicModel, next_update_after

try:
    from crawler.core import _speedups
except ImportError:  # built without a C compiler: the Python versions give the same results
    _speedups = None  # type: ignore[assignment]

FloatArray = NDArray[np.float64]
_Q = TypeVar("_Q", float, FloatArray)
Objective = Literal["freshness", "beta_currency", "harmonic", "age"]
OBJECTIVES: tuple[Objective, ...] = ("freshness", "beta_currency", "harmonic", "age")

DEFAULT_MIN_INTERVAL_DAYS = 60.0 / 86400.0
DEFAULT_MAX_INTERVAL_DAYS = 365.0
DEFAULT_BETA_DAYS = 1.0

# Above this many URLs, μ is first located on a strided sample, then polished on all of them:
# each pass over 10 million URLs costs a few hundred milliseconds.
_SAMPLE_SIZE = 100_000
_RELATIVE_BUDGET_TOLERANCE = 1e-7
# For the sampled path each pass is expensive; Σf within 0.001% of the budget is plenty.
_LARGE_BUDGET_TOLERANCE = 1e-5
_NEWTON_STEPS = 2
_CHUNK = 1 << 15


@dataclass(frozen=True, slots=True)
class PlanResult:
    """The solved multiplier and each URL's fetch rate (fetches per day)."""

    mu: float
    rates_per_day: FloatArray
    total_per_day: float
    # Hosts solved at their politeness cap, with their own multiplier μ_h ≥ μ.
    host_mu: dict[int, float] = field(default_factory=dict)


def _branch_series(q: _Q) -> _Q:
    """Corless et al. 1996, series of W₋₁ about the branch point −1/e (1 + s = −W₋₁)."""
    inner = 11.0 / 72.0 + q * (43.0 / 540.0 + q * (769.0 / 17280.0 + q * (221.0 / 8505.0)))
    return q * (1.0 + q * (1.0 / 3.0 + q * inner))


def _invert_excess_log(z: FloatArray, q_squared: FloatArray) -> FloatArray:
    """Solve s − log(1 + s) = z for s ≥ 0, given q² = 2 (1 − e^{−z}) (cheap for the callers).

    This is 1 + s = −W₋₁(−e^{−1−z}); the start is the Lambert-W branch-point series in q (good
    for q < 1.2) or the large-z asymptote, then two Newton steps (the function is convex).
    """
    q = np.sqrt(np.maximum(q_squared, 0.0))
    s = _branch_series(q)
    far = q >= 1.2
    if far.any():
        z_far = z[far]
        s[far] = z_far + np.log(1.0 + z_far + np.log(1.0 + z_far))
    for _ in range(_NEWTON_STEPS):
        with np.errstate(divide="ignore", invalid="ignore"):
            step = (s - np.log(1.0 + s) - z) * (1.0 + s) / s
        # For tiny s the series is exact to rounding and log(1 + s) would cancel: keep it.
        s = np.where(s > 1e-3, s - step, s)
    return np.asarray(s, dtype=np.float64)


def _invert_age_condition(target: FloatArray) -> FloatArray:
    """Solve r²/2 − 1 + (1 + r) e^{−r} = target for r ≥ 0 (convex, increasing)."""
    target = np.maximum(target, 0.0)
    # Starts: r ≈ (3 target)^{1/3} for small targets, √(2 (target + 1)) for large ones; Newton
    # on a convex increasing function converges from either side after its first step.
    series = np.cbrt(3.0 * target) * (1.0 + 0.125 * np.cbrt(3.0 * target))
    r = np.where(target < 0.5, series, np.sqrt(2.0 * (target + 1.0)) - 1.0)
    for _ in range(12):
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            value = np.where(
                r < 0.01,
                r**3 / 3.0 - r**4 / 8.0 + r**5 / 30.0,
                np.square(r) / 2.0 + np.expm1(-r) + r * np.exp(-r),
            )
            slope = r * -np.expm1(-r)
            step = (value - target) / slope
        r = np.where(r > 0.0, np.maximum(r - step, 0.5 * r), 0.0)
    # Below r ≈ 1e-3 the left side cancels to rounding; its series r³/3 − r⁴/8 is exact there.
    return np.asarray(np.where(series < 1e-3, series, r), dtype=np.float64)


def _unbounded_rates(
    change_rates: FloatArray, weights: FloatArray, mu: FloatArray | float, objective: Objective,
    beta_days: float,
) -> FloatArray:
    """Each URL's rate from the Lagrange condition, before min/max interval bounds."""
    mu_array = np.asarray(mu, dtype=np.float64)
    if objective == "harmonic":
        # Kolobov et al. 2019: ρ = (−λ + √(λ² + 4wλ/μ)) / 2.
        with np.errstate(divide="ignore"):
            ratio = 4.0 * weights * change_rates / mu_array
        denominator = change_rates + np.sqrt(np.square(change_rates) + ratio)
        with np.errstate(divide="ignore", invalid="ignore"):
            rates = np.where(denominator > 0.0, (ratio / 2.0) / denominator, 0.0)
        return np.asarray(np.where(mu_array <= 0.0, np.inf, rates), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        if objective == "age":
            # −w dA/df = μ  ⇔  r²/2 − 1 + (1 + r)e^{−r} = μ λ² / w  (docs/MODEL.md section 4 age).
            r = _invert_age_condition(mu_array * np.square(change_rates) / weights)
            fetched = r > 0.0
        else:
            # Freshness, Cho & Garcia-Molina 2003: 1 − (1 + r)e^{−r} = μλ/w, r = λ/f.
            # β-currency, Brewington & Cybenko eq. (22) differentiated: with s = λT, b = λβ,
            # (1 + s)e^{b−s} = 1 + b − μλ/w. Both are s − log(1 + s) = z, so one inverse serves.
            marginal = mu_array * change_rates / weights
            if objective == "beta_currency":
                b = change_rates * beta_days
                headroom = 1.0 + b - marginal
                fetched = headroom > 1e-300
                headroom = np.where(fetched, headroom, 1.0)
                # q² = 2 (1 − e^{−z}) = 2 (1 − headroom e^{−b}).
                q_squared = 2.0 * (1.0 - headroom * np.exp(-b))
                z = b - np.log(headroom)
            else:
                headroom = 1.0 - marginal
                fetched = headroom > 1e-300
                headroom = np.where(fetched, headroom, 1.0)
                q_squared = 2.0 * (1.0 - headroom)
                z = -np.log(headroom)
            r = _invert_excess_log(z, q_squared)
            fetched &= r > 0.0
        # Starved pages (μλ/w ≥ 1: not worth chasing) and pages that never change get 0 here;
        # the bounds then decide. Zero weight also lands here through r = ∞.
        rates = np.divide(change_rates, r, out=np.zeros(r.shape), where=fetched)
    if mu_array.ndim > 0 or float(mu_array) <= 0.0:
        # μ = 0: every fetch is free.
        rates = np.where(mu_array <= 0.0, np.inf, rates)
    return rates


def _bounded_rates(
    change_rates: FloatArray, weights: FloatArray, mu: FloatArray | float, objective: Objective,
    beta_days: float, low: FloatArray, high: FloatArray,
) -> FloatArray:
    """Rates within bounds, computed in cache-sized chunks (several times faster at 10⁷ URLs)."""
    out = np.empty(change_rates.size)
    mu_array = np.asarray(mu, dtype=np.float64)
    per_url_mu = mu_array.ndim > 0
    for start in range(0, change_rates.size, _CHUNK):
        part = slice(start, start + _CHUNK)
        part_mu = mu_array[part] if per_url_mu else float(mu_array)
        raw = _unbounded_rates(change_rates[part], weights[part], part_mu, objective, beta_days)
        np.clip(raw, low[part], high[part], out=out[part])
    return out


def _bounds(
    size: int, min_interval_days: ArrayLike, max_interval_days: ArrayLike
) -> tuple[FloatArray, FloatArray]:
    with np.errstate(divide="ignore"):
        low = 1.0 / np.broadcast_to(np.asarray(max_interval_days, dtype=np.float64), (size,))
        high = 1.0 / np.broadcast_to(np.asarray(min_interval_days, dtype=np.float64), (size,))
    return low, high


def fetch_rates(
    change_rates_per_day: ArrayLike,
    weights: ArrayLike,
    mu: float,
    objective: Objective = "freshness",
    *,
    beta_days: float = DEFAULT_BETA_DAYS,
    min_interval_days: ArrayLike = DEFAULT_MIN_INTERVAL_DAYS,
    max_interval_days: ArrayLike = DEFAULT_MAX_INTERVAL_DAYS,
) -> FloatArray:
    """Vectorised: every URL's fetch rate (per day) for a given μ, within its interval bounds.

    A URL the optimum gives no fetches (it changes too fast to be worth chasing, or never
    changes) is still checked once per ``max_interval_days``.
    """
    change_rates = np.atleast_1d(np.asarray(change_rates_per_day, dtype=np.float64))
    weight_array = np.broadcast_to(np.asarray(weights, dtype=np.float64), change_rates.shape)
    low, high = _bounds(change_rates.size, min_interval_days, max_interval_days)
    return _bounded_rates(change_rates, weight_array, mu, objective, beta_days, low, high)


def _scalar_unbounded_rate(
    change_rate: float, weight: float, mu: float, objective: Objective, beta_days: float
) -> float:
    """Pure-Python twin of _unbounded_rates for one URL (no numpy call overhead)."""
    if mu <= 0.0:
        return math.inf
    if change_rate <= 0.0 or weight <= 0.0:
        return 0.0
    if objective == "harmonic":
        ratio = 4.0 * weight * change_rate / mu
        return (ratio / 2.0) / (change_rate + math.sqrt(change_rate * change_rate + ratio))
    if objective == "age":
        one_url = _unbounded_rates(
            np.array([change_rate]), np.array([weight]), mu, objective, beta_days
        )
        return float(one_url[0])
    marginal = mu * change_rate / weight
    b = change_rate * beta_days if objective == "beta_currency" else 0.0
    headroom = 1.0 + b - marginal
    if headroom <= 1e-300:
        return 0.0
    z = b - math.log(headroom)
    q = math.sqrt(max(2.0 * (1.0 - headroom * math.exp(-b)), 0.0))
    s = _branch_series(q) if q < 1.2 else z + math.log(1.0 + z + math.log(1.0 + z))
    for _ in range(_NEWTON_STEPS + 1):
        if s <= 1e-3:
            break
        s -= (s - math.log(1.0 + s) - z) * (1.0 + s) / s
    return change_rate / s if s > 0.0 else 0.0


def fetch_rate_for(
    change_rate_per_day: float,
    weight: float,
    mu: float,
    objective: Objective = "freshness",
    min_interval_days: float = DEFAULT_MIN_INTERVAL_DAYS,
    max_interval_days: float = DEFAULT_MAX_INTERVAL_DAYS,
    *,
    beta_days: float = DEFAULT_BETA_DAYS,
) -> float:
    """One URL's fetch rate from the stored μ: what the daemon computes after each fetch.

    In C when ``crawler.core._speedups`` is built (the same arithmetic, to the bit), but for
    the "age" objective, which is solved in numpy."""
    if _speedups is not None and objective != "age":
        return _speedups.fetch_rate(
            change_rate_per_day, weight, mu, objective, min_interval_days, max_interval_days,
            beta_days, _NEWTON_STEPS,
        )
    rate = _scalar_unbounded_rate(change_rate_per_day, weight, mu, objective, beta_days)
    low, high = rate_bounds(min_interval_days, max_interval_days)
    return min(max(rate, low), high)


def rate_bounds(min_interval_days: float, max_interval_days: float) -> tuple[float, float]:
    """One URL's (least, most) fetch rate per day: 1 / its longest and shortest interval."""
    low = 1.0 / max_interval_days if max_interval_days > 0.0 else math.inf
    high = 1.0 / min_interval_days if min_interval_days > 0.0 else math.inf
    return low, high


def _start_mu(change_rates: FloatArray, weights: FloatArray, budget_per_day: float) -> float:
    # Slow-page approximation f ≈ √(wλ / (2μ)) summed and solved for μ (docs/MODEL.md section 5).
    root_sum = float(np.sum(np.sqrt(np.maximum(weights * change_rates, 0.0) / 2.0)))
    if root_sum <= 0.0 or budget_per_day <= 0.0:
        return 1.0
    return (root_sum / budget_per_day) ** 2


def _bisect_log_mu(
    total: _TotalRate, budget_per_day: float, start_mu: float, bracket_factor: float,
    tolerance: float = _RELATIVE_BUDGET_TOLERANCE,
) -> float:
    """Bisection on log μ for total(μ) = budget; total is non-increasing in μ."""
    low = start_mu / bracket_factor
    high = start_mu * bracket_factor
    while total(low) < budget_per_day:
        if low < 1e-250:
            # The objective saturates below the budget (β-currency never fetches faster than
            # 1/β): spend what is worth spending.
            return low
        low /= 16.0
    for _ in range(200):
        if total(high) <= budget_per_day:
            break
        high *= 16.0
    low, high = narrow_log_mu(total, budget_per_day, low, high, tolerance, 200, 1e-13)
    return low if low == high else math.sqrt(low * high)


def narrow_log_mu(
    total: Callable[[float], float], budget: float, low: float, high: float, tolerance: float,
    steps: int, resolution: float,
) -> tuple[float, float]:
    """Bisection on log μ of a bracket [low, high] around total(μ) = budget (total is
    non-increasing in μ): (μ, μ) once total(μ) is within ``tolerance`` of the budget, else the
    bracket after ``steps``, or once high / low < 1 + ``resolution``."""
    for _ in range(steps):
        middle = math.sqrt(low * high)
        value = total(middle)
        if abs(value - budget) <= tolerance * budget:
            return middle, middle
        if value > budget:
            low = middle
        else:
            high = middle
        if high / low < 1.0 + resolution:
            break
    return low, high


@dataclass(slots=True)
class _TotalRate:
    """Σ f_i(μ) over a fixed set of URLs, for the μ search."""

    change_rates: FloatArray
    weights: FloatArray
    low: FloatArray
    high: FloatArray
    objective: Objective
    beta_days: float
    _last: tuple[float, FloatArray] | None = field(default=None, init=False)

    def select(self, urls: NDArray[np.bool_] | slice) -> _TotalRate:
        return _TotalRate(
            self.change_rates[urls], self.weights[urls], self.low[urls], self.high[urls],
            self.objective, self.beta_days,
        )

    def rates_at(self, mu: FloatArray | float) -> FloatArray:
        """Every URL's bounded rate for one μ, or for a μ per URL."""
        return _bounded_rates(
            self.change_rates, self.weights, mu, self.objective, self.beta_days, self.low, self.high
        )

    def rates(self, mu: float) -> FloatArray:
        if self._last is not None and self._last[0] == mu:
            return self._last[1]
        rates = self.rates_at(mu)
        self._last = (mu, rates)
        return rates

    def __call__(self, mu: float) -> float:
        return float(np.sum(self.rates(mu)))


def _solve_unconstrained(
    total: _TotalRate, budget_per_day: float, mu_hint: float | None = None
) -> float:
    """μ with Σ f(μ) = budget, or 0 / inf when the bounds make the budget unreachable."""
    if total.change_rates.size == 0:
        return math.inf
    if budget_per_day >= float(np.sum(total.high)):
        return 0.0
    if budget_per_day <= float(np.sum(total.low)):
        return math.inf
    if mu_hint is not None and 0.0 < mu_hint < math.inf:
        return _polish(total, budget_per_day, mu_hint, -0.5, _RELATIVE_BUDGET_TOLERANCE)
    start = _start_mu(total.change_rates, total.weights, budget_per_day)
    size = total.change_rates.size
    if size <= _SAMPLE_SIZE:
        return _bisect_log_mu(total, budget_per_day, start, 4.0)
    # Locate μ on an evenly strided sample with the budget scaled down, then polish on all.
    stride = size // _SAMPLE_SIZE
    sample = total.select(slice(None, None, stride))
    sample_budget = budget_per_day * sample.change_rates.size / size
    sample_budget = min(max(sample_budget, float(np.sum(sample.low))), float(np.sum(sample.high)))
    sample_mu = _bisect_log_mu(sample, sample_budget, start, 4.0, tolerance=1e-5)
    # d log Σf / d log μ on the sample: the slope for the first secant step on all URLs.
    probe = math.log(max(sample(sample_mu * 1.01), 1e-300) / max(sample(sample_mu), 1e-300))
    elasticity = probe / math.log(1.01) if probe < 0.0 else -0.5
    return _polish(total, budget_per_day, sample_mu, elasticity)


def _polish(
    total: _TotalRate, budget_per_day: float, start_mu: float, elasticity: float,
    tolerance: float = _LARGE_BUDGET_TOLERANCE,
) -> float:
    """Secant steps on (log μ, log Σf) from a close start: two or three passes over all URLs."""
    log_budget = math.log(budget_per_day)

    def excess(log_mu: float) -> float:
        return math.log(max(total(math.exp(log_mu)), 1e-300)) - log_budget

    previous_x = math.log(start_mu)
    previous_f = excess(previous_x)
    if abs(previous_f) <= tolerance:
        return start_mu
    x = previous_x - previous_f / elasticity
    f = excess(x)
    for _ in range(20):
        if abs(f) <= tolerance:
            return math.exp(x)
        if f == previous_f:
            break
        next_x = x - f * (x - previous_x) / (f - previous_f)
        previous_x, previous_f = x, f
        x = next_x
        f = excess(x)
    # The secant wandered (a kink from the bounds): fall back to plain bisection.
    return _bisect_log_mu(total, budget_per_day, math.exp(x), 1.1)


def _solve_hosts_at_cap(
    total: _TotalRate, host_index: NDArray[np.intp], caps: FloatArray
) -> FloatArray:
    """Per-host μ_h with Σ_{i ∈ h} f_i = cap_h, all hosts bisected together (log scale)."""
    host_count = caps.size
    log_low = np.full(host_count, -60.0)
    log_high = np.full(host_count, 60.0)
    for _ in range(90):
        log_mid = (log_low + log_high) / 2.0
        rates = total.rates_at(np.exp(log_mid[host_index]))
        sums = np.bincount(host_index, weights=rates, minlength=host_count)
        over = sums > caps
        log_low = np.where(over, log_mid, log_low)
        log_high = np.where(over, log_high, log_mid)
        if float(np.max(log_high - log_low)) < 1e-9:
            break
    return np.asarray(np.exp((log_low + log_high) / 2.0), dtype=np.float64)


def solve_mu(
    change_rates_per_day: ArrayLike,
    weights: ArrayLike,
    budget_per_day: float,
    objective: Objective = "freshness",
    *,
    beta_days: float = DEFAULT_BETA_DAYS,
    min_interval_days: ArrayLike = DEFAULT_MIN_INTERVAL_DAYS,
    max_interval_days: ArrayLike = DEFAULT_MAX_INTERVAL_DAYS,
    host_ids: ArrayLike | None = None,
    host_caps_per_day: ArrayLike | None = None,
    mu_hint: float | None = None,
) -> PlanResult:
    """Find μ so that the URLs' fetch rates sum to the budget, honouring per-host caps.

    ``host_ids`` are small non-negative integers indexing ``host_caps_per_day``. A host whose
    optimal total exceeds its cap is solved at the cap with its own μ_h, fixed, and the
    remaining URLs re-solved with the remaining budget, until no host is over (Kolobov et al.,
    SIGIR 2019). ``mu_hint`` (the previous solution) makes a re-solve a few secant steps.
    """
    change_rates = np.atleast_1d(np.asarray(change_rates_per_day, dtype=np.float64))
    size = change_rates.size
    weight_array = np.ascontiguousarray(
        np.broadcast_to(np.asarray(weights, dtype=np.float64), (size,))
    )
    low, high = _bounds(size, min_interval_days, max_interval_days)
    total = _TotalRate(change_rates, weight_array, low, high, objective, beta_days)
    if host_ids is None or host_caps_per_day is None:
        mu = _solve_unconstrained(total, budget_per_day, mu_hint)
        rates = total.rates(mu)
        return PlanResult(mu, rates, float(np.sum(rates)))

    hosts = np.asarray(host_ids, dtype=np.intp)
    caps = np.asarray(host_caps_per_day, dtype=np.float64)
    rates = np.zeros(size)
    free = np.ones(size, dtype=bool)
    host_mu: dict[int, float] = {}
    remaining_budget = budget_per_day
    mu = math.inf
    for _ in range(caps.size + 1):
        subset = total.select(free)
        mu = _solve_unconstrained(subset, max(remaining_budget, 0.0))
        free_rates = subset.rates(mu)
        rates[free] = free_rates
        host_totals = np.bincount(hosts[free], weights=free_rates, minlength=caps.size)
        over_hosts = np.flatnonzero(host_totals > caps * (1.0 + 1e-9))
        if over_hosts.size == 0:
            break
        # Capped hosts are solved at their cap; renumber them 0..k−1 for the joint bisection.
        capped_urls = free & np.isin(hosts, over_hosts)
        local_index = np.searchsorted(over_hosts, hosts[capped_urls])
        capped = total.select(capped_urls)
        host_mus = _solve_hosts_at_cap(capped, local_index, caps[over_hosts])
        rates[capped_urls] = capped.rates_at(host_mus[local_index])
        for host, host_multiplier in zip(over_hosts.tolist(), host_mus.tolist(), strict=True):
            host_mu[int(host)] = float(host_multiplier)
        remaining_budget -= float(np.sum(rates[capped_urls]))
        free &= ~capped_urls
        if not free.any():
            break
    return PlanResult(mu, rates, float(np.sum(rates)), host_mu)


def next_fetch_time(
    last_fetch_days: float,
    fetch_rate_per_day: float,
    periodic: PeriodicModel | None = None,
    *,
    max_interval_days: float = DEFAULT_MAX_INTERVAL_DAYS,
    min_update_delay_days: float = 60.0 / 86400.0,
    saw_change: bool = True,
) -> float:
    """When to fetch next: evenly spaced at 1/f, or just after an expected periodic update.

    Evenly spaced fetches beat random ones (docs/MODEL.md section 4). For a page that updates on a
    clock (Wolf et al.'s quasi-deterministic pages, Grimes & O'Brien's hourly and daily pages),
    the fetch goes shortly after the latest expected update no later than the evenly spaced
    time, so the interval stays between 1/f − period and 1/f; when the page updates less often
    than 1/f, it waits for the next update instead of fetching an unchanged page.
    """
    if fetch_rate_per_day <= 0.0 or not math.isfinite(1.0 / fetch_rate_per_day):
        interval = max_interval_days
    else:
        interval = min(1.0 / fetch_rate_per_day, max_interval_days)
    target = last_fetch_days + interval
    if periodic is None or periodic.period_days <= 0.0:
        return target
    # Wait out the update's jitter: three standard deviations past the expected time.
    delay = max(3.0 * periodic.jitter_days, min_update_delay_days)
    period = periodic.period_days
    if period <= interval:
        candidate = next_update_after(periodic, target - delay - period) + delay
    else:
        candidate = next_update_after(periodic, last_fetch_days - delay) + delay
    # A fetch that saw the update inside the jitter window would otherwise be repeated moments
    # later: aim at the next cycle. One that came early and saw nothing retries at the target.
    if saw_change and candidate - last_fetch_days < 0.5 * period:
        candidate += period
    return candidate
