"""Every TIME option takes the same forms: ISO 8601, POSIX seconds, or a duration back from now.

QA: ``crawler changes --since 1h`` was refused while ``export --since 1h`` was accepted; now
``changes --since``, ``get --at``, ``diff --from/--to`` and ``export --since`` share one parser
(crawler.commands.options.parse_time).
"""

from __future__ import annotations

import argparse
import asyncio
import datetime as dt
import json
import time

import asyncpg
import pytest
from test_cli_errors import REFUSED, assert_one_line, crawler

from crawler.commands.options import parse_time
from crawler.db import frontier

pytestmark = pytest.mark.timeout(120)

NOW = dt.datetime(2026, 11, 22, 10, 0, tzinfo=dt.UTC)


@pytest.mark.parametrize("text, expected", [
    ("30m", NOW - dt.timedelta(minutes=30)),
    ("1h", NOW - dt.timedelta(hours=1)),
    ("2d", NOW - dt.timedelta(days=2)),
    ("1w", NOW - dt.timedelta(weeks=1)),
    ("45s", NOW - dt.timedelta(seconds=45)),
    ("1.5h", NOW - dt.timedelta(minutes=90)),
    (" 2 D ", NOW - dt.timedelta(days=2)),
    ("2026-11-22T09:00", dt.datetime(2026, 11, 22, 9, 0, tzinfo=dt.UTC)),
    ("2026-11-22T09:00+01:00", dt.datetime(2026, 11, 22, 8, 0, tzinfo=dt.UTC)),
    ("2026-11-22", dt.datetime(2026, 11, 22, tzinfo=dt.UTC)),
    ("1700000000", dt.datetime.fromtimestamp(1700000000, dt.UTC)),
    ("1700000000.5", dt.datetime.fromtimestamp(1700000000.5, dt.UTC)),
])
def test_a_time_is_iso_posix_seconds_or_a_duration_back(text: str, expected: dt.datetime
                                                        ) -> None:
    assert parse_time(text, NOW) == expected


@pytest.mark.parametrize("text", ["yesterday", "1y", "1 hour ago", "", "h", "inf", "nan",
                                  "1e20", "99999999999d", "-1h"])
def test_anything_else_is_one_usage_error(text: str) -> None:
    with pytest.raises(argparse.ArgumentTypeError, match="30m, 1h, 2d"):
        parse_time(text, NOW)


@pytest.mark.parametrize("args", [
    ("changes", "--since", "1h"), ("get", "http://a.example/", "--at", "2d"),
    ("diff", "http://a.example/", "--from", "1w", "--to", "30m"),
    ("export", "urls", "--since", "1h"),
])
def test_every_time_option_takes_a_duration(args: tuple[str, ...]) -> None:
    # Parsed, then the database (nothing listens) is what fails, not the time.
    assert_one_line(crawler(*args, db_url=REFUSED), "CRAWLER_DATABASE_URL")


@pytest.mark.parametrize("args", [
    ("changes", "--since", "1e20"), ("get", "http://a.example/", "--at", "soon"),
    ("diff", "http://a.example/", "--from", "inf"), ("export", "urls", "--since", "1 hour"),
])
def test_a_bad_time_names_its_option_and_the_forms(args: tuple[str, ...]) -> None:
    result = crawler(*args, db_url=REFUSED)
    assert_one_line(result, args[-2], "ISO 8601", "POSIX seconds", "1h")


async def _events(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        await frontier.seed(conn, [("http://a.example/old", 1.0), ("http://a.example/new", 1.0)],
                            time.time())
        for path, age in (("old", dt.timedelta(hours=3)), ("new", dt.timedelta(minutes=10))):
            await conn.execute(
                "INSERT INTO change_events (url_id, host_id, fetched_at, kind, payload) "
                "SELECT id, host_id, now() - $2::interval, 'changed', $3::jsonb FROM urls "
                "WHERE url = $1",
                f"http://a.example/{path}", age,
                json.dumps({"url": f"http://a.example/{path}", "kind": "changed",
                            "fetched_at": "t", "distance": 9}),
            )
    finally:
        await conn.close()


def test_changes_since_an_hour_lists_only_the_last_hours_events(db_url: str) -> None:
    asyncio.run(_events(db_url))
    recent = crawler("changes", "--since", "1h", "--json", db_url=db_url)
    assert recent.returncode == 0, recent.stderr
    assert [e["url"] for e in json.loads(recent.stdout)["events"]] == ["http://a.example/new"]
    both = crawler("changes", "--since", "1d", "--json", db_url=db_url)
    assert [e["url"] for e in json.loads(both.stdout)["events"]] == [
        "http://a.example/old", "http://a.example/new"]
