"""A watcher's own schedule (crawler.core.url_bounds): durations, weekly windows, and the
per-URL interval bounds as the worker (schedule.next_fetch), the planner's solve and its
rescheduling walk (replan.planned_rates) all apply them, the same way."""

from __future__ import annotations

import calendar

import numpy as np
import pytest

from crawler.core.model import OK, SECONDS_PER_DAY, Observation, UrlRecord
from crawler.core.plan import solve_mu
from crawler.core.replan import interval_bounds_days, planned_rates
from crawler.core.schedule import SchedulePolicy, next_fetch
from crawler.core.url_bounds import (
    BoundError,
    binding_bound,
    check_bounds,
    interval_bounds,
    next_allowed,
    parse_duration,
    parse_windows,
)
from crawler.settings import default_settings


def utc(text: str) -> float:
    """POSIX seconds of 'YYYY-MM-DD HH:MM' UTC."""
    import time

    return float(calendar.timegm(time.strptime(text, "%Y-%m-%d %H:%M")))


def policy(mu: float | None = 1.0) -> SchedulePolicy:
    return SchedulePolicy(default_settings(
        schedule="optimal", default_interval=3600.0, min_interval=60.0,
        max_interval=30 * SECONDS_PER_DAY, gone_checks=5,
        objective="freshness", beta_seconds=SECONDS_PER_DAY, detect_periods=False,
    ), mu=mu)


def fetched(at: float) -> Observation:
    return Observation(
        fetched_at=at, outcome=OK, status=200, size_bytes=10, duration_seconds=0.1,
        simhash=1, content_hash=b"x", simhash_distance=0, changed=False,
        content_changed=False, last_modified=None, error_kind=None, truncated=False,
    )


def test_durations_read_as_people_write_them() -> None:
    assert parse_duration("30s") == 30.0
    assert parse_duration("10m") == 600.0
    assert parse_duration("2h") == 7200.0
    assert parse_duration("1d") == SECONDS_PER_DAY
    assert parse_duration("45") == 45.0
    for bad in ("", "0s", "-3m", "ten minutes", "5y"):
        with pytest.raises(BoundError):
            parse_duration(bad)


def test_contradictory_bounds_are_refused() -> None:
    check_bounds(600.0, 3600.0)
    with pytest.raises(BoundError, match="contradicts"):
        check_bounds(3600.0, 600.0)


def test_next_allowed_time_is_inside_a_window() -> None:
    windows = parse_windows("Mon-Fri 08:00-18:00")
    # 2026-11-23 is a Monday.
    inside = utc("2026-11-23 09:30")
    assert next_allowed(windows, inside) == inside
    assert next_allowed(windows, utc("2026-11-23 07:00")) == utc("2026-11-23 08:00")
    assert next_allowed(windows, utc("2026-11-23 18:00")) == utc("2026-11-24 08:00")
    # Friday evening and the weekend wait for Monday morning.
    assert next_allowed(windows, utc("2026-11-27 19:00")) == utc("2026-11-30 08:00")
    assert next_allowed(windows, utc("2026-11-29 12:00")) == utc("2026-11-30 08:00")
    assert next_allowed(None, inside) == inside


def test_overnight_and_several_windows() -> None:
    windows = parse_windows("22:00-06:00; Sat 12:00-13:00")
    assert next_allowed(windows, utc("2026-11-24 23:00")) == utc("2026-11-24 23:00")
    assert next_allowed(windows, utc("2026-11-25 05:59")) == utc("2026-11-25 05:59")
    assert next_allowed(windows, utc("2026-11-25 06:00")) == utc("2026-11-25 22:00")
    assert next_allowed(windows, utc("2026-11-28 07:00")) == utc("2026-11-28 12:00")
    # Sunday 22:00 runs past the week's end into Monday 06:00.
    assert next_allowed(windows, utc("2026-11-30 03:00")) == utc("2026-11-30 03:00")
    for bad in ("Mon-Fri", "Xyz 08:00-09:00", "08:00-08:00", "25:00-26:00"):
        with pytest.raises(BoundError):
            parse_windows(bad)


def test_the_worker_keeps_a_url_within_its_own_bounds() -> None:
    now = 1_000_000.0
    # μ so large that the optimum gives the page nothing: it would wait the longest interval.
    starved = policy(mu=1e9)
    at_least = UrlRecord(1, "http://a.test/", own_max_interval_seconds=30.0)
    schedule = next_fetch(at_least, fetched(now), starved)
    assert schedule.next_fetch_at == pytest.approx(now + 30.0)
    assert schedule.fetch_rate_per_day == pytest.approx(SECONDS_PER_DAY / 30.0)
    # μ = 0: every fetch is free, the optimum fetches at the shortest interval.
    free = policy(mu=0.0)
    at_most = UrlRecord(2, "http://a.test/b", own_min_interval_seconds=600.0)
    assert next_fetch(at_most, fetched(now), free).next_fetch_at == pytest.approx(now + 600.0)
    unbound = UrlRecord(3, "http://a.test/c")
    assert next_fetch(unbound, fetched(now), free).next_fetch_at == pytest.approx(now + 60.0)


def test_the_worker_pushes_the_next_fetch_into_the_window() -> None:
    monday_evening = utc("2026-11-23 17:59")
    record = UrlRecord(1, "http://a.test/", own_max_interval_seconds=300.0,
                       fetch_windows="Mon-Fri 08:00-18:00")
    schedule = next_fetch(record, fetched(monday_evening), policy(mu=1e9))
    assert schedule.next_fetch_at == utc("2026-11-24 08:00")


def test_own_bound_wins_where_it_crosses_the_crawler_setting() -> None:
    assert interval_bounds(None, 30.0, 60.0, 86400.0) == (30.0, 30.0)
    assert interval_bounds(2 * 86400.0, None, 60.0, 86400.0) == (2 * 86400.0, 2 * 86400.0)
    assert interval_bounds(None, None, 60.0, 86400.0) == (60.0, 86400.0)


def test_the_walk_gives_each_url_the_rate_the_worker_gives_it() -> None:
    """replan.planned_rates with per-URL bounds is next_fetch's rate, URL by URL."""
    pol = policy(mu=0.05)
    records = [
        UrlRecord(1, "http://a.test/1", change_rate_per_day=0.01),
        UrlRecord(2, "http://a.test/2", change_rate_per_day=0.01, own_max_interval_seconds=30.0),
        UrlRecord(3, "http://a.test/3", change_rate_per_day=50.0, own_min_interval_seconds=3600.0),
        UrlRecord(4, "http://a.test/4", change_rate_per_day=2.0, own_min_interval_seconds=120.0,
                  own_max_interval_seconds=7200.0),
    ]
    now = 2_000_000.0
    worker = [next_fetch(r, fetched(now), pol) for r in records]
    change = np.array([w.change_rate_per_day for w in worker])
    own_min = np.array([np.nan if r.own_min_interval_seconds is None
                        else r.own_min_interval_seconds for r in records])
    own_max = np.array([np.nan if r.own_max_interval_seconds is None
                        else r.own_max_interval_seconds for r in records])
    walk = planned_rates(change, np.ones(4), pol, own_min, own_max)
    np.testing.assert_allclose(walk, [w.fetch_rate_per_day for w in worker], rtol=1e-9)
    for record, schedule in zip(records, worker, strict=True):
        interval = schedule.next_fetch_at - now
        if record.own_max_interval_seconds is not None:
            assert interval <= record.own_max_interval_seconds + 1e-6
        if record.own_min_interval_seconds is not None:
            assert interval >= record.own_min_interval_seconds - 1e-6


def test_the_solve_spends_the_rest_of_the_budget_optimally() -> None:
    """A URL forced to a high rate takes its share first; the others share the rest with one
    μ, exactly as if the forced URL were not there and the budget were smaller."""
    rng = np.random.default_rng(3)
    change = rng.gamma(0.8, 1.0, 200)
    budget = 150.0
    pol = policy()
    own_max = np.full(200, np.nan)
    own_max[0] = SECONDS_PER_DAY / 40.0  # at least 40 fetches a day
    own_min = np.full(200, np.nan)
    own_min[1] = SECONDS_PER_DAY / 0.5  # at most one fetch every two days
    shortest, longest = interval_bounds_days(pol, 200, own_min, own_max)
    bounded = solve_mu(change, 1.0, budget, min_interval_days=shortest, max_interval_days=longest)
    assert bounded.total_per_day == pytest.approx(budget, rel=1e-5)
    assert bounded.rates_per_day[0] >= 40.0 - 1e-9
    assert bounded.rates_per_day[1] <= 0.5 + 1e-9
    rest = solve_mu(change[2:], 1.0, budget - bounded.rates_per_day[:2].sum(),
                    min_interval_days=shortest[2:], max_interval_days=longest[2:])
    assert rest.mu == pytest.approx(bounded.mu, rel=1e-4)
    np.testing.assert_allclose(rest.rates_per_day, bounded.rates_per_day[2:], rtol=1e-3)


def test_which_bound_binds() -> None:
    assert binding_bound(1.0, None, 30.0) == "at-least-every"  # optimum: daily
    assert binding_bound(86400.0, 600.0, None) == "at-most-every"  # optimum: every second
    assert binding_bound(24.0, 600.0, 86400.0) == "none"  # optimum: hourly
