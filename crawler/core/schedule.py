"""When to fetch a URL next: the one function the daemon calls after every fetch.

Pure: the daemon and the simulator call it with plain data and the current time. In the
``optimal`` mode the URL's change rate is re-estimated from its own record (the posterior mean
under the population's prior, docs/MODEL.md section 2) and its fetch rate follows from the stored
Lagrange multiplier μ (section 5): the in-place, variable-frequency update. A side task
re-solves μ for the whole population so that the rates add up to the budget.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING

from crawler.core.estimate import (
    DEFAULT_PRIOR,
    GammaPrior,
    fast_posterior_rate,
    known_times_posterior_rate,
)
from crawler.core.last_modified import dated_history
from crawler.core.model import (
    CONTENT_OUTCOMES,
    DISALLOWED,
    GONE,
    REDIRECT,
    SECONDS_PER_DAY,
    Observation,
    Schedule,
    UrlRecord,
)
from crawler.core.periodic import PeriodicModel, next_update_after
from crawler.core.plan import fetch_rate_for, next_fetch_time
from crawler.core.url_bounds import interval_bounds, next_allowed, parse_windows

if TYPE_CHECKING:  # the core reads the settings it is handed, never the environment
    from crawler.settings import Settings

FIRST_RETRY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class SchedulePolicy:
    """Everything ``next_fetch`` needs besides the URL: the settings, and the plan in force.

    The settings never change while a process runs; the plan's state (μ and the priors) does,
    whenever the planner stores a new plan (``crawler.core.stored_plan.applied``).
    """

    settings: Settings
    # The plan's state: None until the planner has solved once (uniform interval used).
    mu: float | None = None
    prior: GammaPrior = DEFAULT_PRIOR
    host_priors: Mapping[int, GammaPrior] = field(default_factory=dict)

    def prior_for(self, host_id: int) -> GammaPrior:
        return self.host_priors.get(host_id, self.prior)


# Doublings past which a backoff is at any interval bound (2**60 minutes is ~2e12 years);
# a larger exponent would overflow a float.
MAX_DOUBLINGS = 60


def failure_retry_seconds(consecutive_failures: int, policy: SchedulePolicy) -> float:
    """Exponential backoff after failed fetches, growing to the maximum interval and staying
    there: a failing URL is never dropped from the schedule, only checked less often."""
    doublings = min(max(0, consecutive_failures - 1), MAX_DOUBLINGS)
    backoff = FIRST_RETRY_SECONDS * 2.0**doublings
    return max(policy.settings.min_interval, min(backoff, policy.settings.max_interval))


def gone_retry_seconds(consecutive_gone: int, policy: SchedulePolicy) -> float:
    """When to check a page that answered 404/410 ``consecutive_gone`` times in a row.

    A geometric backoff from the uniform interval (the first recheck) to the maximum interval,
    reached at the ``gone_checks_before_max_interval``-th answer and kept from then on: a page
    that was deleted by mistake is found back within a revisit, and a page that stays gone
    costs one fetch per maximum interval, never none (it may come back)."""
    first = uniform_interval_seconds(policy)
    last = policy.settings.max_interval
    checks = policy.settings.gone_checks
    answers = max(1, consecutive_gone)  # the answer being scheduled counts
    if answers >= checks or first >= last:
        return last
    return first * math.pow(last / first, (answers - 1) / (checks - 1))


def uniform_interval_seconds(policy: SchedulePolicy) -> float:
    return min(
        max(policy.settings.default_interval, policy.settings.min_interval),
        policy.settings.max_interval,
    )


def estimated_rate_per_day(record: UrlRecord, policy: SchedulePolicy) -> float:
    """The URL's working change rate: the posterior mean under its host's (or the global)
    prior, by the fast estimator (the previous estimate only seeds its mode search).

    A page timed by its update clock changes at most once per period, so its rate is capped
    at 1 / period (docs/MODEL.md section 3.2): it is fetched just after each update, so every
    fetch sees a change only minutes old, and the Poisson estimators (which assume fetch times
    independent of change times) would climb without bound and starve it.

    When the URL's Last-Modified dates are credible (``last_modified.dated_history``), each
    change's time is known and the rate is the known-change-time posterior under the same
    prior instead (docs/MODEL.md section 2.4).
    """
    return _estimated_rate_per_day(record, policy, timing_model(record, policy))


def _estimated_rate_per_day(
    record: UrlRecord, policy: SchedulePolicy, model: PeriodicModel | None
) -> float:
    """``estimated_rate_per_day`` with the URL's ``timing_model`` given."""
    prior = policy.prior_for(record.host_id)
    dated = dated_history(record)
    if dated is not None:
        rate = known_times_posterior_rate(dated, prior)
    else:
        rate = fast_posterior_rate(record.history, prior, record.change_rate_per_day)
    if model is not None:
        rate = min(rate, 1.0 / model.period_days)
    return rate


def optimal_fetch_rate_per_day(
    change_rate_per_day: float, importance: float, policy: SchedulePolicy,
    min_interval_days: float | None = None, max_interval_days: float | None = None,
) -> float:
    """The Lagrange-optimal fetch rate for μ (section 5), within the interval bounds."""
    assert policy.mu is not None
    return fetch_rate_for(
        change_rate_per_day, importance, policy.mu, policy.settings.objective,
        min_interval_days or policy.settings.min_interval / SECONDS_PER_DAY,
        max_interval_days or policy.settings.max_interval / SECONDS_PER_DAY,
        beta_days=policy.settings.beta_seconds / SECONDS_PER_DAY,
    )


def own_interval_bounds_seconds(record: UrlRecord, policy: SchedulePolicy) -> tuple[float, float]:
    """The URL's (shortest, longest) interval: its own bounds (``crawler bound``) where it has
    them, the policy's otherwise (crawler.core.url_bounds.interval_bounds)."""
    return interval_bounds(
        record.own_min_interval_seconds, record.own_max_interval_seconds,
        policy.settings.min_interval, policy.settings.max_interval,
    )


def min_interval_days(record: UrlRecord, policy: SchedulePolicy) -> float:
    """The URL's shortest revisit interval: its own or the policy's, or its update period when
    it is timed by a clock. A clocked page gains nothing from a second fetch in one cycle, and
    the planner must count exactly what it will spend (docs/MODEL.md section 3.2)."""
    shortest_seconds, longest_seconds = own_interval_bounds_seconds(record, policy)
    return _min_interval_days(shortest_seconds, longest_seconds, timing_model(record, policy))


def _min_interval_days(
    shortest_seconds: float, longest_seconds: float, model: PeriodicModel | None
) -> float:
    shortest = shortest_seconds / SECONDS_PER_DAY
    if model is None:
        return shortest
    return min(max(shortest, model.period_days), longest_seconds / SECONDS_PER_DAY)


def within_own_schedule(record: UrlRecord, now: float, schedule: Schedule) -> Schedule:
    """``schedule`` held to the URL's own bounds (``crawler bound``) and pushed into its next
    allowed window. Every outcome goes through this, failures included: a watcher who asked
    for "at least every 30 s" hears of a broken page that soon, and one who asked for "never
    more often than every 10 min" is never sent more, whatever the backoff or the plan."""
    at = schedule.next_fetch_at
    if record.own_min_interval_seconds is not None:
        at = max(at, now + record.own_min_interval_seconds)
    if record.own_max_interval_seconds is not None:
        at = min(at, now + record.own_max_interval_seconds)
    if record.fetch_windows:
        at = next_allowed(parse_windows(record.fetch_windows), at)
    return schedule if at == schedule.next_fetch_at else replace(schedule, next_fetch_at=at)


def update_delay_seconds(model: PeriodicModel, policy: SchedulePolicy) -> float:
    """How long after an expected update to fetch: three jitters, at least the minimum
    interval (docs/MODEL.md section 3.2)."""
    return max(3.0 * model.jitter_days * SECONDS_PER_DAY, policy.settings.min_interval)


def timing_model(record: UrlRecord, policy: SchedulePolicy) -> PeriodicModel | None:
    """The URL's update clock when it is sharp enough to time fetches by (the delay after an
    update under a quarter of the period), else None: scheduled as a Poisson page."""
    model = record.periodic if policy.settings.detect_periods else None
    if model is None:
        return None
    if update_delay_seconds(model, policy) >= 0.25 * model.period_days * SECONDS_PER_DAY:
        return None
    return model


def next_fetch(
    record: UrlRecord, obs: Observation, policy: SchedulePolicy, *,
    robots_expires_at: float | None = None,
) -> Schedule:
    """The URL's next fetch time after ``obs``, and the estimates behind it.

    The only writer rule of ``next_fetch_at`` after a fetch. A URL robots.txt forbids is
    rechecked when the host's robots.txt is next fetched (``robots_expires_at``), not sooner
    than the shortest interval. The URL's own bounds and windows apply last
    (``within_own_schedule``).
    """
    schedule = _next_fetch(record, obs, policy, robots_expires_at)
    if (
        record.own_min_interval_seconds is None
        and record.own_max_interval_seconds is None
        and not record.fetch_windows
    ):
        return schedule
    return within_own_schedule(record, obs.fetched_at, schedule)


def _next_fetch(
    record: UrlRecord, obs: Observation, policy: SchedulePolicy, robots_expires_at: float | None
) -> Schedule:
    now = obs.fetched_at
    if obs.outcome == DISALLOWED:
        return Schedule(max(robots_expires_at or now, now + policy.settings.min_interval))
    if obs.outcome == REDIRECT:
        return Schedule(now + policy.settings.max_interval)  # checked rarely: may move back
    if obs.outcome == GONE:
        return Schedule(now + gone_retry_seconds(record.consecutive_failures, policy))
    if obs.outcome not in CONTENT_OUTCOMES:
        return Schedule(now + failure_retry_seconds(record.consecutive_failures, policy))
    # The update clock and the bounds, read once: every fetch comes here.
    periodic = timing_model(record, policy)
    change_rate = _estimated_rate_per_day(record, policy, periodic)
    shortest, longest = own_interval_bounds_seconds(record, policy)
    if policy.settings.schedule == "uniform" or policy.mu is None:
        interval = min(max(uniform_interval_seconds(policy), shortest), longest)
        return Schedule(now + interval, change_rate, SECONDS_PER_DAY / interval)
    fetch_rate = optimal_fetch_rate_per_day(
        change_rate, record.importance, policy, _min_interval_days(shortest, longest, periodic),
        longest / SECONDS_PER_DAY,
    )
    next_days = next_fetch_time(
        now / SECONDS_PER_DAY, fetch_rate, periodic, max_interval_days=longest / SECONDS_PER_DAY,
        min_update_delay_days=policy.settings.min_interval / SECONDS_PER_DAY,
        saw_change=bool(obs.changed),
    )
    if periodic is not None and not obs.changed:
        next_days = max(next_days, _retry_after_early_miss(now / SECONDS_PER_DAY, periodic, policy))
    return Schedule(next_days * SECONDS_PER_DAY, change_rate, fetch_rate)


def _retry_after_early_miss(now_days: float, model: PeriodicModel, policy: SchedulePolicy) -> float:
    """The retry of a timed page fetched shortly BEFORE its target (expected update + delay)
    that found nothing new: the target plus the same lead, at most an eighth of the period;
    -inf when the fetch was not early (on time, a skipped update: the next cycle is the plan's).

    A fetch comes early only when a work-conserving crawler runs ahead of its schedule;
    retrying at the target itself would hand the page every spare slot until the update.
    """
    delay_days = update_delay_seconds(model, policy) / SECONDS_PER_DAY
    target = next_update_after(model, now_days - delay_days) + delay_days
    lead = target - now_days
    if not 0.0 < lead < 0.25 * model.period_days:
        return -math.inf
    return target + min(lead, 0.125 * model.period_days)
