"""``crawler explain URL`` (issue 38), through the CLI on real PostgreSQL, after the daemon's
worker and sitemap reader crawled a loopback web (tests/hintsite.py): on a page whose sitemap
dates are trusted, one whose dates are ignored, and one with no hints, the reasons it prints
agree with the urls row the daemon wrote (the next fetch it expects is the stored one), and
so does its account of a trusted page made due by an announced change."""

from __future__ import annotations

import asyncio
import datetime as dt
import json
from typing import Any

import pytest
from hintsite import Crawl
from test_cli_errors import crawler
from test_hint_trust import learn

pytestmark = pytest.mark.timeout(300)


def explained(db_url: str, url: str) -> dict[str, Any]:
    done = crawler("explain", url, "--json", db_url=db_url)
    assert done.returncode == 0, done.stderr
    shown: dict[str, Any] = json.loads(done.stdout)
    text = crawler("explain", url, db_url=db_url)
    assert text.returncode == 0, text.stderr
    assert shown["schedule"]["reason"][:40] in text.stdout.replace("\n", " ")
    return shown


def stored(row: Any) -> str:
    value: dt.datetime = row["next_fetch_at"]
    return value.isoformat()


async def scenario(db_url: str) -> None:
    async with Crawl(db_url) as crawl:
        await learn(crawl)
        await crawl.fetch_all()
        site = crawl.site

        trusted_url = site.url("truthful", 0)
        trusted = await asyncio.to_thread(explained, db_url, trusted_url)
        row = (await crawl.rows("truthful"))[trusted_url]
        assert trusted["schedule"]["kind"] == "waiting for announcements", trusted["schedule"]
        assert trusted["schedule"]["agrees"] is True, trusted["schedule"]
        assert trusted["next_fetch_at"] == stored(row)
        expected = dt.datetime.fromisoformat(trusted["schedule"]["expected_next_fetch_at"])
        assert abs((expected - row["next_fetch_at"]).total_seconds()) < 0.001
        assert trusted["schedule"]["binding"] == "the longest interval"
        [lastmod] = trusted["sources"]
        trust = await crawl.trust("truthful")
        assert trust is not None
        assert lastmod["classification"] == "complete" == trust["classification"]
        assert (lastmod["hits"], lastmod["false_alarms"], lastmod["misses"], lastmod["quiet"]) \
            == (trust["hits"], trust["false_alarms"], trust["misses"], trust["quiet"])
        assert lastmod["recall"] == pytest.approx(trust["recall_mean"])
        assert trusted["rate"]["evidence"]["fetches"] == row["fetch_count"]
        assert trusted["rate"]["change_rate_per_day"] == pytest.approx(row["change_rate_per_day"])
        assert trusted["plan"] is None  # no planner ran: the worker's uniform hour

        untrusted_url = site.url("now", 0)
        untrusted = await asyncio.to_thread(explained, db_url, untrusted_url)
        row = (await crawl.rows("now"))[untrusted_url]
        assert untrusted["schedule"]["kind"] == "own schedule"
        assert "not trusted" in untrusted["schedule"]["reason"]
        assert untrusted["schedule"]["agrees"] is True, untrusted["schedule"]
        assert untrusted["next_fetch_at"] == stored(row)
        [now] = untrusted["sources"]
        assert now["classification"] == "ignored"
        assert "moment they were read" in now["reason"]

        unhinted_url = site.url("plain", 0)
        unhinted = await asyncio.to_thread(explained, db_url, unhinted_url)
        row = (await crawl.rows("plain"))[unhinted_url]
        assert unhinted["sources"] == [] and unhinted["hints"] == []
        assert unhinted["schedule"]["kind"] == "own schedule"
        assert "no hints" in unhinted["schedule"]["reason"]
        assert unhinted["schedule"]["agrees"] is True, unhinted["schedule"]
        assert unhinted["next_fetch_at"] == stored(row)
        assert unhinted["fetch_rate_per_day"] == pytest.approx(24.0)

        # An announced change: the trusted page's account says why it is due now.
        site.change(("truthful",), [1])
        await crawl.read_sitemaps()
        announced_url = site.url("truthful", 1)
        announced = await asyncio.to_thread(explained, db_url, announced_url)
        row = (await crawl.rows("truthful"))[announced_url]
        assert announced["schedule"]["kind"] == "announced", announced["schedule"]
        assert announced["schedule"]["agrees"] is True
        assert announced["next_fetch_at"] == stored(row)
        assert announced["due_in_seconds"] <= 0.0
        assert announced["sources"][0]["announced_since_last_fetch"] is True


def test_explain_agrees_with_the_schedule_the_daemon_wrote(db_url: str) -> None:
    asyncio.run(scenario(db_url))
