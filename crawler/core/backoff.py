"""How long to leave a host alone after it failed or asked us to slow down. Pure.

A host's health is two columns of ``hosts``: ``consecutive_failures`` and ``backoff_until``.
- 429 and 503 with Retry-After (either form): wait what the server asked, capped (24 h).
- Other failures (5xx, 429/503 without Retry-After, timeouts, connection failures):
  exponential backoff with "equal jitter" (Brooker 2015, "Exponential Backoff and Jitter":
  half the delay fixed, half random), so hosts that failed together do not retry together.
- Circuit breaker: from ``failure_threshold`` consecutive failures on, the host is "open" for
  ``open_seconds`` doubling with each further failure, capped; when ``backoff_until`` passes
  the next request is the probe ("half-open"): a success closes the breaker (failures reset
  to 0), a failure reopens it for longer.
None of this is a change of content: the worker records these fetches as errors only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from crawler.core import model
from crawler.core.model import FetchResult

if TYPE_CHECKING:  # the core reads the settings it is handed, never the environment
    from crawler.settings import Settings

SUCCESS = "success"  # the host answered sensibly (2xx, 3xx, 304, 4xx other than 429)
FAILURE = "failure"  # the host is struggling: count it
NEUTRAL = "neutral"  # says nothing about the host (refused by us before connecting)

@dataclass(frozen=True, slots=True)
class HostHealth:
    """The ``hosts`` columns of the same names (``backoff_until`` in POSIX seconds)."""

    consecutive_failures: int = 0
    backoff_until: float | None = None


def health_after(
    health: HostHealth, verdict: str, now: float, settings: Settings, *,
    retry_after_seconds: float | None, rng_value: float,
) -> HostHealth:
    """The host's health after one request whose ``host_verdict`` is ``verdict``, under the
    settings' backoff and circuit breaker."""
    if verdict == SUCCESS:
        return HostHealth()
    if verdict == NEUTRAL:
        return health
    failures = health.consecutive_failures + 1
    until = host_backoff_until(
        now, failures, retry_after_seconds, rng_value=rng_value,
        cap_seconds=settings.backoff_cap_seconds, base_seconds=settings.backoff_base_seconds,
        failure_threshold=settings.breaker_failure_threshold,
        open_seconds=settings.breaker_open_seconds,
    )
    return HostHealth(consecutive_failures=failures, backoff_until=until)


def host_verdict(result: FetchResult) -> str:
    """Whether a fetch counts for or against the host's health."""
    if result.outcome in (model.BLOCKED, model.DISALLOWED):
        return NEUTRAL
    if result.outcome in (model.TIMEOUT, model.NETWORK_ERROR):
        return FAILURE
    status = result.status
    if status is not None and (status >= 500 or status == 429):
        return FAILURE
    return SUCCESS


def host_backoff_until(
    now: float,
    consecutive_failures: int,
    retry_after_seconds: float | None,
    *,
    rng_value: float,
    cap_seconds: float,
    base_seconds: float,
    failure_threshold: int,
    open_seconds: float,
) -> float | None:
    """When the host may be contacted again, or None if it need not wait.

    ``rng_value`` in [0, 1) supplies the jitter, so that this stays a function.
    """
    if retry_after_seconds is not None:
        return now + min(max(0.0, retry_after_seconds), cap_seconds)
    if consecutive_failures <= 0:
        return None
    if consecutive_failures < failure_threshold:
        # base, 2 base, 4 base, ...: brief trouble costs seconds.
        delay = base_seconds * 2.0 ** (consecutive_failures - 1)
    else:
        # Breaker open: open_seconds, doubling per failed probe.
        delay = open_seconds * 2.0 ** min(consecutive_failures - failure_threshold, 60)
    delay = min(delay, cap_seconds)
    # Equal jitter (Brooker 2015): uniform in [delay / 2, delay).
    return now + delay * (0.5 + 0.5 * min(max(rng_value, 0.0), 1.0))
