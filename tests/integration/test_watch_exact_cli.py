"""``crawler watch --exact / --no-exact / --pattern`` (issue 35): where the rule is stored, what
the command answers, and the one-line refusals."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
import pytest

pytestmark = pytest.mark.timeout(120)


def crawler(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def ok(db_url: str, *args: str) -> str:
    done = crawler(db_url, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


async def exact_urls(db_url: str) -> list[str]:
    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch("SELECT url FROM urls WHERE watch_exact ORDER BY url")
    finally:
        await conn.close()
    return [r["url"] for r in rows]


async def test_exact_on_a_url_a_pattern_and_back(db_url: str) -> None:
    shop = [f"http://shop.test/item/{i}" for i in range(3)]
    ok(db_url, "seed", *shop, "http://blog.test/post")
    assert ok(db_url, "watch", shop[0]).strip() == (
        f"{shop[0]}: whole page; changes: simhash distance of at least the threshold")
    assert ok(db_url, "watch", "--exact", shop[0]).strip() == (
        f"{shop[0]}: whole page; changes: any change of the text (exact, the URL's own)")
    assert await exact_urls(db_url) == [shop[0]]
    out = ok(db_url, "watch", "--pattern", r"^http://shop\.test/item/[12]$", "--exact",
             "--watch", "#price")
    assert out.strip() == (r"2 URLs matching '^http://shop\.test/item/[12]$': changes: any "
                           "change of the text (exact); region watch #price")
    assert await exact_urls(db_url) == shop
    assert "watch #price (the URL's own)" in ok(db_url, "watch", shop[2])
    ok(db_url, "watch", "--pattern", "shop", "--no-exact")
    assert await exact_urls(db_url) == []
    # The region set by pattern stays, the rule went.
    assert "watch #price (the URL's own); changes: simhash" in ok(db_url, "watch", shop[1])


async def test_a_window_watched_exactly_and_the_refusals(db_url: str) -> None:
    root = "http://site.test/"
    ok(db_url, "seed", "--window", "5", root)
    assert ok(db_url, "watch", "--window", "--exact", root).strip() == (
        f"window of {root}: whole page; changes: any change of the text (exact)")
    assert "(exact, its window's)" in ok(db_url, "watch", root)
    for args, message in (
        (("--pattern", "([", "--exact"), "is not a regular expression"),
        (("--pattern", "x"), "give what to set"),
        (("--pattern", "x", "--window", "--exact"), "give one"),
    ):
        done = crawler(db_url, "watch", *args)
        assert done.returncode == 2, (args, done.stderr)
        assert len(done.stderr.strip().splitlines()) == 1 and message in done.stderr, done.stderr
