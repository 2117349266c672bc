"""When to fetch a URL next: the one function the daemon calls after every fetch.

Pure: the daemon and the simulator call it with plain data and the current time.
"""

from __future__ import annotations

from dataclasses import dataclass

from crawler.core.model import CONTENT_OUTCOMES, GONE, Observation, Schedule, UrlRecord

FIRST_RETRY_SECONDS = 60.0


@dataclass(frozen=True, slots=True)
class SchedulePolicy:
    default_interval_seconds: float = 86400.0
    min_interval_seconds: float = 60.0
    max_interval_seconds: float = 30 * 86400.0
    gone_checks_before_max_interval: int = 3


def failure_retry_seconds(consecutive_failures: int, policy: SchedulePolicy) -> float:
    """Exponential backoff after failed fetches, never beyond the normal interval's bounds."""
    backoff = FIRST_RETRY_SECONDS * 2.0 ** max(0, consecutive_failures - 1)
    return max(policy.min_interval_seconds, min(backoff, policy.max_interval_seconds))


def next_fetch(record: UrlRecord, obs: Observation, policy: SchedulePolicy) -> Schedule:
    """The uniform policy: every page every ``default_interval_seconds``."""
    now = obs.fetched_at
    if obs.outcome == GONE:
        if record.consecutive_failures >= policy.gone_checks_before_max_interval:
            return Schedule(now + policy.max_interval_seconds)
        return Schedule(now + policy.default_interval_seconds)
    if obs.outcome not in CONTENT_OUTCOMES:
        return Schedule(now + failure_retry_seconds(record.consecutive_failures, policy))
    interval = min(
        max(policy.default_interval_seconds, policy.min_interval_seconds),
        policy.max_interval_seconds,
    )
    return Schedule(now + interval, record.change_rate_per_day, 86400.0 / interval)
