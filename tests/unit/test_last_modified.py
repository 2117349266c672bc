"""Last-Modified evidence reaches the daemon's estimate only when the server's dates are
credible (Cho & Garcia-Molina 2003's estimator for known change times)."""

from __future__ import annotations

import pytest

from crawler.config import default_settings, schedule_policy, transition_config
from crawler.core.backoff import HostHealth
from crawler.core.estimate import last_modified_rate, posterior_rate
from crawler.core.last_modified import known_change_rate_per_day
from crawler.core.model import SECONDS_PER_DAY, FetchResult, Outcome, UrlRecord
from crawler.core.schedule import estimated_rate_per_day
from crawler.core.transition import HostContext, transition

DAY = SECONDS_PER_DAY
START = 1_800_000_000.0
CONFIG = transition_config(
    default_settings(),
    schedule_policy(default_settings(), mode="uniform", default_interval_seconds=DAY),
    simhash_threshold=6, max_outlinks=10, max_depth=3,
)
HOST = HostContext(HostHealth(), 1.0, 0.0)


def body(version: int) -> bytes:
    words = " ".join(f"v{version}w{i}" for i in range(200))
    return f"<html><body><p>{words}</p></body></html>".encode()


def crawl(dated: str, fetches: int = 12) -> UrlRecord:
    """Daily fetches of a page that changes every second day, at noon of the day before."""
    record = UrlRecord(1, "http://a.test/")
    for i in range(fetches):
        now = START + i * DAY
        version = i // 2
        modified = {"true": START + (2 * version - 0.5) * DAY, "stamped": now, "none": None}
        result = FetchResult(now, 0.1, Outcome.OK, status=200, body=body(version),
                             content_type="text/html", last_modified=modified[dated])
        record = transition(record, result, HOST, CONFIG, now=now, rng_value=0.5).record
    return record


def test_credible_dates_give_cho_and_garcia_molinas_estimate() -> None:
    record = crawl("true")
    h = record.last_modified_history
    assert h.changes > 0
    known = known_change_rate_per_day(record)
    assert known == pytest.approx(last_modified_rate(h.fetches, h.changes, h.observed_days))
    # The page changes every 2 days: the known-times estimate is close to 0.5/day.
    assert known == pytest.approx(0.5, rel=0.5)
    # The schedule's rate stays the interval posterior (the dates reach the period detector
    # instead: docs/MODEL.md section 2.4); measured on grimes, it schedules better.
    posterior = posterior_rate(record.history, CONFIG.schedule.prior)
    assert estimated_rate_per_day(record, CONFIG.schedule) == pytest.approx(posterior, rel=0.03)


@pytest.mark.parametrize("dated", ["stamped", "none"])
def test_dates_that_are_not_credible_leave_the_posterior(dated: str) -> None:
    record = crawl(dated)
    assert known_change_rate_per_day(record) is None
    posterior = posterior_rate(record.history, CONFIG.schedule.prior)
    # The schedule's fast estimator, within its stated 3% of the exact posterior.
    assert estimated_rate_per_day(record, CONFIG.schedule) == pytest.approx(posterior, rel=0.03)


def test_too_few_dated_fetches_say_nothing() -> None:
    assert known_change_rate_per_day(crawl("true", fetches=3)) is None
