"""Host backoff: Retry-After, exponential backoff with jitter, circuit breaker."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.core import model
from crawler.core.backoff import (
    FAILURE,
    NEUTRAL,
    SUCCESS,
    HostHealth,
    health_after,
    host_backoff_until,
    host_verdict,
)
from crawler.core.model import FetchResult
from crawler.settings import default_settings

DAY = 86400.0
SETTINGS = default_settings()


def backoff_until(
    now: float,
    failures: int,
    retry_after_seconds: float | None,
    *,
    rng_value: float,
    cap_seconds: float = SETTINGS.backoff_cap_seconds,
) -> float | None:
    """``host_backoff_until`` with the default settings' breaker."""
    return host_backoff_until(
        now, failures, retry_after_seconds, rng_value=rng_value, cap_seconds=cap_seconds,
        base_seconds=SETTINGS.backoff_base_seconds,
        failure_threshold=SETTINGS.breaker_failure_threshold,
        open_seconds=SETTINGS.breaker_open_seconds,
    )


def result(outcome: str, status: int | None = None) -> FetchResult:
    return FetchResult(fetched_at=0.0, duration_seconds=0.1, outcome=outcome, status=status)


@pytest.mark.parametrize(
    ("fetch_result", "verdict"),
    [
        (result(model.OK, 200), SUCCESS),
        (result(model.NOT_MODIFIED, 304), SUCCESS),
        (result(model.GONE, 404), SUCCESS),
        (result(model.HTTP_ERROR, 403), SUCCESS),
        (result(model.HTTP_ERROR, 429), FAILURE),
        (result(model.HTTP_ERROR, 500), FAILURE),
        (result(model.HTTP_ERROR, 503), FAILURE),
        (result(model.TIMEOUT), FAILURE),
        (result(model.NETWORK_ERROR), FAILURE),
        (result(model.BLOCKED), NEUTRAL),
        (result(model.DISALLOWED), NEUTRAL),
    ],
)
def test_verdicts(fetch_result: FetchResult, verdict: str) -> None:
    assert host_verdict(fetch_result) == verdict


def test_retry_after_is_honoured_and_capped() -> None:
    assert backoff_until(100.0, 1, 120.0, rng_value=0.3) == 220.0
    assert backoff_until(100.0, 1, 10 * DAY, rng_value=0.3) == 100.0 + DAY
    assert backoff_until(100.0, 1, 10 * DAY, rng_value=0.3, cap_seconds=3600) == 3700.0


def test_no_failure_no_wait() -> None:
    assert backoff_until(100.0, 0, None, rng_value=0.5) is None


@given(st.integers(1, 200), st.floats(0.0, 1.0, exclude_max=True), st.floats(0.0, 1e9))
def test_backoff_is_bounded_and_jittered(failures: int, rng_value: float, now: float) -> None:
    until = backoff_until(now, failures, None, rng_value=rng_value)
    assert until is not None
    delay = until - now
    assert 0 < delay <= DAY
    low = backoff_until(now, failures, None, rng_value=0.0)
    assert low is not None
    # Equal jitter: within [d/2, d), where d/2 is the delay at rng_value 0.
    assert low - now - 1e-6 <= delay <= 2 * (low - now) + 1e-6


@given(st.integers(1, 40), st.floats(0.0, 1.0, exclude_max=True))
def test_backoff_never_decreases_with_failures(failures: int, rng_value: float) -> None:
    now = 0.0
    before = backoff_until(now, failures, None, rng_value=rng_value)
    after = backoff_until(now, failures + 1, None, rng_value=rng_value)
    assert before is not None and after is not None and after >= before


def test_circuit_breaker_opens_probes_and_closes() -> None:
    settings = default_settings(backoff_base_seconds=2.0, breaker_failure_threshold=3,
                                breaker_open_seconds=300.0)
    health = HostHealth()
    now = 0.0
    delays = []
    for _ in range(6):
        health = health_after(health, FAILURE, now, settings, retry_after_seconds=None,
                              rng_value=0.0)
        assert health.backoff_until is not None
        assert now < health.backoff_until
        delays.append(health.backoff_until - now)
        now = health.backoff_until  # the probe
        assert not now < health.backoff_until
    assert health.consecutive_failures == 6
    assert [round(d) for d in delays] == [1, 2, 150, 300, 600, 1200]  # d/2 at rng 0
    neutral = health_after(health, NEUTRAL, now, settings, retry_after_seconds=None,
                           rng_value=0.5)
    assert neutral == health
    assert health_after(health, SUCCESS, now, settings, retry_after_seconds=None,
                        rng_value=0.5) == HostHealth()
