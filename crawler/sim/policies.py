"""Revisit policies for the simulator. Each decides a page's next fetch time after a fetch.

The simulator is work-conserving: it gives every fetch slot to the page with the earliest next
fetch time, so a policy only ranks pages; all spend the same budget.
"""

from __future__ import annotations

from collections import deque
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from crawler.core import plan
from crawler.core.estimate import DEFAULT_PRIOR, ChangeHistory, GammaPrior, fit_gamma_prior
from crawler.core.periodic import PeriodicModel, detect_period_from_intervals
from crawler.sim.learning import approximate_posterior_rate
from crawler.sim.populations import Population

FloatArray = NDArray[np.float64]
MINUTE_DAYS = 1.0 / 1440.0


class Policy(Protocol):
    def initial_fetch_times(self) -> FloatArray: ...

    def after_fetch(self, page: int, now_days: float, interval_days: float, changed: bool) -> float:
        """Record what the fetch saw; return the page's next fetch time (days)."""
        ...

    def on_day(self, now_days: float) -> None:
        """Called once per virtual day: periodic re-planning."""
        ...


class _IntervalPolicy:
    """Fixed per-page intervals, started at a random phase."""

    def __init__(self, intervals_days: FloatArray, rng: np.random.Generator) -> None:
        self.intervals_days = intervals_days
        self.rng = rng

    def initial_fetch_times(self) -> FloatArray:
        return np.asarray(self.rng.random(self.intervals_days.size) * self.intervals_days)

    def after_fetch(self, page: int, now_days: float, interval_days: float, changed: bool) -> float:
        return now_days + float(self.intervals_days[page])

    def on_day(self, now_days: float) -> None:
        return None


def uniform(population: Population, budget_per_day: float, rng: np.random.Generator) -> Policy:
    return _IntervalPolicy(np.full(population.pages, population.pages / budget_per_day), rng)


def proportional(population: Population, budget_per_day: float, rng: np.random.Generator) -> Policy:
    rates = population.change_rates_per_day
    fetch_rates = budget_per_day * rates / float(rates.sum())
    with np.errstate(divide="ignore"):
        intervals = np.where(fetch_rates > 0.0, 1.0 / fetch_rates, plan.DEFAULT_MAX_INTERVAL_DAYS)
    return _IntervalPolicy(intervals, rng)


def oracle(population: Population, budget_per_day: float, rng: np.random.Generator) -> Policy:
    result = plan.solve_mu(population.change_rates_per_day, 1.0, budget_per_day)
    return _IntervalPolicy(1.0 / result.rates_per_day, rng)


class _MultiplicativePolicy:
    """Adaptive intervals: shrink after a change, grow otherwise, within bounds."""

    def __init__(
        self,
        pages: int,
        start_interval_days: float,
        min_interval_days: float,
        max_interval_days: float,
        rng: np.random.Generator,
    ) -> None:
        start = min(max(start_interval_days, min_interval_days), max_interval_days)
        self.intervals_days = [start] * pages
        self.min_interval_days = min_interval_days
        self.max_interval_days = max_interval_days
        self.rng = rng

    def shrink(self, interval_days: float) -> float:
        raise NotImplementedError

    def grow(self, interval_days: float) -> float:
        raise NotImplementedError

    def initial_fetch_times(self) -> FloatArray:
        intervals = np.asarray(self.intervals_days)
        return np.asarray(self.rng.random(intervals.size) * intervals)

    def after_fetch(self, page: int, now_days: float, interval_days: float, changed: bool) -> float:
        current = self.intervals_days[page]
        updated = self.shrink(current) if changed else self.grow(current)
        updated = min(max(updated, self.min_interval_days), self.max_interval_days)
        self.intervals_days[page] = updated
        return now_days + updated

    def on_day(self, now_days: float) -> None:
        return None


class _Nutch(_MultiplicativePolicy):
    # Apache Nutch AdaptiveFetchSchedule: DEC_FACTOR 0.2, INC_FACTOR 0.4.
    def shrink(self, interval_days: float) -> float:
        return interval_days * 0.8

    def grow(self, interval_days: float) -> float:
        return interval_days * 1.4


class _StormCrawler(_MultiplicativePolicy):
    # StormCrawler AdaptiveScheduler: halfway toward the minimum after a change, ×1.5 otherwise.
    def shrink(self, interval_days: float) -> float:
        return interval_days - (interval_days - self.min_interval_days) / 2.0

    def grow(self, interval_days: float) -> float:
        return interval_days * 1.5


def nutch_adaptive(
    population: Population, budget_per_day: float, rng: np.random.Generator
) -> Policy:
    start = population.pages / budget_per_day
    return _Nutch(population.pages, start, 60.0 / 86400.0, 365.0, rng)


def stormcrawler_adaptive(
    population: Population, budget_per_day: float, rng: np.random.Generator
) -> Policy:
    start = population.pages / budget_per_day
    return _StormCrawler(population.pages, start, 1.0 / 24.0, 14.0, rng)


class Optimal:
    """Ours: everything learned online from what fetches observe (changed or not).

    Per fetch: the page's history is extended, its posterior rate recomputed under the current
    empirical-Bayes prior, and its next fetch time set from the stored μ (the daemon's in-place
    update). Daily: μ is re-solved over all current estimates; the prior is refitted on a
    widening schedule. Pages whose changes line up with a clock are fetched just after their
    expected updates (period detection), unless `detect_periods` is off.
    """

    _HISTORY_WINDOW = 96  # fetch brackets kept per page for period detection
    _PRIOR_SAMPLE = 1500

    def __init__(
        self,
        population: Population,
        budget_per_day: float,
        rng: np.random.Generator,
        *,
        detect_periods: bool = True,
        objective: plan.Objective = "freshness",
        max_interval_days: float = plan.DEFAULT_MAX_INTERVAL_DAYS,
    ) -> None:
        pages = population.pages
        self.pages = pages
        self.budget_per_day = budget_per_day
        self.rng = rng
        self.detect_periods = detect_periods
        self.objective: plan.Objective = objective
        self.max_interval_days = max_interval_days
        self.prior: GammaPrior = DEFAULT_PRIOR
        self.histories = [ChangeHistory()] * pages
        self.rates = np.full(pages, self.prior.mean_rate_per_day)
        self.min_intervals = np.full(pages, plan.DEFAULT_MIN_INTERVAL_DAYS)
        self.max_intervals = np.full(pages, max_interval_days)
        self.periodic: list[PeriodicModel | None] = [None] * pages
        self.brackets: list[deque[tuple[float, float, bool]]] = [
            deque(maxlen=self._HISTORY_WINDOW) for _ in range(pages)
        ]
        self.short_changes = [0] * pages  # changed brackets shorter than 12 h since last test
        self.next_detection = [8] * pages
        # Work conservation hands out slots early when the heap runs ahead of the clock; a page
        # timed to an absolute update instant must be shifted by that lead (an average).
        self.scheduled = [0.0] * pages
        self.lead_days = 0.0
        self.next_prior_fit_day = 2.0
        self.mu = plan.solve_mu(self.rates, 1.0, budget_per_day).mu

    def initial_fetch_times(self) -> FloatArray:
        interval = self.pages / self.budget_per_day
        times = np.asarray(self.rng.random(self.pages) * interval)
        self.scheduled = times.tolist()
        return times

    def after_fetch(self, page: int, now_days: float, interval_days: float, changed: bool) -> float:
        self.lead_days += 0.01 * (self.scheduled[page] - now_days - self.lead_days)
        history = self.histories[page].observe(interval_days, changed)
        self.histories[page] = history
        rate = approximate_posterior_rate(history, self.prior, float(self.rates[page]))
        self.rates[page] = rate
        model: PeriodicModel | None = None
        if self.detect_periods:
            model = self._update_period(page, now_days, interval_days, changed)
        fetch_rate = plan.fetch_rate_for(
            rate,
            1.0,
            self.mu,
            self.objective,
            float(self.min_intervals[page]),
            float(self.max_intervals[page]),
        )
        next_time = plan.next_fetch_time(
            now_days,
            fetch_rate,
            model,
            max_interval_days=float(self.max_intervals[page]),
            # Slots are handed out a little early or late: a margin of 2% of the period
            # keeps an early fetch from landing before the update it was meant to catch.
            min_update_delay_days=0.02 * model.period_days if model is not None else 0.0,
            saw_change=changed,
        )
        if model is not None:
            next_time += max(self.lead_days, 0.0)
        self.scheduled[page] = next_time
        return next_time

    def _update_period(
        self, page: int, now_days: float, interval_days: float, changed: bool
    ) -> PeriodicModel | None:
        brackets = self.brackets[page]
        brackets.append((now_days - interval_days, now_days, changed))
        if changed and interval_days < 0.5:
            self.short_changes[page] += 1
            # Test again only after the evidence doubles: each test costs milliseconds.
            if self.short_changes[page] >= self.next_detection[page]:
                self.next_detection[page] *= 2
                self.short_changes[page] = 0
                changed_brackets = [(a, b) for a, b, seen in brackets if seen]
                unchanged_brackets = [(a, b) for a, b, seen in brackets if not seen]
                model = detect_period_from_intervals(
                    changed_brackets, unchanged_brackets, phase_points=48
                )
                self.periodic[page] = model
                # A clock page is fetched once per period, just after its update: it gains
                # nothing from more, and the plan must count exactly what it will spend.
                if model is not None:
                    self.min_intervals[page] = self.max_intervals[page] = model.period_days
                else:
                    self.min_intervals[page] = plan.DEFAULT_MIN_INTERVAL_DAYS
                    self.max_intervals[page] = self.max_interval_days
        return self.periodic[page]

    def on_day(self, now_days: float) -> None:
        if now_days >= self.next_prior_fit_day:
            self.next_prior_fit_day = max(now_days * 2.0, now_days + 1.0)
            if now_days >= 60.0:
                self.next_prior_fit_day = now_days + 120.0
            self._refit_prior()
        self.mu = plan.solve_mu(
            self.rates,
            1.0,
            self.budget_per_day,
            self.objective,
            min_interval_days=self.min_intervals,
            max_interval_days=self.max_intervals,
            mu_hint=self.mu,
        ).mu

    def _refit_prior(self) -> None:
        observed = [index for index, history in enumerate(self.histories) if history.fetches > 0]
        if len(observed) > self._PRIOR_SAMPLE:
            chosen = self.rng.choice(len(observed), self._PRIOR_SAMPLE, replace=False)
            observed = [observed[int(index)] for index in chosen]
        prior = fit_gamma_prior([self.histories[index] for index in observed])
        if prior is None:
            return
        self.prior = prior
        for page, history in enumerate(self.histories):
            self.rates[page] = approximate_posterior_rate(history, prior)


def optimal(population: Population, budget_per_day: float, rng: np.random.Generator) -> Policy:
    return Optimal(population, budget_per_day, rng)


def optimal_poisson(
    population: Population, budget_per_day: float, rng: np.random.Generator
) -> Policy:
    return Optimal(population, budget_per_day, rng, detect_periods=False)


POLICIES = {
    "uniform": uniform,
    "proportional": proportional,
    "nutch-adaptive": nutch_adaptive,
    "stormcrawler-adaptive": stormcrawler_adaptive,
    "oracle": oracle,
    "optimal": optimal,
    "optimal-poisson": optimal_poisson,
}
