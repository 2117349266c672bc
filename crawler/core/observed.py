"""Pages whose changes are announced, beside pages learned only by fetching: one budget, one μ.

docs/MODEL.md section 9 (Kolobov, Peres, Lu & Horvitz, NeurIPS 2019). An *incompletely
observed* page is learned only by fetching it: it gets a fetch rate ρ, exactly as
``crawler.core.plan`` solves it. A *completely observed* page announces every change: the
crawler fetches it right after an announced change with a probability p, so it spends p λ
fetches a day and never fetches an unchanged copy.

Both objectives (harmonic staleness, freshness) are separable and concave in the spending, so
one multiplier μ shared by the two groups decides every page: for a complete page spending
r = p λ, harmonic gives p = min(1, w / (μ λ)), and freshness (linear in r) p = 1 when
w / λ > μ, 0 below. Per-host politeness caps are applied as the planner applies them.

Noisy hints (a source that misses changes or announces ones that did not happen) are not
complete observations; ``changed_probability`` and ``hinted_fetch_time`` turn them into a
posterior that moves an incomplete page's next fetch (section 9.3).

Rates are per day, times and intervals in days.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np
from numpy.typing import ArrayLike, NDArray

from crawler.core import plan

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]
ObservedObjective = Literal["harmonic", "freshness"]
OBSERVED_OBJECTIVES: tuple[ObservedObjective, ...] = ("harmonic", "freshness")

_RELATIVE_BUDGET_TOLERANCE = 1e-10


@dataclass(frozen=True, slots=True)
class ObservedPlan:
    """The solved multiplier and every page's share of the budget.

    ``rates_per_day`` is every page's expected fetches a day: ρ_i for an incomplete page, p_i λ_i
    for a complete one. ``fetch_probabilities`` is p_i for a complete page, NaN for the others.
    ``objective_value`` is the predicted harmonic cost (lower is better) or weighted freshness
    (higher is better) of the allocation.
    """

    mu: float
    rates_per_day: FloatArray
    fetch_probabilities: FloatArray
    complete: BoolArray
    total_per_day: float
    objective: ObservedObjective
    objective_value: float
    host_mu: dict[int, float] = field(default_factory=dict)


def complete_rate_bounds(
    change_rates: FloatArray, low: FloatArray, high: FloatArray
) -> tuple[FloatArray, FloatArray]:
    """A complete page's spending bounds: the interval bounds, and never more than one fetch per
    change (p ≤ 1), so r ∈ [min(low, λ), min(high, λ)]."""
    rates = np.maximum(change_rates, 0.0)
    return np.minimum(low, rates), np.minimum(high, rates)


def _complete_rates(
    change_rates: FloatArray, weights: FloatArray, mu: float, objective: ObservedObjective,
    low: FloatArray, high: FloatArray,
) -> FloatArray:
    """Each complete page's spending r = p λ for μ, within [low, high] (``complete_rate_bounds``).

    Freshness is linear in r: the most where w / λ > μ, the least below; at μ = w / λ exactly
    any r is optimal, and the solver splits what the budget leaves (``_solve_group``).
    """
    if objective == "harmonic":
        with np.errstate(divide="ignore"):
            wanted = weights / mu if mu > 0.0 else np.full(weights.shape, np.inf)
        return np.asarray(np.clip(wanted, low, high), dtype=np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        value = np.where(change_rates > 0.0, weights / change_rates, np.inf)
    return np.asarray(np.where(value > mu, high, low), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class _Group:
    """A set of pages solved under one budget: the incomplete ones with their interval bounds
    (as ``plan.fetch_rates`` takes them), the complete ones with their spending bounds."""

    incomplete_rates: FloatArray
    incomplete_weights: FloatArray
    min_interval_days: FloatArray
    max_interval_days: FloatArray
    complete_rates: FloatArray
    complete_weights: FloatArray
    complete_low: FloatArray
    complete_high: FloatArray
    objective: ObservedObjective

    def incomplete(self, mu: float) -> FloatArray:
        if self.incomplete_rates.size == 0:
            return np.zeros(0)
        return plan.fetch_rates(
            self.incomplete_rates, self.incomplete_weights, mu, self.objective,
            min_interval_days=self.min_interval_days, max_interval_days=self.max_interval_days,
        )

    def complete(self, mu: float) -> FloatArray:
        return _complete_rates(
            self.complete_rates, self.complete_weights, mu, self.objective, self.complete_low,
            self.complete_high,
        )

    def total(self, mu: float) -> float:
        return float(np.sum(self.incomplete(mu)) + np.sum(self.complete(mu)))

    def bound_totals(self) -> tuple[float, float]:
        with np.errstate(divide="ignore"):
            low = float(np.sum(1.0 / self.max_interval_days)) + float(np.sum(self.complete_low))
            high = float(np.sum(1.0 / self.min_interval_days)) + float(np.sum(self.complete_high))
        return low, high


def _bisect(total: Callable[[float], float], budget: float) -> tuple[float, float]:
    """A bracket [low, high] of log μ around total(μ) = budget (total is non-increasing in μ),
    narrowed until total is within tolerance or the bracket cannot shrink any more."""
    low, high = 1.0, 1.0
    while total(low) < budget and low > 1e-280:
        low /= 16.0
    while total(high) > budget and high < 1e280:
        high *= 16.0
    return plan.narrow_log_mu(total, budget, low, high, _RELATIVE_BUDGET_TOLERANCE, 400, 1e-14)


def _solve_group(group: _Group, budget: float) -> tuple[float, FloatArray, FloatArray]:
    """μ and the two groups' spending for one budget (the budget clipped to what the bounds
    allow: μ = 0 when every page can have its most, ∞ when the least is already too much)."""
    floor, ceiling = group.bound_totals()
    if group.incomplete_rates.size + group.complete_rates.size == 0:
        return math.inf, np.zeros(0), np.zeros(0)
    if budget >= ceiling:
        return 0.0, group.incomplete(0.0), group.complete(0.0)
    if budget <= floor:
        return math.inf, group.incomplete(math.inf), group.complete(math.inf)
    low, high = _bisect(group.total, budget)
    if low == high:
        return low, group.incomplete(low), group.complete(low)
    # The total jumps inside the final bracket (docs/MODEL.md 9.1): both ends are allocations
    # at the same μ to rounding, and what the budget leaves between them goes first to the
    # complete pages that switch (worth w / λ a fetch), then to the incomplete ones.
    incomplete_low, complete_low = group.incomplete(low), group.complete(low)
    incomplete_high, complete_high = group.incomplete(high), group.complete(high)
    leftover = budget - float(np.sum(incomplete_high) + np.sum(complete_high))
    complete_room = float(np.sum(complete_low - complete_high))
    complete_share = _share(leftover, complete_room)
    leftover -= complete_share * complete_room
    incomplete_share = _share(leftover, float(np.sum(incomplete_low - incomplete_high)))
    return (
        math.sqrt(low * high),
        incomplete_high + incomplete_share * (incomplete_low - incomplete_high),
        complete_high + complete_share * (complete_low - complete_high),
    )


def _share(amount: float, room: float) -> float:
    return min(max(amount / room, 0.0), 1.0) if room > 0.0 else 0.0


def harmonic_cost(
    change_rates: ArrayLike, weights: ArrayLike, complete: ArrayLike, rates: ArrayLike
) -> float:
    """Σ w ln(1 + λ/ρ) over incomplete pages plus Σ −w ln(r/λ) over complete ones (the cost rate
    of Kolobov et al. 2019; a page that never changes costs nothing, one never fetched ∞)."""
    lam, w, done, r = _arrays(change_rates, weights, complete, rates)
    with np.errstate(divide="ignore", invalid="ignore"):
        incomplete = np.where(lam > 0.0, w * np.log1p(lam / r), 0.0)
        announced = np.where(lam > 0.0, -w * np.log(np.minimum(r / lam, 1.0)), 0.0)
    return float(np.sum(np.where(done, announced, incomplete)))


def expected_freshness(
    change_rates: ArrayLike, weights: ArrayLike, complete: ArrayLike, rates: ArrayLike
) -> float:
    """Σ w F: (1 − e^{−λ/ρ}) ρ/λ for an incomplete page fetched every 1/ρ days, p = r/λ for a
    complete one (a page that never changes is always fresh)."""
    lam, w, done, r = _arrays(change_rates, weights, complete, rates)
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        ratio = lam / r
        incomplete = np.where(
            r > 0.0, np.where(ratio > 1e-9, -np.expm1(-ratio) / ratio, 1.0 - ratio / 2.0), 0.0
        )
        announced = np.minimum(r / lam, 1.0)
    fresh = np.where(lam > 0.0, np.where(done, announced, incomplete), 1.0)
    return float(np.sum(w * fresh))


def _arrays(
    change_rates: ArrayLike, weights: ArrayLike, complete: ArrayLike, rates: ArrayLike
) -> tuple[FloatArray, FloatArray, BoolArray, FloatArray]:
    lam = np.atleast_1d(np.asarray(change_rates, dtype=np.float64))
    w = np.broadcast_to(np.asarray(weights, dtype=np.float64), lam.shape)
    done = np.broadcast_to(np.asarray(complete, dtype=bool), lam.shape)
    r = np.broadcast_to(np.asarray(rates, dtype=np.float64), lam.shape)
    return lam, w, done, r


def solve_observed(
    change_rates_per_day: ArrayLike,
    weights: ArrayLike,
    complete: ArrayLike,
    budget_per_day: float,
    objective: ObservedObjective = "harmonic",
    *,
    min_interval_days: ArrayLike = plan.DEFAULT_MIN_INTERVAL_DAYS,
    max_interval_days: ArrayLike = plan.DEFAULT_MAX_INTERVAL_DAYS,
    host_ids: ArrayLike | None = None,
    host_caps_per_day: ArrayLike | None = None,
    mu_hint: float | None = None,
) -> ObservedPlan:
    """The budget split between complete and incomplete pages by one μ (Kolobov et al. 2019).

    ``complete`` marks the pages whose every change is announced. Incomplete pages get
    ``plan``'s rates for μ within their interval bounds; complete pages spend p λ within
    ``complete_rate_bounds``. With no complete page this is ``plan.solve_mu`` itself, so a
    crawl whose hints are all distrusted is planned exactly as one without hints.
    ``host_ids`` index ``host_caps_per_day``: a host over its cap is solved at it with its own
    μ_h, as ``plan.solve_mu`` does, counting both kinds of pages against the cap.
    """
    if objective not in OBSERVED_OBJECTIVES:
        raise ValueError(f"complete observations are planned for {OBSERVED_OBJECTIVES}, "
                         f"not {objective!r}")
    change_rates = np.atleast_1d(np.asarray(change_rates_per_day, dtype=np.float64))
    size = change_rates.size

    def per_page(values: ArrayLike, dtype: type = np.float64) -> NDArray[Any]:
        return np.ascontiguousarray(np.broadcast_to(np.asarray(values, dtype=dtype), (size,)))

    weight_array = per_page(weights)
    done = per_page(complete, bool)
    shortest, longest = per_page(min_interval_days), per_page(max_interval_days)
    if not done.any():
        solved = plan.solve_mu(
            change_rates, weight_array, budget_per_day, objective,
            min_interval_days=shortest, max_interval_days=longest,
            host_ids=host_ids, host_caps_per_day=host_caps_per_day, mu_hint=mu_hint,
        )
        return _result(solved.mu, change_rates, weight_array, done, solved.rates_per_day,
                       objective, dict(solved.host_mu))
    with np.errstate(divide="ignore"):
        low_rate, high_rate = 1.0 / longest, 1.0 / shortest
    complete_low, complete_high = complete_rate_bounds(change_rates, low_rate, high_rate)

    def group(members: BoolArray) -> _Group:
        inc, com = members & ~done, members & done
        return _Group(
            change_rates[inc], weight_array[inc], shortest[inc], longest[inc],
            change_rates[com], weight_array[com], complete_low[com], complete_high[com],
            objective,
        )

    def solve_into(members: BoolArray, budget: float) -> float:
        mu, incomplete, announced = _solve_group(group(members), max(budget, 0.0))
        rates[members & ~done] = incomplete
        rates[members & done] = announced
        return mu

    rates = np.zeros(size)
    everyone = np.ones(size, dtype=bool)
    if host_ids is None or host_caps_per_day is None:
        mu = solve_into(everyone, budget_per_day)
        return _result(mu, change_rates, weight_array, done, rates, objective, {})
    hosts = np.asarray(host_ids, dtype=np.intp)
    caps = np.asarray(host_caps_per_day, dtype=np.float64)
    free = everyone.copy()
    host_mu: dict[int, float] = {}
    remaining = budget_per_day
    mu = math.inf
    for _ in range(caps.size + 1):
        mu = solve_into(free, remaining)
        totals = np.bincount(hosts[free], weights=rates[free], minlength=caps.size)
        over = np.flatnonzero(totals > caps * (1.0 + 1e-9))
        if over.size == 0:
            break
        for host in over.tolist():
            members = free & (hosts == host)
            host_mu[int(host)] = solve_into(members, float(caps[host]))
            remaining -= float(np.sum(rates[members]))
            free &= ~members
        if not free.any():
            break
    return _result(mu, change_rates, weight_array, done, rates, objective, host_mu)


def _result(
    mu: float, change_rates: FloatArray, weights: FloatArray, done: BoolArray, rates: FloatArray,
    objective: ObservedObjective, host_mu: dict[int, float],
) -> ObservedPlan:
    with np.errstate(divide="ignore", invalid="ignore"):
        probabilities = np.where(
            done, np.where(change_rates > 0.0, np.minimum(rates / change_rates, 1.0), 1.0), np.nan
        )
    value = (harmonic_cost if objective == "harmonic" else expected_freshness)(
        change_rates, weights, done, rates
    )
    return ObservedPlan(
        mu, rates, np.asarray(probabilities, dtype=np.float64), done, float(np.sum(rates)),
        objective, value, host_mu,
    )


def complete_fetch_probability(
    change_rate_per_day: float,
    weight: float,
    mu: float,
    objective: ObservedObjective = "harmonic",
    min_interval_days: float = plan.DEFAULT_MIN_INTERVAL_DAYS,
    max_interval_days: float = plan.DEFAULT_MAX_INTERVAL_DAYS,
) -> float:
    """The probability of fetching a complete page after one announced change, from the stored
    μ: the local computation the worker makes when an announcement arrives (``plan``'s
    ``fetch_rate_for`` for incomplete pages). Freshness gives 0 or 1; the fractional p of a page
    exactly at μ = w/λ is the solver's to hand out."""
    if change_rate_per_day <= 0.0:
        return 1.0
    low, high = plan.rate_bounds(min_interval_days, max_interval_days)
    low, high = min(low, change_rate_per_day), min(high, change_rate_per_day)
    if objective == "harmonic":
        wanted = weight / mu if mu > 0.0 else math.inf
    else:
        wanted = high if weight / change_rate_per_day > mu else low
    return min(max(wanted, low), high) / change_rate_per_day


# Noisy hints (docs/MODEL.md section 9.3). A fetch interval is a test of the source: recall
# R = P(hint | the page changed in the interval) and false-alarm probability
# φ = P(hint | it did not), both per interval, as crawler.core.hint_trust counts them.


def false_alarm_probability(precision: float, recall: float, base_rate: float) -> float:
    """φ = P(hint | unchanged) from precision π = P(changed | hint), recall R and the share q of
    tested intervals that changed: Bayes gives π = R q / (R q + φ (1 − q)), so
    φ = R q (1 − π) / (π (1 − q)), clipped to [0, 1]. Precision alone depends on how often the
    pages changed while they were tested; φ does not, which is why the posterior below uses it."""
    if not 0.0 < precision <= 1.0 or not 0.0 <= base_rate < 1.0:
        raise ValueError("precision must be in (0, 1] and the base rate in [0, 1)")
    return min(max(recall * base_rate * (1.0 - precision) / (precision * (1.0 - base_rate)), 0.0),
               1.0)


def changed_probability(
    change_rate_per_day: float, elapsed_days: float, recall: float, false_alarm: float, *,
    hint_seen: bool,
) -> float:
    """P(the page changed since its last fetch | a hint was / was not seen since then).

    The prior is the Poisson chance of a change, p₀ = 1 − e^{−λ t}. Bayes with the source's
    recall R and false-alarm probability φ:
    hint seen: R p₀ / (R p₀ + φ (1 − p₀)); no hint: (1 − R) p₀ / ((1 − R) p₀ + (1 − φ)(1 − p₀)).
    An uninformative source (R = φ) leaves p₀ as it was.
    """
    prior = -math.expm1(-max(change_rate_per_day, 0.0) * max(elapsed_days, 0.0))
    if hint_seen:
        changed, unchanged = recall * prior, false_alarm * (1.0 - prior)
    else:
        changed, unchanged = (1.0 - recall) * prior, (1.0 - false_alarm) * (1.0 - prior)
    if changed + unchanged <= 0.0:
        return prior
    return changed / (changed + unchanged)


def hinted_fetch_time(
    last_fetch_days: float, planned_fetch_days: float, change_rate_per_day: float,
    hint_at_days: float, recall: float, false_alarm: float,
) -> float:
    """The next fetch of an incompletely observed page once a noisy hint arrives.

    The planned fetch (interval I = planned − last) comes when the copy is stale with the
    probability 1 − e^{−λ I}. The hint at elapsed time s raises the probability that the page
    has already changed to P = ``changed_probability(..., hint_seen=True)``; changes after s
    still come at rate λ, so the copy is stale with 1 − (1 − P) e^{−λ x} at s + x. The fetch
    moves to where that reaches the planned level: x = I − τ with τ = −ln(1 − P)/λ, the time
    a page without hints takes to be that likely changed, and at the hint itself if τ ≥ I. It
    moves forward by τ − s; an uninformative hint (R = φ) leaves it where it was. A hint after
    the planned time (a fetch that silence postponed) makes it due at once.
    """
    if change_rate_per_day <= 0.0:
        return planned_fetch_days
    if hint_at_days >= planned_fetch_days:
        return hint_at_days  # past the planned level already: the hint only confirms it
    interval = planned_fetch_days - last_fetch_days
    elapsed = max(hint_at_days - last_fetch_days, 0.0)
    posterior = changed_probability(
        change_rate_per_day, elapsed, recall, false_alarm, hint_seen=True
    )
    if posterior >= 1.0:
        return hint_at_days
    equivalent = -math.log1p(-posterior) / change_rate_per_day
    return min(planned_fetch_days, hint_at_days + max(interval - equivalent, 0.0))


def silent_fetch_time(
    last_fetch_days: float, planned_fetch_days: float, change_rate_per_day: float,
    recall: float, false_alarm: float,
) -> float:
    """The next fetch of an incompletely observed page whose source has said nothing since.

    Silence lowers the odds of a change by (1 − R)/(1 − φ): the prior odds e^{λt} − 1 become
    (e^{λt} − 1)(1 − R)/(1 − φ). The fetch waits until those odds reach the planned level,
    t = ln(1 + (e^{λI} − 1)(1 − φ)/(1 − R)) / λ, never earlier than planned. A source that
    misses nothing (R = 1) would postpone it forever: that page is a complete one, not noisy.
    """
    interval = planned_fetch_days - last_fetch_days
    if change_rate_per_day <= 0.0 or interval <= 0.0 or recall >= 1.0:
        return planned_fetch_days
    planned_odds = math.expm1(change_rate_per_day * interval)
    ratio = (1.0 - false_alarm) / (1.0 - recall)
    if ratio <= 1.0:
        return planned_fetch_days
    waited = math.log1p(planned_odds * ratio) / change_rate_per_day
    return last_fetch_days + max(waited, interval)
