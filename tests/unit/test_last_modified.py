"""Last-Modified evidence sets the daemon's rate estimate when the server's dates are credible
and agree with the fingerprint: the known-change-time posterior (Cho & Garcia-Molina 2003's
setting, under the population prior), through the one transition the worker and the simulator
share."""

from __future__ import annotations

import pytest

from crawler.core.backoff import HostHealth
from crawler.core.estimate import (
    GammaPrior,
    fast_posterior_rate,
    known_times_posterior_rate,
    last_modified_rate,
)
from crawler.core.last_modified import dated_history, known_change_rate_per_day
from crawler.core.model import SECONDS_PER_DAY, FetchResult, Outcome, UrlRecord
from crawler.core.patterns import EVERY_URL
from crawler.core.schedule import SchedulePolicy, estimated_rate_per_day
from crawler.core.transition import HostContext, transition
from crawler.settings import default_settings

DAY = SECONDS_PER_DAY
START = 1_800_000_000.0
POLICY = SchedulePolicy(default_settings(
    schedule="uniform", default_interval=DAY, simhash_threshold=6, max_outlinks=10, max_depth=3,
), prior=GammaPrior(0.5, 2.0))
HOST = HostContext(HostHealth(), 1.0, 0.0)


def body(version: int, cosmetic: int = 0) -> bytes:
    words = " ".join(f"v{version}w{i}" for i in range(200))
    return f"<html><body><p>{words}</p><p>{cosmetic}</p></body></html>".encode()


def fetch(record: UrlRecord, now: float, version: int, modified: float | None,
          cosmetic: int = 0) -> UrlRecord:
    result = FetchResult(now, 0.1, Outcome.OK, status=200, body=body(version, cosmetic),
                         content_type="text/html", last_modified=modified)
    return transition(record, result, HOST, POLICY, url_filter=EVERY_URL, now=now,
                      rng_value=0.5).record


def crawl(dated: str, fetches: int = 12) -> UrlRecord:
    """Daily fetches of a page that changes every second day, dated as ``dated`` says:
    "late" a quarter day before the fetch that finds it, "early" three quarters of a day
    before, "stamped" with the response time, "none" without a date."""
    record = UrlRecord(1, "http://a.test/")
    for i in range(fetches):
        now = START + i * DAY
        version = i // 2
        changed_at = START + 2 * version * DAY
        modified = {
            "late": changed_at - 0.25 * DAY,
            "early": changed_at - 0.75 * DAY,
            "stamped": now,
            "none": None,
        }[dated]
        record = fetch(record, now, version, modified)
    return record


def interval_posterior(record: UrlRecord) -> float:
    return fast_posterior_rate(record.history, POLICY.prior)


@pytest.mark.parametrize("dated", ["late", "early"])
def test_credible_dates_set_the_rate(dated: str) -> None:
    record = crawl(dated)
    history = dated_history(record)
    assert history is not None and history.changes == 5
    # Unchanged for 6 whole days, and before each of the 5 changes for 1/4 (or 3/4) of a day.
    stretch = 0.25 if dated == "late" else 0.75
    assert history.observed_days == pytest.approx(6.0 + 5 * stretch)
    assert estimated_rate_per_day(record, POLICY) == pytest.approx(
        known_times_posterior_rate(history, POLICY.prior)
    )
    assert estimated_rate_per_day(record, POLICY) == pytest.approx(
        (0.5 + 5) / (2.0 + 6.0 + 5 * stretch)
    )


def test_the_rate_depends_on_when_the_dates_put_the_changes() -> None:
    # Same fetches, same changes seen: the interval posterior cannot tell the two pages apart;
    # the dates can (a page that was unchanged longer before each change changes less often).
    late, early = crawl("late"), crawl("early")
    assert interval_posterior(late) == pytest.approx(interval_posterior(early), rel=1e-9)
    assert estimated_rate_per_day(late, POLICY) > 1.2 * estimated_rate_per_day(early, POLICY)


@pytest.mark.parametrize("dated", ["stamped", "none"])
def test_dates_that_are_not_credible_leave_the_interval_posterior(dated: str) -> None:
    record = crawl(dated)
    assert dated_history(record) is None
    assert known_change_rate_per_day(record) is None
    assert estimated_rate_per_day(record, POLICY) == pytest.approx(
        interval_posterior(record), rel=1e-4
    )


def test_too_few_dated_fetches_say_nothing() -> None:
    record = crawl("late", fetches=3)
    assert dated_history(record) is None
    assert estimated_rate_per_day(record, POLICY) == pytest.approx(
        interval_posterior(record), rel=1e-4
    )


def test_dates_that_move_under_the_simhash_threshold_are_not_used() -> None:
    # The date moves at every fetch (a counter on the page), the text only every second day:
    # the dates time edits the crawler does not count as changes.
    record = UrlRecord(1, "http://a.test/")
    for i in range(12):
        now = START + i * DAY
        record = fetch(record, now, i // 2, now - 0.25 * DAY, cosmetic=i)
    assert record.change_count == 5
    assert dated_history(record) is None
    assert estimated_rate_per_day(record, POLICY) == pytest.approx(
        interval_posterior(record), rel=1e-4
    )


def test_a_304_without_a_date_keeps_the_evidence() -> None:
    record = crawl("late")
    before = dated_history(record)
    assert before is not None
    now = START + 12 * DAY
    result = FetchResult(now, 0.1, Outcome.NOT_MODIFIED, status=304)
    after = transition(record, result, HOST, POLICY, url_filter=EVERY_URL, now=now,
                      rng_value=0.5).record
    history = dated_history(after)
    assert history is not None
    assert (history.fetches, history.changes) == (before.fetches + 1, before.changes)
    assert history.observed_days == pytest.approx(before.observed_days + 1.0)


def test_cho_and_garcia_molinas_estimate_is_reported_for_credible_dates() -> None:
    record = crawl("late")
    h = record.last_modified_history
    assert known_change_rate_per_day(record) == pytest.approx(
        last_modified_rate(h.fetches, h.changes, h.observed_days)
    )
