"""Capacity planning: how often must a collection be re-fetched to stay (α, β)-current?

Brewington & Cybenko (2000), section 6, with mean lifetimes t = 1/λ distributed as a Weibull
w(t) of shape σ and scale θ days (their eq. 23). A page re-fetched every T days is β-current
with probability β/T + (1 − e^{−λ(T−β)}) / (λT) (eq. 22, 1 when T ≤ β); averaging over w gives
the collection's α (eq. 24). We also compute what the same fetch budget buys when each page
gets its own interval T(λ) (their closing remark, "T as a function of λ"), chosen by the
Lagrange condition of docs/MODEL.md section 5 applied to the β-currency objective.
Durations are days unless a name says otherwise.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from crawler.core.model import SECONDS_PER_DAY

FloatArray = npt.NDArray[np.float64]

BITS_PER_BYTE = 8
# Nodes of the midpoint rule in Weibull quantile space used by the optimal-schedule
# integrals; enough for ~1e-5 accuracy in α, and fast (vectorised bisections).
_QUANTILE_NODES = 4_000


# --- the Weibull distribution of mean lifetimes ----------------------------------------------


def weibull_pdf(t_days: FloatArray, shape: float, scale_days: float) -> FloatArray:
    """Density w(t) of mean lifetimes. Brewington & Cybenko eq. (10)/(23)."""
    z = np.asarray(t_days, dtype=np.float64) / scale_days
    return np.asarray((shape / scale_days) * z ** (shape - 1.0) * np.exp(-(z**shape)))


def weibull_quantiles(probabilities: FloatArray, shape: float, scale_days: float) -> FloatArray:
    """Inverse CDF of w: the mean lifetime below which a fraction p of pages lie."""
    p = np.asarray(probabilities, dtype=np.float64)
    return np.asarray(scale_days * (-np.log1p(-p)) ** (1.0 / shape))


def _check_weibull(shape: float, scale_days: float) -> None:
    if not (shape > 0 and scale_days > 0 and math.isfinite(shape) and math.isfinite(scale_days)):
        raise ValueError(f"Weibull shape and scale must be positive: {shape}, {scale_days}")


# --- β-currency of one page and of the collection ---------------------------------------------


def page_beta_currency(
    mean_lifetime_days: FloatArray | float, period_days: float, beta_days: float
) -> FloatArray:
    """Probability that a Poisson page with mean lifetime t, fetched every T days, is β-current.

    Brewington & Cybenko eq. (22): β/T + (1 − e^{−(T−β)/t}) t/T for T > β, else 1.
    """
    t = np.asarray(mean_lifetime_days, dtype=np.float64)
    if period_days <= beta_days:
        return np.ones_like(t)
    with np.errstate(divide="ignore", over="ignore"):
        stale_window = -np.expm1(-(period_days - beta_days) / t)
    return np.asarray(beta_days / period_days + (t / period_days) * stale_window)


def alpha_for_period(
    period_days: float, beta_days: float, shape: float, scale_days: float
) -> float:
    """Collection α reached by re-fetching every page every T days (uniform schedule).

    Brewington & Cybenko eq. (24): α(T, β) = ∫ w(t) [β/T + (t/T)(1 − e^{−(T−β)/t})] dt.
    """
    _check_weibull(shape, scale_days)
    if period_days <= 0 or beta_days < 0:
        raise ValueError("period must be positive and grace period non-negative")
    if period_days <= beta_days:
        return 1.0

    def integrand(p: float) -> float:
        # The page at quantile p of the lifetime distribution: t = scale (-log(1 - p))^(1/k).
        if p <= 0.0:
            return beta_days / period_days
        if p >= 1.0:
            return 1.0
        t = scale_days * (-math.log1p(-p)) ** (1.0 / shape)
        return float(page_beta_currency(t, period_days, beta_days))

    # Integrated over the quantile p rather than the lifetime t: the integrand is then bounded
    # (in [beta / T, 1]) on [0, 1], where the Weibull density is infinite at t = 0 for a shape
    # under 1 and its tail, mapped onto [scale, inf), can fall between quad's samples.
    from scipy import integrate  # scipy on first use (see crawler.core)
    total, _ = integrate.quad(integrand, 0.0, 1.0, limit=200)
    return float(min(1.0, total))


_SHORTEST_PERIOD_DAYS = 1e-3 / SECONDS_PER_DAY
"""The shortest fetch period ``required_period`` considers: a millisecond."""


def required_period(alpha: float, beta_days: float, shape: float, scale_days: float) -> float:
    """Longest uniform re-fetch period T (days) with α(T, β) ≥ alpha.

    α(T, β) decreases in T (from 1 at T = β towards 0), so a bracketing root finder applies.
    B&C's Fig. 19 is the level set of this function at α = 0.95.
    """
    _check_weibull(shape, scale_days)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1): {alpha}")
    if beta_days < 0:
        raise ValueError("grace period must be non-negative")
    low = max(beta_days, _SHORTEST_PERIOD_DAYS)
    if alpha_for_period(low, beta_days, shape, scale_days) <= alpha:
        # Only with no grace period (at T = beta, alpha is 1): so many lifetimes are shorter
        # than a millisecond that no fetch period reaches alpha.
        raise ValueError(
            f"alpha {alpha} is out of reach: even a fetch every "
            f"{low * SECONDS_PER_DAY:.3g} s leaves too many of these pages stale"
        )
    high = max(2.0 * low, 1.0)
    while alpha_for_period(high, beta_days, shape, scale_days) > alpha:
        high *= 2.0
        if high > 1e9:
            raise ValueError("alpha is reachable with any period: no finite requirement")
    from scipy import optimize  # scipy on first use (see crawler.core)

    def excess(period: float) -> float:
        return alpha_for_period(period, beta_days, shape, scale_days) - alpha

    return float(optimize.brentq(excess, low, high, xtol=min(1e-9, 1e-6 * low), rtol=1e-12))


# --- fetch rate and bandwidth --------------------------------------------------------------


def fetch_rate_per_day(pages: float, period_days: float) -> float:
    """Fetches per day to visit every one of `pages` once per period."""
    return pages / period_days


def bandwidth_bits_per_second(pages: float, page_size_bytes: float, period_days: float) -> float:
    """Effective bandwidth (bits/s) of re-fetching `pages` of `page_size_bytes` every T days.

    Brewington & Cybenko section 6: 800e6 pages / 8.5 days × 12 kB ≈ 104 Mbit/s.
    """
    if period_days <= 0:
        raise ValueError("period must be positive")
    return pages * page_size_bytes * BITS_PER_BYTE / (period_days * SECONDS_PER_DAY)


# --- the optimal variable-frequency schedule ----------------------------------------------


def _marginal_currency(x: FloatArray, beta_over_t: FloatArray) -> FloatArray:
    """∂P/∂f divided by t, as a function of x = (T − β)/t.

    With P(f) = βf + (f/λ)(1 − e^{−λ(1/f − β)}) (eq. 22 written in the fetch rate f = 1/T),
    ∂P/∂f = β + (1 − e^{−λ(T−β)})/λ − T e^{−λ(T−β)} = t [(b + 1)(1 − e^{−x}) − x e^{−x}],
    b = β/t. It rises from 0 at T = β to β + t as T → ∞, and P is concave in f, so the
    Lagrange condition ∂P/∂f = μ has one solution whenever μ < β + t.
    """
    return np.asarray((beta_over_t + 1.0) * (-np.expm1(-x)) - x * np.exp(-x))


def optimal_interval_days(
    mean_lifetime_days: FloatArray, beta_days: float, multiplier: float
) -> FloatArray:
    """Fetch interval T(t) maximising Σ P_β − μ Σ f for pages of mean lifetime t.

    Lagrange condition ∂P/∂f = μ (docs/MODEL.md section 5 with the β-currency of eq. 22 in place
    of freshness). Pages with β + t ≤ μ are not worth fetching at all: interval +inf.
    """
    t = np.asarray(mean_lifetime_days, dtype=np.float64)
    beta_over_t = beta_days / t
    target = multiplier / t
    fetched = target < beta_over_t + 1.0
    low = np.zeros_like(t)
    high = np.full_like(t, 745.0)  # e^{-745} underflows: the marginal is at its supremum
    for _ in range(52):
        middle = 0.5 * (low + high)
        too_short = _marginal_currency(middle, beta_over_t) < target
        low = np.where(too_short, middle, low)
        high = np.where(too_short, high, middle)
    x = 0.5 * (low + high)
    return np.where(fetched, beta_days + x * t, np.inf)


@dataclass(frozen=True, slots=True)
class OptimalSchedule:
    """What the Lagrange-optimal schedule reaches for a given mean fetch rate."""

    alpha: float
    multiplier: float
    mean_fetch_rate_per_day: float
    fraction_not_fetched: float


def _quantile_grid(shape: float, scale_days: float) -> FloatArray:
    nodes = (np.arange(_QUANTILE_NODES, dtype=np.float64) + 0.5) / _QUANTILE_NODES
    return weibull_quantiles(nodes, shape, scale_days)


def _schedule_on_grid(
    lifetimes_days: FloatArray, beta_days: float, multiplier: float
) -> tuple[FloatArray, FloatArray]:
    """(fetch rate per day, β-currency) of each grid page at multiplier μ."""
    intervals = optimal_interval_days(lifetimes_days, beta_days, multiplier)
    fetched = np.isfinite(intervals)
    safe_intervals = np.where(fetched, intervals, 1.0)
    rates = np.where(fetched, 1.0 / safe_intervals, 0.0)
    stale_window = -np.expm1(-(safe_intervals - beta_days) / lifetimes_days)
    currency = beta_days / safe_intervals + lifetimes_days / safe_intervals * stale_window
    return rates, np.where(fetched, currency, 0.0)


def _bisect_multiplier(
    lifetimes_days: FloatArray, beta_days: float, too_low: Callable[[FloatArray, FloatArray], bool]
) -> tuple[float, FloatArray, FloatArray]:
    """Bisection on log μ; too_low(rates, currency) says μ must grow (the schedule is over).

    Both the mean fetch rate and α fall as μ grows, so any target on either is monotone.
    """
    log_high = math.log(beta_days + float(lifetimes_days.max()))  # μ ≥ β + t: fetch nothing
    log_low = log_high - 60.0
    for _ in range(50):
        log_middle = 0.5 * (log_low + log_high)
        rates, currency = _schedule_on_grid(lifetimes_days, beta_days, math.exp(log_middle))
        if too_low(rates, currency):
            log_low = log_middle
        else:
            log_high = log_middle
    multiplier = math.exp(0.5 * (log_low + log_high))
    rates, currency = _schedule_on_grid(lifetimes_days, beta_days, multiplier)
    return multiplier, rates, currency


def optimal_alpha(
    mean_period_days: float, beta_days: float, shape: float, scale_days: float
) -> OptimalSchedule:
    """α of the best per-page schedule whose mean fetch rate equals that of period T.

    The budget ∫ w(t)/T(t) dt = 1/T is met by bisection on the one multiplier μ
    (docs/MODEL.md section 5); the integrals run over Weibull quantiles, midpoint rule.
    """
    _check_weibull(shape, scale_days)
    if mean_period_days <= 0 or beta_days < 0:
        raise ValueError("period must be positive and grace period non-negative")
    if mean_period_days <= beta_days:
        return OptimalSchedule(1.0, 0.0, 1.0 / mean_period_days, 0.0)
    target_rate = 1.0 / mean_period_days
    multiplier, rates, currency = _bisect_multiplier(
        _quantile_grid(shape, scale_days), beta_days,
        lambda rates, _currency: float(rates.mean()) > target_rate,
    )
    return OptimalSchedule(
        alpha=float(currency.mean()),
        multiplier=multiplier,
        mean_fetch_rate_per_day=float(rates.mean()),
        fraction_not_fetched=float(np.mean(rates == 0.0)),
    )


def optimal_required_period(
    alpha: float, beta_days: float, shape: float, scale_days: float
) -> float:
    """Longest mean fetch period (1 / mean fetch rate) with which the optimal schedule
    still reaches alpha."""
    _check_weibull(shape, scale_days)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1): {alpha}")
    _, rates, _ = _bisect_multiplier(
        _quantile_grid(shape, scale_days), beta_days,
        lambda _rates, currency: float(currency.mean()) > alpha,
    )
    return 1.0 / float(rates.mean())


# --- unit parsing -------------------------------------------------------------------------

_NUMBER = r"([0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)"
_DURATION_DAYS = {
    "s": 1.0 / SECONDS_PER_DAY, "m": 1.0 / 1440.0, "min": 1.0 / 1440.0, "h": 1.0 / 24.0,
    "d": 1.0, "w": 7.0,
}
# Decimal (SI) prefixes for KB/MB/GB: the paper's "800e6 pages / 8.5 days × 12 kilobytes
# = 104 Mbit/s" holds with 1 kB = 1000 bytes (with 1024 it would be 107 Mbit/s).
# Binary prefixes are spelled KiB/MiB/GiB.
_SIZE_BYTES = {
    "": 1.0, "b": 1.0, "kb": 1e3, "mb": 1e6, "gb": 1e9,
    "kib": 1024.0, "mib": 1024.0**2, "gib": 1024.0**3,
}


def parse_duration_days(text: str) -> float:
    """'1d', '1w', '6h', '30m', '45s', '152.2d' → days; a bare number is days."""
    match = re.fullmatch(_NUMBER + r"\s*([a-zA-Z]*)", text.strip())
    unit = match.group(2).lower() if match else ""
    if match is None or (unit and unit not in _DURATION_DAYS):
        raise ValueError(f"not a duration (use e.g. 1d, 1w, 6h, 30m, 45s): {text!r}")
    return float(match.group(1)) * (_DURATION_DAYS[unit] if unit else 1.0)


def parse_size_bytes(text: str) -> float:
    """'12KB' → 12000.0 bytes (KB = 1000; KiB = 1024); a bare number is bytes."""
    match = re.fullmatch(_NUMBER + r"\s*([a-zA-Z]*)", text.strip())
    unit = match.group(2).lower() if match else ""
    if match is None or unit not in _SIZE_BYTES:
        raise ValueError(f"not a size (use e.g. 12KB, 1.5MB, 16KiB): {text!r}")
    return float(match.group(1)) * _SIZE_BYTES[unit]


def parse_count(text: str) -> float:
    """'800e6', '150000000', '800_000_000' → a positive count."""
    value = float(text.strip())
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"not a positive count: {text!r}")
    return value
