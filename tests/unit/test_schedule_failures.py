"""Gone and failing pages stay on the schedule: their rechecks back off to the maximum
interval and stay there, never to no next fetch at all."""

from __future__ import annotations

import math

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.core.model import FetchResult, Outcome, UrlRecord, UrlState
from crawler.core.observe import observe, updated_record
from crawler.core.schedule import (
    SchedulePolicy,
    failure_retry_seconds,
    gone_retry_seconds,
    next_fetch,
    uniform_interval_seconds,
)
from crawler.settings import default_settings

NOW = 1_800_000_000.0
DAY = 86400.0
POLICY = SchedulePolicy(default_settings(schedule="uniform", default_interval=DAY,
                                         max_interval=30 * DAY, gone_checks=3))

FAILURES = {
    Outcome.TIMEOUT: FetchResult(NOW, 3.0, Outcome.TIMEOUT, error_kind="timeout_total"),
    Outcome.NETWORK_ERROR: FetchResult(NOW, 0.1, Outcome.NETWORK_ERROR,
                                       error_kind="connection_refused"),
    Outcome.HTTP_ERROR: FetchResult(NOW, 0.1, Outcome.HTTP_ERROR, status=500),
    Outcome.GONE: FetchResult(NOW, 0.1, Outcome.GONE, status=404),
}


def after(record: UrlRecord, result: FetchResult) -> tuple[UrlRecord, float]:
    """The record after ``result`` and the seconds until its next fetch."""
    obs = observe(record, result, 6, None)
    record = updated_record(record, result, obs)
    return record, next_fetch(record, obs, POLICY).next_fetch_at - result.fetched_at


def test_a_gone_page_backs_off_from_the_uniform_interval_to_the_maximum() -> None:
    record = UrlRecord(1, "http://a.test/", state=UrlState.ACTIVE)
    waits = []
    for _ in range(6):
        record, wait = after(record, FAILURES[Outcome.GONE])
        waits.append(wait)
    assert record.state == UrlState.GONE
    assert waits[0] == pytest.approx(uniform_interval_seconds(POLICY))
    assert waits[0] < waits[1] < waits[2]
    assert waits[2:] == [POLICY.settings.max_interval] * 4


@pytest.mark.parametrize("outcome", [Outcome.TIMEOUT, Outcome.NETWORK_ERROR,
                                     Outcome.HTTP_ERROR])
def test_a_failing_page_backs_off_to_the_maximum_and_stays_there(outcome: Outcome) -> None:
    record = UrlRecord(1, "http://a.test/", state=UrlState.ACTIVE)
    waits = []
    for _ in range(40):
        record, wait = after(record, FAILURES[outcome])
        waits.append(wait)
    assert waits == sorted(waits)
    assert waits[-1] == POLICY.settings.max_interval


@given(st.integers(min_value=0, max_value=10**9), st.integers(min_value=1, max_value=50))
def test_every_backoff_is_finite_and_within_the_bounds(failures: int, checks: int) -> None:
    policy = SchedulePolicy(default_settings(gone_checks=checks))
    for wait in (failure_retry_seconds(failures, policy), gone_retry_seconds(failures, policy)):
        assert math.isfinite(wait)
        assert policy.settings.min_interval <= wait <= policy.settings.max_interval


def test_one_gone_check_means_the_maximum_interval_at_once() -> None:
    policy = SchedulePolicy(default_settings(gone_checks=1))
    assert gone_retry_seconds(1, policy) == policy.settings.max_interval
