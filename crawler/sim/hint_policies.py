"""Revisit policies that hear change hints (crawler.sim.hints): four of them.

- ``no-hints``: the daemon's ``optimal`` policy, deaf to hints (the baseline);
- ``trust-all``: the same, and every announcement of a change since the page's last fetch
  fetches it at once, whoever sent it (a ping-driven crawler);
- ``nutch-sitemaps``: Apache Nutch's AdaptiveFetchSchedule (nutch-default.xml: intervals ×1.4
  when unchanged, ×0.8 when changed, SYNC_DELTA at rate 0.3, 1 minute to 365 days), with the
  sitemap applied as Nutch's SitemapProcessor applies it: ``changefreq`` becomes the fetch
  interval and ``lastmod`` the modified time. Nutch does that for URLs new to its CrawlDb
  unless ``sitemap.url.overwrite.existing`` is set; every simulated URL is known from the
  start, so the sitemap is re-applied at every daily sitemap run (the overwriting mode, the only
  one in which a sitemap changes anything for a known URL). A date never brings a fetch
  forward in Nutch; it only shifts the next one through SYNC_DELTA;
- ``optimal``: learns per (site, source) how far to trust the hints from its own fetches
  (crawler.core.hint_trust), plans complete and incomplete pages under one μ
  (crawler.core.observed.solve_observed), fetches a complete page after an announced change
  with the probability the optimum gives it, and moves a noisy page's fetch by the posterior.
  Everything else is ``Optimal``'s: the worker's transition and the planner's walk.

A hint policy gets each announcement through ``on_hint`` (which may move the page's next
fetch) and hands back, through ``take_rescheduled``, the pages a change of trust moved.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from crawler.core.hint_trust import (
    COMPLETE,
    IGNORED,
    NOISY,
    Classification,
    HintCounts,
    HintTrust,
    announced_in,
    assess,
    null_changed_probability,
    stamped_now,
)
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.observed import (
    OBSERVED_OBJECTIVES,
    complete_fetch_probability,
    hinted_fetch_time,
    silent_fetch_time,
    solve_observed,
)
from crawler.core.replan import replanned
from crawler.core.schedule import timing_model
from crawler.sim.hints import CHANGEFREQ_DAYS, HintWorld
from crawler.sim.policies import Optimal, Policy, _random_phase
from crawler.sim.populations import FloatArray, Population

SiteSource = tuple[int, int]


class HintPolicy(Policy, Protocol):
    def on_hint(self, page: int, now_days: float, claimed_days: float) -> float | None:
        """An announcement arrived at ``now_days`` claiming a change at ``claimed_days``: the
        page's new next fetch time, or None if it stays."""
        ...

    def take_rescheduled(self) -> Sequence[tuple[int, float]]:
        """Pages moved since the last call by anything other than their own fetch or hint (a
        change of trust), with their new next fetch times."""
        ...


HintPolicyFactory = Callable[[Population, float, np.random.Generator, HintWorld], HintPolicy]


class NoHints(Optimal):
    """``Optimal``, deaf to hints."""

    def __init__(
        self, population: Population, budget_per_day: float, rng: np.random.Generator,
        world: HintWorld,
    ) -> None:
        super().__init__(population, budget_per_day, rng)

    def on_hint(self, page: int, now_days: float, claimed_days: float) -> float | None:
        return None

    def take_rescheduled(self) -> Sequence[tuple[int, float]]:
        return ()


class _KeepsDueTimes(Optimal):
    """``Optimal`` that keeps each page's due time (a hint fetches a page only when it is not
    already due) and last fetch, and leaves the pages a hint fetched out of the prior's sample."""

    def __init__(
        self, population: Population, budget_per_day: float, rng: np.random.Generator,
        world: HintWorld,
    ) -> None:
        self.last_fetch = [0.0] * population.pages
        self.due: list[float] = []
        self.hint_fetched = np.zeros(population.pages, dtype=bool)
        super().__init__(population, budget_per_day, rng)

    def initial_fetch_times(self) -> FloatArray:
        times = super().initial_fetch_times()
        self.due = times.tolist()
        return times

    def on_day(self, now_days: float) -> Sequence[tuple[int, float]]:
        moved = super().on_day(now_days)
        for page, due in moved:
            self.due[page] = due
        return moved

    def prior_sample(self) -> NDArray[np.bool_]:
        return ~self.hint_fetched


class TrustAll(_KeepsDueTimes):
    """``Optimal``, and every announcement of a change after a page's last fetch fetches it."""

    def after_fetch(
        self, page: int, now_days: float, changed: bool, last_change: float | None
    ) -> float:
        self.last_fetch[page] = now_days
        self.due[page] = super().after_fetch(page, now_days, changed, last_change)
        return self.due[page]

    def on_hint(self, page: int, now_days: float, claimed_days: float) -> float | None:
        if claimed_days <= self.last_fetch[page] or self.due[page] <= now_days:
            return None
        self.due[page] = now_days
        self.hint_fetched[page] = True
        return now_days

    def take_rescheduled(self) -> Sequence[tuple[int, float]]:
        return ()


class NutchSitemaps:
    """Nutch's AdaptiveFetchSchedule with sitemap intervals and dates (module docstring)."""

    INC_RATE = 0.4
    DEC_RATE = 0.2
    SYNC_DELTA_RATE = 0.3
    MIN_INTERVAL_DAYS = 60.0 / 86400.0
    MAX_INTERVAL_DAYS = 365.0

    def __init__(
        self, population: Population, budget_per_day: float, rng: np.random.Generator,
        world: HintWorld,
    ) -> None:
        start = population.pages / budget_per_day
        # What each page's sitemap entry declares (nothing for a page no sitemap lists).
        self.declared: list[float | None] = [None] * population.pages
        for page, name in enumerate(world.changefreq_of_page):
            if name is not None:
                self.declared[page] = self._clip(CHANGEFREQ_DAYS[name])
        self.intervals = [start if declared is None else declared for declared in self.declared]
        self.modified = [0.0] * population.pages
        self.lastmod: list[float | None] = [None] * population.pages
        self.rng = rng

    def _clip(self, interval_days: float) -> float:
        return min(max(interval_days, self.MIN_INTERVAL_DAYS), self.MAX_INTERVAL_DAYS)

    def initial_fetch_times(self) -> FloatArray:
        return _random_phase(self.rng, np.asarray(self.intervals))

    def after_fetch(
        self, page: int, now_days: float, changed: bool, last_change: float | None
    ) -> float:
        # AdaptiveFetchSchedule.setFetchSchedule, with the datum's modified time as the sitemap
        # or the last changed fetch left it.
        interval = self.intervals[page]
        modified = self.modified[page]
        if changed:
            interval *= 1.0 - self.DEC_RATE
            modified = now_days
        else:
            interval *= 1.0 + self.INC_RATE
        delta = now_days - modified
        if delta > interval:
            interval = delta
        reference = now_days - delta * self.SYNC_DELTA_RATE
        interval = self._clip(interval)
        self.intervals[page] = interval
        self.modified[page] = modified
        return reference + interval

    def on_hint(self, page: int, now_days: float, claimed_days: float) -> float | None:
        self.lastmod[page] = claimed_days  # what the sitemap says when next processed
        return None

    def on_day(self, now_days: float) -> Sequence[tuple[int, float]]:
        # The daily sitemap run, overwriting what the CrawlDb knew of each listed URL; it sets
        # no fetch time, so nothing is rescheduled.
        for page, declared in enumerate(self.declared):
            if declared is None:
                continue
            self.intervals[page] = declared
            lastmod = self.lastmod[page]
            if lastmod is not None:
                self.modified[page] = lastmod
        return ()

    def take_rescheduled(self) -> Sequence[tuple[int, float]]:
        return ()


class HintedOptimal(_KeepsDueTimes):
    """``optimal`` with hints: trust learned per (site, source), complete pages planned beside
    the incomplete ones under one μ, noisy hints as evidence (module docstring)."""

    AUDIT_CHANGES = 8.0
    """A complete page with no announcement for this many mean change intervals is fetched
    anyway: a Poisson page stays unchanged that long with probability e^{−8} (3 in 10,000), so
    the source has most likely stopped announcing, and the fetch tests it. Each announcement
    restarts the wait, so a working source makes no audit fetches."""

    def __init__(
        self, population: Population, budget_per_day: float, rng: np.random.Generator,
        world: HintWorld,
    ) -> None:
        pages = population.pages
        self.world = world
        self.keys: list[SiteSource | None] = [
            (world.site_of_page[page], world.source_of_page[page])
            if world.pages and world.covered(page) else None
            for page in range(pages)
        ]
        self.members: dict[SiteSource, list[int]] = {}
        for page, key in enumerate(self.keys):
            if key is not None:
                self.members.setdefault(key, []).append(page)
        unknown = assess(HintCounts())
        self.counts = {key: HintCounts() for key in self.members}
        self.trust: dict[SiteSource, HintTrust] = dict.fromkeys(self.members, unknown)
        self.complete = np.zeros(pages, dtype=bool)
        self.claimed: list[list[float]] = [[] for _ in range(pages)]
        self.newest_claim = [-math.inf] * pages
        self.announced = [0] * pages
        self.hinted_since: list[float | None] = [None] * pages
        # A fetch interval awaiting its test: (start, end, changed, the model's p₀).
        self.untested: list[tuple[float, float, bool, float] | None] = [None] * pages
        self.today = 0.0
        self.pending: list[tuple[int, float]] = []
        # p's draws come from their own stream, so that with every source distrusted the run
        # is ``no-hints``' to the last fetch.
        self.hint_rng = np.random.default_rng([world.seed, 4])
        super().__init__(population, budget_per_day, rng, world)

    # What the simulator calls.

    def after_fetch(
        self, page: int, now_days: float, changed: bool, last_change: float | None
    ) -> float:
        key = self.keys[page]
        if key is not None:
            self._test_untested(page, key, now_days)
            # A page timed by its clock was fetched just after its expected update: the
            # interval changed nearly surely, which tests nothing of the source (the test's
            # null hypothesis has fetch times independent of changes).
            if self._untimed(page):
                # The chance of a change if the announcements came as often as they do but at
                # random moments (crawler.core.hint_trust): from their own rate, which a source
                # without timing still gets right, and never from the fetches' outcome.
                prior = null_changed_probability(
                    self.announced[page], now_days, now_days - self.last_fetch[page],
                    self.records[page].history,
                )
                self.untested[page] = (self.last_fetch[page], now_days, changed, prior)
        if self.hinted_since[page] is not None and key is not None and (
            self.trust[key].classification != IGNORED
        ):
            self.hint_fetched[page] = True
        self.last_fetch[page] = now_days
        self.hinted_since[page] = None
        next_time = super().after_fetch(page, now_days, changed, last_change)
        if key is not None:
            next_time = self._hinted_schedule(page, key, now_days, next_time)
        self.due[page] = next_time
        return next_time

    def on_hint(self, page: int, now_days: float, claimed_days: float) -> float | None:
        key = self.keys[page]
        if key is None:
            return None
        untested = self.untested[page]
        if untested is not None and claimed_days > untested[1]:
            # Announcements arrive in the order of the changes they date: one dated after the
            # interval's end means none dated inside it is still on its way.
            self._test_untested(page, key, now_days)
        self._update_counts(key, self.counts[key].dated(claimed_days, now_days), now_days)
        if claimed_days > self.newest_claim[page]:
            self.newest_claim[page] = claimed_days
            self.announced[page] += 1
        self.claimed[page].append(claimed_days)
        if claimed_days <= self.last_fetch[page]:
            return None  # a change the last fetch already saw
        first = self.hinted_since[page] is None
        if first:
            self.hinted_since[page] = now_days
        classification = self.trust[key].classification
        due = self.due[page]
        if classification == COMPLETE:
            rate = self._complete_rate(page, now_days)
            probability = self._fetch_probability(rate)
            if self.hint_rng.random() < probability:
                due = min(due, now_days)
            elif due > now_days:
                due = now_days + self._audit_days(rate)
        elif classification == NOISY and first and self._untimed(page):
            trust = self.trust[key]
            due = min(due, hinted_fetch_time(
                self.last_fetch[page], self._planned(page), float(self.rates[page]), now_days,
                trust.recall, trust.false_alarm,
            ))
        if due == self.due[page]:
            return None
        self.due[page] = due
        return due

    def on_day(self, now_days: float) -> Sequence[tuple[int, float]]:
        self.today = now_days
        return super().on_day(now_days)

    def take_rescheduled(self) -> Sequence[tuple[int, float]]:
        pending, self.pending = self.pending, []
        return pending

    # The planner.

    def replannable(self) -> NDArray[np.bool_]:
        return ~self.complete

    def _solve_mu(self) -> None:
        policy = self.policy
        if policy.settings.objective not in OBSERVED_OBJECTIVES or not self.complete.any():
            super()._solve_mu()
            return
        rates = self.rates.copy()
        for page in np.flatnonzero(self.complete).tolist():
            rates[page] = self._complete_rate(page, self.today)
        mu = solve_observed(
            rates, 1.0, self.complete, self.budget_per_day, policy.settings.objective,
            min_interval_days=self.min_intervals,
            max_interval_days=policy.settings.max_interval / SECONDS_PER_DAY, mu_hint=policy.mu,
        ).mu
        self.policy = replace(policy, mu=mu)

    # Trust.

    def _test_untested(self, page: int, key: SiteSource, now_days: float) -> None:
        untested = self.untested[page]
        if untested is None:
            return
        start, end, changed, prior = untested
        self.untested[page] = None
        announced = announced_in(self.claimed[page], start, end)
        self.claimed[page] = [claimed for claimed in self.claimed[page] if claimed > end]
        self._update_counts(key, self.counts[key].tested(announced, changed, prior), now_days)

    def _update_counts(self, key: SiteSource, counts: HintCounts, now_days: float) -> None:
        previous = self.counts[key]
        self.counts[key] = counts
        if counts.dates != previous.dates and stamped_now(counts) == stamped_now(previous):
            return  # a date read changes the verdict only through the "now" test
        before = self.trust[key].classification
        trust = assess(counts)
        self.trust[key] = trust
        if trust.classification != before:
            self._retrust(key, before, trust.classification, now_days)

    def _retrust(
        self, key: SiteSource, before: Classification, after: Classification, now_days: float
    ) -> None:
        """A source's class changed: its pages move to the schedule of the new class at once."""
        members = self.members[key]
        self.complete[members] = after == COMPLETE
        if after == IGNORED and before == NOISY:
            return  # both on the incomplete schedule; a noisy page's moved fetch stands
        now = now_days * SECONDS_PER_DAY
        for page in members:
            if after == COMPLETE:
                due = now_days if self.hinted_since[page] is not None else (
                    self.last_fetch[page]
                    + self._audit_days(self._complete_rate(page, now_days))
                )
            else:
                due = replanned(self.records[page], self.policy, now).next_fetch_at
                due /= SECONDS_PER_DAY
            due = max(due, now_days)
            self.due[page] = due
            self.pending.append((page, due))

    # Scheduling.

    def _hinted_schedule(
        self, page: int, key: SiteSource, now_days: float, next_time: float
    ) -> float:
        classification = self.trust[key].classification
        if classification == COMPLETE:
            return now_days + self._audit_days(self._complete_rate(page, now_days))
        if classification == NOISY and self._untimed(page):
            trust = self.trust[key]
            return silent_fetch_time(
                now_days, next_time, float(self.rates[page]), trust.recall, trust.false_alarm
            )
        return next_time

    def _complete_rate(self, page: int, now_days: float) -> float:
        """A complete page's change rate from its announcements: every change is dated, so the
        conjugate posterior mean (α + announced) / (β + days watched) of docs/MODEL.md 2.4."""
        prior = self.policy.prior
        return (prior.shape + self.announced[page]) / (prior.rate + max(now_days, 0.0))

    def _fetch_probability(self, change_rate: float) -> float:
        policy = self.policy
        if policy.mu is None or policy.settings.objective not in OBSERVED_OBJECTIVES:
            return 1.0
        return complete_fetch_probability(
            change_rate, 1.0, policy.mu, policy.settings.objective,
            policy.settings.min_interval / SECONDS_PER_DAY,
            policy.settings.max_interval / SECONDS_PER_DAY,
        )

    def _audit_days(self, change_rate: float) -> float:
        longest = self.policy.settings.max_interval / SECONDS_PER_DAY
        if change_rate <= 0.0:
            return longest
        return min(self.AUDIT_CHANGES / change_rate, longest)

    def _planned(self, page: int) -> float:
        rate = float(self.fetch_rates[page])
        interval = 1.0 / rate if rate > 0.0 else self.policy.settings.max_interval / SECONDS_PER_DAY
        return self.last_fetch[page] + interval

    def _untimed(self, page: int) -> bool:
        """Whether the page is scheduled as Poisson: a page timed by its update clock is fetched
        just after its expected update, which a posterior of Poisson changes would spoil."""
        return timing_model(self.records[page], self.policy) is None


HINT_POLICIES: dict[str, HintPolicyFactory] = {
    "no-hints": NoHints,
    "nutch-sitemaps": NutchSitemaps,
    "trust-all": TrustAll,
    "optimal": HintedOptimal,
}
