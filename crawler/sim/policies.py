"""Revisit policies for the simulator. Each decides a page's next fetch time after a fetch.

The simulator is work-conserving: it gives every fetch slot to the page with the earliest next
fetch time, so a policy only ranks pages; all spend the same budget.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from functools import partial
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from crawler.core import plan
from crawler.core.estimate import DEFAULT_PRIOR, fit_gamma_prior
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.replan import moved_urls, policy_moved, replanned
from crawler.core.schedule import SchedulePolicy, estimated_rate_per_day, min_interval_days
from crawler.sim.populations import FloatArray, Population
from crawler.sim.step import first_record, sim_settings, simulated_fetch, simulated_result


class Policy(Protocol):
    def initial_fetch_times(self) -> FloatArray: ...

    def after_fetch(
        self, page: int, now_days: float, changed: bool, last_change: float | None
    ) -> float:
        """Record what the fetch saw; return the page's next fetch time (days).

        `last_change` is the page's truthful Last-Modified (days), for pages that send one."""
        ...

    def on_day(self, now_days: float) -> Sequence[tuple[int, float]]:
        """Called once per virtual day: periodic re-planning. Returns the pages it
        rescheduled, with their new next fetch times (days)."""
        ...


PolicyFactory = Callable[[Population, float, np.random.Generator], Policy]
"""Builds a policy for a population and a budget (fetches per day) from a random stream."""


def _random_phase(rng: np.random.Generator, intervals_days: FloatArray) -> FloatArray:
    """First fetch times: each page at a random point of its first interval."""
    return np.asarray(rng.random(intervals_days.size) * intervals_days)


class _IntervalPolicy:
    """Per-page intervals, started at a random phase; fixed unless `next_interval` adapts."""

    def __init__(self, intervals_days: FloatArray, rng: np.random.Generator) -> None:
        self.intervals_days = intervals_days.tolist()
        self.rng = rng

    def next_interval(self, interval_days: float, changed: bool) -> float:
        return interval_days

    def initial_fetch_times(self) -> FloatArray:
        return _random_phase(self.rng, np.asarray(self.intervals_days))

    def after_fetch(
        self, page: int, now_days: float, changed: bool, last_change: float | None
    ) -> float:
        interval = self.next_interval(self.intervals_days[page], changed)
        self.intervals_days[page] = interval
        return now_days + interval

    def on_day(self, now_days: float) -> Sequence[tuple[int, float]]:
        return ()


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


class _MultiplicativePolicy(_IntervalPolicy):
    """Adaptive intervals from the uniform one: shrink after a change, grow otherwise, within
    bounds."""

    min_interval_days: float
    max_interval_days: float

    def __init__(
        self, population: Population, budget_per_day: float, rng: np.random.Generator
    ) -> None:
        start = population.pages / budget_per_day
        start = min(max(start, self.min_interval_days), self.max_interval_days)
        super().__init__(np.full(population.pages, start), rng)

    def shrink(self, interval_days: float) -> float:
        raise NotImplementedError

    def grow(self, interval_days: float) -> float:
        raise NotImplementedError

    def next_interval(self, interval_days: float, changed: bool) -> float:
        updated = self.shrink(interval_days) if changed else self.grow(interval_days)
        return min(max(updated, self.min_interval_days), self.max_interval_days)


class _Nutch(_MultiplicativePolicy):
    # Apache Nutch AdaptiveFetchSchedule: DEC_FACTOR 0.2, INC_FACTOR 0.4.
    min_interval_days = 60.0 / 86400.0
    max_interval_days = 365.0

    def shrink(self, interval_days: float) -> float:
        return interval_days * 0.8

    def grow(self, interval_days: float) -> float:
        return interval_days * 1.4


class _StormCrawler(_MultiplicativePolicy):
    # StormCrawler AdaptiveScheduler: halfway toward the minimum after a change, ×1.5 otherwise.
    min_interval_days = 1.0 / 24.0
    max_interval_days = 14.0

    def shrink(self, interval_days: float) -> float:
        return interval_days - (interval_days - self.min_interval_days) / 2.0

    def grow(self, interval_days: float) -> float:
        return interval_days * 1.5


class Optimal:
    """Ours, as the daemon runs it: every fetch goes through `sim.step.simulated_fetch`, i.e.
    the worker's record update and `schedule.next_fetch` (posterior rate, period detection,
    fetch timing), with the planner's state (μ, prior) in a `SchedulePolicy`.

    At every re-planning (daily unless the simulator is told the planner's interval): μ
    re-solved over the stored estimates, the prior refitted on a widening schedule (or every
    round, as the daemon's planner does), and, when they moved materially since the last
    walk, the pages whose fetch rate moved rescheduled by the planner's own rule
    (``crawler.core.replan``). Nothing here estimates or times anything on its own.
    """

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
        shortest_interval_days: float | None = None,
        refit_prior_each_round: bool = False,
    ) -> None:
        pages = population.pages
        self.pages = pages
        self.budget_per_day = budget_per_day
        self.rng = rng
        self.records = [first_record(page) for page in range(pages)]
        self.versions = [0] * pages
        self.rates = np.full(pages, DEFAULT_PRIOR.mean_rate_per_day)
        self.fetch_rates = np.zeros(pages)  # as stored with each URL; 0: none yet
        self.importance = np.ones(pages)
        self.walked: SchedulePolicy | None = None
        shortest = {} if shortest_interval_days is None else {  # else CRAWLER_MIN_INTERVAL's
            "min_interval": shortest_interval_days * SECONDS_PER_DAY}
        self.policy = SchedulePolicy(sim_settings(
            schedule="optimal",
            default_interval=pages / budget_per_day * SECONDS_PER_DAY,
            max_interval=max_interval_days * SECONDS_PER_DAY,
            objective=objective,
            detect_periods=detect_periods,
            **shortest,
        ), prior=DEFAULT_PRIOR)
        # The daemon's planner refits the prior every round; the default widening schedule
        # spares days-long simulations the cost.
        self.refit_prior_each_round = refit_prior_each_round
        self.next_prior_fit_day = 2.0
        # The planner's per-URL bounds, kept up to date fetch by fetch (they depend on the
        # record and the settings, not on μ or the prior) rather than recomputed every day.
        self.min_intervals = np.fromiter(
            (min_interval_days(record, self.policy) for record in self.records),
            dtype=np.float64,
            count=pages,
        )
        self._solve_mu()

    def initial_fetch_times(self) -> FloatArray:
        return _random_phase(self.rng, np.full(self.pages, self.pages / self.budget_per_day))

    def after_fetch(
        self, page: int, now_days: float, changed: bool, last_change: float | None
    ) -> float:
        self.versions[page] += changed
        result = simulated_result(now_days, self.versions[page], last_change)
        record, schedule = simulated_fetch(self.records[page], result, self.policy)
        self.records[page] = record
        self.min_intervals[page] = min_interval_days(record, self.policy)
        self._store(page, schedule.change_rate_per_day, schedule.fetch_rate_per_day)
        return schedule.next_fetch_at / SECONDS_PER_DAY

    def _store(self, page: int, change_rate: float | None, fetch_rate: float | None) -> None:
        """The estimates the frontier stores with the URL's row."""
        prior_mean = self.policy.prior.mean_rate_per_day
        self.rates[page] = prior_mean if change_rate is None else change_rate
        self.fetch_rates[page] = fetch_rate or 0.0

    def on_day(self, now_days: float) -> Sequence[tuple[int, float]]:
        if self.refit_prior_each_round:
            self._refit_prior()
        elif now_days >= self.next_prior_fit_day:
            self.next_prior_fit_day = max(now_days * 2.0, now_days + 1.0)
            if now_days >= 60.0:
                self.next_prior_fit_day = now_days + 120.0
            self._refit_prior()
        self._solve_mu()
        if not policy_moved(self.walked, self.policy):
            return ()
        self.walked = self.policy
        return self._reschedule(now_days)

    def _reschedule(self, now_days: float) -> list[tuple[int, float]]:
        """The planner's walk (``crawler.db.planning.reschedule``): every page whose fetch
        rate moved materially gets ``replanned``, its stored estimates with it."""
        moved = moved_urls(self.fetch_rates, self.rates, self.importance, self.policy)
        now = now_days * SECONDS_PER_DAY
        rescheduled = []
        for page in np.flatnonzero(moved & self.replannable()).tolist():
            schedule = replanned(self.records[page], self.policy, now)
            self.records[page] = replace(
                self.records[page], change_rate_per_day=schedule.change_rate_per_day
            )
            self._store(page, schedule.change_rate_per_day, schedule.fetch_rate_per_day)
            rescheduled.append((page, schedule.next_fetch_at / SECONDS_PER_DAY))
        return rescheduled

    def replannable(self) -> NDArray[np.bool_]:
        """The pages the walk may reschedule: all of them here; a policy whose pages are not
        all on the fetch-rate schedule (crawler.sim.hint_policies) narrows it."""
        return np.ones(self.pages, dtype=bool)

    def prior_sample(self) -> NDArray[np.bool_]:
        """The pages the prior is fitted on: all of them here. A page fetched because its change
        was announced sees a change at nearly every fetch, which the estimators (fetch times
        independent of change times) would read as a page too fast to follow."""
        return np.ones(self.pages, dtype=bool)

    def _solve_mu(self) -> None:
        """The planner's round: μ such that the stored rates' fetch rates fill the budget."""
        policy = self.policy
        mu = plan.solve_mu(
            self.rates, 1.0, self.budget_per_day, policy.settings.objective,
            beta_days=policy.settings.beta_seconds / SECONDS_PER_DAY,
            min_interval_days=self.min_intervals,
            max_interval_days=policy.settings.max_interval / SECONDS_PER_DAY, mu_hint=policy.mu,
        ).mu
        self.policy = replace(policy, mu=mu)

    def _refit_prior(self) -> None:
        sample = self.prior_sample()
        histories = [
            record.history for record, kept in zip(self.records, sample.tolist(), strict=True)
            if kept and record.history.fetches > 0
        ]
        if len(histories) > self._PRIOR_SAMPLE:
            chosen = self.rng.choice(len(histories), self._PRIOR_SAMPLE, replace=False)
            histories = [histories[int(index)] for index in chosen]
        prior = fit_gamma_prior(histories)
        if prior is not None:
            self.policy = replace(self.policy, prior=prior)
            # μ is solved over the rates the next fetches will estimate, under the new prior,
            # as the daemon's planner does (crawler.core.replan.current_rates).
            self.rates = np.fromiter(
                (estimated_rate_per_day(record, self.policy) if record.history.fetches > 0
                 else prior.mean_rate_per_day for record in self.records),
                dtype=np.float64, count=self.pages,
            )


POLICIES: dict[str, PolicyFactory] = {
    "uniform": uniform,
    "proportional": proportional,
    "nutch-adaptive": _Nutch,
    "stormcrawler-adaptive": _StormCrawler,
    "oracle": oracle,
    "optimal": Optimal,
    "optimal-poisson": partial(Optimal, detect_periods=False),
}
