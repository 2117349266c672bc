"""When to fetch a URL next: the one function the daemon calls after every fetch.

Pure: the daemon and the simulator call it with plain data and the current time. In the
``optimal`` mode the URL's change rate is re-estimated from its own record (the posterior mean
under the population's prior, MODEL.md section 2) and its fetch rate follows from the stored
Lagrange multiplier μ (section 5): the in-place, variable-frequency update. A side task
re-solves μ for the whole population so that the rates add up to the budget.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Literal

from crawler.core.estimate import DEFAULT_PRIOR, GammaPrior, posterior_rate
from crawler.core.model import (
    CONTENT_OUTCOMES,
    GONE,
    REDIRECT,
    SECONDS_PER_DAY,
    Observation,
    Schedule,
    UrlRecord,
)
from crawler.core.plan import Objective, fetch_rate_for, next_fetch_time

FIRST_RETRY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class SchedulePolicy:
    """Everything ``next_fetch`` needs besides the URL: settings and the planner's state."""

    mode: Literal["uniform", "optimal"] = "optimal"
    default_interval_seconds: float = 86400.0
    min_interval_seconds: float = 60.0
    max_interval_seconds: float = 30 * 86400.0
    gone_checks_before_max_interval: int = 3
    objective: Objective = "freshness"
    beta_seconds: float = 86400.0
    # The planner's multiplier; None until it has solved once (the uniform interval is used).
    mu: float | None = None
    prior: GammaPrior = DEFAULT_PRIOR
    host_priors: Mapping[int, GammaPrior] = field(default_factory=dict)
    detect_periods: bool = True

    def prior_for(self, host_id: int) -> GammaPrior:
        return self.host_priors.get(host_id, self.prior)


def failure_retry_seconds(consecutive_failures: int, policy: SchedulePolicy) -> float:
    """Exponential backoff after failed fetches, never beyond the normal interval's bounds."""
    backoff = FIRST_RETRY_SECONDS * 2.0 ** max(0, consecutive_failures - 1)
    return max(policy.min_interval_seconds, min(backoff, policy.max_interval_seconds))


def uniform_interval_seconds(policy: SchedulePolicy) -> float:
    return min(
        max(policy.default_interval_seconds, policy.min_interval_seconds),
        policy.max_interval_seconds,
    )


def estimated_rate_per_day(record: UrlRecord, policy: SchedulePolicy) -> float:
    """The URL's working change rate: posterior mean under its host's (or the global) prior."""
    return posterior_rate(record.history, policy.prior_for(record.host_id))


def optimal_fetch_rate_per_day(
    change_rate_per_day: float, importance: float, policy: SchedulePolicy
) -> float:
    """The Lagrange-optimal fetch rate for μ (section 5), within the interval bounds."""
    assert policy.mu is not None
    return fetch_rate_for(
        change_rate_per_day,
        importance,
        policy.mu,
        policy.objective,
        policy.min_interval_seconds / SECONDS_PER_DAY,
        policy.max_interval_seconds / SECONDS_PER_DAY,
        beta_days=policy.beta_seconds / SECONDS_PER_DAY,
    )


def next_fetch(record: UrlRecord, obs: Observation, policy: SchedulePolicy) -> Schedule:
    """The URL's next fetch time after ``obs``, and the estimates behind it."""
    now = obs.fetched_at
    if obs.outcome == REDIRECT:
        return Schedule(now + policy.max_interval_seconds)  # checked rarely: may move back
    if obs.outcome == GONE:
        if record.consecutive_failures >= policy.gone_checks_before_max_interval:
            return Schedule(now + policy.max_interval_seconds)
        return Schedule(now + uniform_interval_seconds(policy))
    if obs.outcome not in CONTENT_OUTCOMES:
        return Schedule(now + failure_retry_seconds(record.consecutive_failures, policy))
    change_rate = estimated_rate_per_day(record, policy)
    if policy.mode == "uniform" or policy.mu is None:
        interval = uniform_interval_seconds(policy)
        return Schedule(now + interval, change_rate, SECONDS_PER_DAY / interval)
    fetch_rate = optimal_fetch_rate_per_day(change_rate, record.importance, policy)
    periodic = record.periodic if policy.detect_periods else None
    next_days = next_fetch_time(
        now / SECONDS_PER_DAY,
        fetch_rate,
        periodic,
        max_interval_days=policy.max_interval_seconds / SECONDS_PER_DAY,
        min_update_delay_days=policy.min_interval_seconds / SECONDS_PER_DAY,
    )
    return Schedule(next_days * SECONDS_PER_DAY, change_rate, fetch_rate)
