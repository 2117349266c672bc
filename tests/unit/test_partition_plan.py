"""Which monthly partitions should exist and which are past the retention (crawler.core)."""

from __future__ import annotations

import datetime as dt

from crawler.core.partitions import (
    Bounds,
    Month,
    months_ahead,
    retention_cutoff,
    to_create,
    to_drop,
)
from crawler.db.partitions import is_partition, parse_bound


def at(year: int, month: int, day: int = 1, hour: int = 0) -> float:
    return dt.datetime(year, month, day, hour, tzinfo=dt.UTC).timestamp()


def month_bounds(table: str, *months: Month) -> list[Bounds]:
    return [Bounds(m.partition(table), m.start, m.end) for m in months]


def test_months_ahead_cross_the_year() -> None:
    assert months_ahead(at(2024, 11, 30, 23), 2) == [
        Month(2024, 11), Month(2024, 12), Month(2025, 1)
    ]
    assert Month(2024, 12).end == dt.datetime(2025, 1, 1, tzinfo=dt.UTC)
    assert Month(2025, 1).plus(-1) == Month(2024, 12)
    assert Month(2024, 3).partition("observations") == "observations_p202403"


def test_month_is_taken_in_utc() -> None:
    # 23:30 on Jan 31st in UTC-5 is already February in UTC.
    moment = dt.datetime(2024, 1, 31, 23, 30, tzinfo=dt.timezone(dt.timedelta(hours=-5)))
    assert Month.of(moment.timestamp()) == Month(2024, 2)


def test_only_missing_months_are_created() -> None:
    existing = [
        *month_bounds("observations", Month(2024, 5), Month(2024, 6)),
        Bounds("observations_default", None, None, default=True),
    ]
    assert to_create(at(2024, 6, 15), 2, existing) == [Month(2024, 7), Month(2024, 8)]
    assert to_create(at(2024, 6, 15), 2, []) == [Month(2024, 6), Month(2024, 7), Month(2024, 8)]
    # A partition of another shape covering the range (a quarter) is respected, not overlapped.
    quarter = Bounds("observations_q3", Month(2024, 7).start, Month(2024, 10).start)
    assert to_create(at(2024, 6, 15), 4, [quarter]) == [Month(2024, 6), Month(2024, 10)]
    unbounded = Bounds("observations_future", Month(2024, 8).start, None)
    assert to_create(at(2024, 6, 15), 3, [unbounded]) == [Month(2024, 6), Month(2024, 7)]


def test_only_partitions_entirely_past_the_retention_are_dropped() -> None:
    existing = [
        *month_bounds("observations", *(Month(2024, m) for m in range(1, 9))),
        Bounds("observations_default", None, None, default=True),
        Bounds("observations_old", None, Month(2023, 1).start),  # FROM (MINVALUE): kept
    ]
    now = at(2024, 7, 15)
    # Cutoff: 60 days before July 15th is May 16th. April ends before it; May does not.
    assert retention_cutoff(now, 60) == dt.datetime(2024, 5, 16, tzinfo=dt.UTC)
    assert to_drop(now, 60, existing) == [
        "observations_old", "observations_p202401", "observations_p202402",
        "observations_p202403", "observations_p202404",
    ]
    assert to_drop(now, 0, existing) == []  # 0: keep forever
    assert retention_cutoff(now, 0) is None
    # A month whose last moment is exactly at the cutoff is dropped; one after it is not.
    assert to_drop(at(2024, 5, 31), 30, existing)[-1] == "observations_p202404"
    assert "observations_p202405" not in to_drop(at(2024, 6, 30, 23), 30, existing)


def test_partition_bounds_and_names_are_read_back() -> None:
    bound = parse_bound(
        "observations_p202405",
        "FOR VALUES FROM ('2024-05-01 00:00:00+00') TO ('2024-06-01 00:00:00+00')",
    )
    assert bound == Bounds("observations_p202405", Month(2024, 5).start, Month(2024, 5).end)
    assert parse_bound("x_default", "DEFAULT") == Bounds("x_default", None, None, default=True)
    assert parse_bound("x", "FOR VALUES FROM (MINVALUE) TO ('2024-01-01 00:00:00+00')") == (
        Bounds("x", None, Month(2024, 1).start)
    )
    assert parse_bound("x", "FOR VALUES IN (1)") is None
    assert is_partition("observations_p202405") and is_partition("change_events_default")
    assert not is_partition("observations") and not is_partition("urls_p202405")
