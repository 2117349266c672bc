"""Re-planning: which URLs a new μ or prior moves, and their schedule under it.

A URL's next fetch time is set when it is fetched, from the μ and prior in force then. When
the planner later re-solves μ, a URL's fetch rate can move a long way: under the freshness
objective a page changing faster than μ's cut-off gets no fetches (it waits the maximum
interval, a year by default), and a small drop of μ brings it back above the cut-off. Without
a re-plan such a URL would wait out its year. The daemon's planner and the simulator both
decide here which URLs to move and where to, so the simulator measures the daemon's policy.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
from numpy.typing import NDArray

from crawler.core.estimate import ChangeHistory, GammaPrior, fast_posterior_rate
from crawler.core.model import OK, SECONDS_PER_DAY, Observation, Schedule, UrlRecord
from crawler.core.plan import fetch_rates
from crawler.core.schedule import SchedulePolicy, next_fetch, uniform_interval_seconds
from crawler.core.url_bounds import interval_bound_arrays

FloatArray = NDArray[np.float64]
BoolArray = NDArray[np.bool_]

RESCHEDULE_RELATIVE_CHANGE = 0.1
"""A URL whose fetch rate moved less than this keeps its schedule (no churn for nothing)."""
REPLAN_RELATIVE_CHANGE = 0.02
"""μ or the prior moving less than this since the last walk leaves every rate within
RESCHEDULE_RELATIVE_CHANGE of where it was: no walk over the population is needed."""


def _relative_change(old: float, new: float) -> float:
    return abs(new - old) / max(abs(old), 1e-300)


def _settings_of(policy: SchedulePolicy) -> tuple[object, ...]:
    return (
        policy.settings.schedule, policy.settings.objective, policy.settings.beta_seconds,
        policy.settings.default_interval, policy.settings.min_interval,
        policy.settings.max_interval,
    )


def policy_moved(walked: SchedulePolicy | None, new: SchedulePolicy) -> bool:
    """Whether the settings, μ or the prior moved enough, since the policy of the last walk over
    the population (``walked``), that some URL's rate may have moved materially.

    Compared with the last walk's policy, not the last round's: a μ that drifts by 1% a round
    must still trigger a walk once it has drifted by more than REPLAN_RELATIVE_CHANGE. In the
    uniform mode only the settings count: a lower default interval must pull due times in.
    """
    if walked is None or _settings_of(walked) != _settings_of(new):
        return True
    if new.settings.schedule == "uniform":
        return False
    if walked.mu is None or new.mu is None:
        return True
    return (
        _relative_change(walked.mu, new.mu) > REPLAN_RELATIVE_CHANGE
        or _relative_change(walked.prior.shape, new.prior.shape) > REPLAN_RELATIVE_CHANGE
        or _relative_change(walked.prior.rate, new.prior.rate) > REPLAN_RELATIVE_CHANGE
        or walked.host_priors != new.host_priors
    )


def interval_bounds_days(
    policy: SchedulePolicy, size: int, own_min_seconds: FloatArray | None = None,
    own_max_seconds: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray]:
    """Each URL's (shortest, longest) interval in days: its own bounds (``crawler bound``; NaN
    where it has none) or the policy's, by the rule the worker applies to one URL
    (crawler.core.schedule.own_interval_bounds_seconds)."""
    none = np.full(size, np.nan)
    shortest, longest = interval_bound_arrays(
        none if own_min_seconds is None else np.asarray(own_min_seconds, dtype=np.float64),
        none if own_max_seconds is None else np.asarray(own_max_seconds, dtype=np.float64),
        policy.settings.min_interval, policy.settings.max_interval,
    )
    return shortest / SECONDS_PER_DAY, longest / SECONDS_PER_DAY


def planned_rates(
    change_rates: FloatArray, importance: FloatArray, policy: SchedulePolicy,
    own_min_seconds: FloatArray | None = None, own_max_seconds: FloatArray | None = None,
) -> FloatArray:
    """The fetch rate ``policy`` gives each URL: the uniform one, or the optimum for its μ,
    within each URL's own interval bounds (NaN where it has none), as the worker gives it."""
    shortest, longest = interval_bounds_days(
        policy, change_rates.size, own_min_seconds, own_max_seconds
    )
    if policy.settings.schedule == "uniform" or policy.mu is None:
        uniform = uniform_interval_seconds(policy) / SECONDS_PER_DAY
        return np.asarray(1.0 / np.clip(uniform, shortest, longest), dtype=np.float64)
    return fetch_rates(
        change_rates, importance, policy.mu, policy.settings.objective,
        beta_days=policy.settings.beta_seconds / SECONDS_PER_DAY,
        min_interval_days=shortest, max_interval_days=longest,
    )


def current_rates(
    histories: Sequence[ChangeHistory | None], stored_rates: FloatArray, host_ids: Sequence[int],
    prior: GammaPrior, host_priors: Mapping[int, GammaPrior],
) -> FloatArray:
    """Each URL's change rate as its next fetch will estimate it: the posterior mean of its
    history under its host's (or the global) new prior, the prior's mean where it has none.

    The rate stored with a URL was estimated under the prior in force at its last fetch; a μ
    solved over those while the worker estimates under a refitted prior spends a different
    budget than it was solved for (early in a crawl the prior moves by orders of magnitude).
    """
    rates = np.empty(len(histories), dtype=np.float64)
    for i, (history, host) in enumerate(zip(histories, host_ids, strict=True)):
        own = host_priors.get(host, prior)
        if history is None or history.fetches <= 0:
            rates[i] = own.mean_rate_per_day
            continue
        guess = float(stored_rates[i])
        rates[i] = fast_posterior_rate(
            history, own, guess if math.isfinite(guess) and guess > 0 else None
        )
    return rates


def moved_urls(
    stored_fetch_rates: FloatArray, change_rates: FloatArray, importance: FloatArray,
    policy: SchedulePolicy, own_min_seconds: FloatArray | None = None,
    own_max_seconds: FloatArray | None = None,
) -> BoolArray:
    """Which URLs' fetch rate under ``policy`` moved materially from the stored one (a
    URL with no stored rate always counts as moved); own bounds as in ``planned_rates``."""
    new = planned_rates(change_rates, importance, policy, own_min_seconds, own_max_seconds)
    old = stored_fetch_rates
    return (old <= 0) | (np.abs(new - old) > RESCHEDULE_RELATIVE_CHANGE * old)


def replanned(record: UrlRecord, policy: SchedulePolicy, now: float) -> Schedule:
    """The schedule ``next_fetch`` gives the URL's last fetch under the new policy, from now on.

    The same function the worker calls after a fetch, so a detected update period keeps its
    alignment; a fetch the new rate puts in the past is due now.
    """
    assert record.last_fetched_at is not None
    seen = Observation(
        fetched_at=record.last_fetched_at, outcome=OK, status=record.last_status, size_bytes=0,
        duration_seconds=0.0, simhash=record.last_simhash, content_hash=record.last_content_hash,
        simhash_distance=None, changed=None, content_changed=None,
        last_modified=record.last_modified, error_kind=None, truncated=False,
    )
    schedule = next_fetch(record, seen, policy)
    return replace(schedule, next_fetch_at=max(now, schedule.next_fetch_at))
