"""Rules for URLs that arrive later (issue 35, migration 0032_rules_for_new_urls).

``crawler bound --pattern/--host`` and ``crawler watch --pattern`` hold for URLs seeded (one
by one and in bulk), discovered by a link or found later, not only for those known when the
command ran; of the rules matching a URL, the one set last holds; a removed rule stops
applying; and with no rule the new-URL trigger is disabled, so seeding is what it was.
Through the CLI on a real PostgreSQL.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest

from crawler.core.url_bounds import next_allowed, parse_windows
from crawler.db import windows
from crawler.db.queries import QUERIES

pytestmark = pytest.mark.timeout(180)

SHOP = r"^http://shop\.test/item/"


def crawler(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def ok(db_url: str, *args: str) -> str:
    done = crawler(db_url, *args)
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return done.stdout


async def rows(db_url: str) -> dict[str, asyncpg.Record]:
    conn = await asyncpg.connect(db_url)
    try:
        found = await conn.fetch(
            "SELECT url, own_min_interval_seconds AS min, own_max_interval_seconds AS max, "
            "fetch_windows, watch_exact, watch_css, ignore_css, next_fetch_at, created_at, "
            "next_fetch_at = 'infinity' AS parked FROM urls")
    finally:
        await conn.close()
    return {r["url"]: r for r in found}


async def trigger_state(db_url: str) -> str:
    """The new-URL triggers' states (pg_trigger.tgenabled), schedule rules' then watch rules':
    'A' enabled always, 'D' disabled."""
    conn = await asyncpg.connect(db_url)
    try:
        return "".join([r["tgenabled"] for r in await conn.fetch(
            "SELECT tgenabled::text FROM pg_trigger WHERE tgrelid = 'urls'::regclass AND tgname "
            "IN ('crawler_schedule_rules_for_new_urls', 'crawler_watch_rules_for_new_urls') "
            "ORDER BY tgname")])
    finally:
        await conn.close()


def bounds(row: asyncpg.Record) -> tuple[float | None, float | None, str | None]:
    return row["min"], row["max"], row["fetch_windows"]


async def test_a_pattern_bound_set_before_seeding_holds_for_the_seeded_urls(
    db_url: str, tmp_path: Path,
) -> None:
    assert await trigger_state(db_url) == "DD"  # no rule yet: nothing for seeding to run
    out = ok(db_url, "bound", "--pattern", SHOP, "--at-least-every", "1h",
             "--at-most-every", "10m")
    assert out.strip() == f"0 URLs of pattern '{SHOP}': at least every 1h, at most every 10m"
    # ENABLE ALWAYS: it fires under session_replication_role = replica too (bulk seeding).
    assert await trigger_state(db_url) == "AD"
    # One by one (insert_urls) and in bulk (seed --file: COPY, seed_urls_from_staging, with
    # the foreign keys' triggers skipped).
    ok(db_url, "seed", "http://shop.test/item/1", "http://shop.test/about")
    bulk = [f"http://shop.test/item/b{i}" for i in range(150)]
    bulk += [f"http://other.test/item/{i}" for i in range(150)]
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("\n".join(bulk) + "\n")
    assert "seeded 300 new URLs" in ok(db_url, "seed", "--file", str(seeds))
    found = await rows(db_url)
    ruled = {u for u in found if u.startswith("http://shop.test/item/")}
    assert len(ruled) == 151
    for url, row in found.items():
        assert bounds(row) == ((600.0, 3600.0, None) if url in ruled else (None, None, None)), url
        # Due when seeded: the bounds cut nothing (a new URL's wait is under the longest).
        assert row["next_fetch_at"] <= row["created_at"], url
    shown = ok(db_url, "show", "http://shop.test/item/1")
    assert "at least every 1h, at most every 10m" in shown, shown
    assert "schedule_bounds" not in ok(db_url, "show", "http://shop.test/about")


async def test_a_host_bound_holds_for_a_url_discovered_later_by_a_link(db_url: str) -> None:
    root = "http://site.test/"
    ok(db_url, "seed", "--window", "10", root)
    out = ok(db_url, "bound", "--host", "http://site.test", "--at-least-every", "2h")
    assert out.strip() == "1 URLs of host 'http://site.test': at least every 2h"
    conn = await asyncpg.connect(db_url)
    try:
        page = await conn.fetchrow("SELECT id, host_id, site_id FROM urls WHERE url = $1", root)
        # What the worker does with a fetched window page's links.
        await windows.replace_out_links(conn, page["id"], page["site_id"], page["host_id"],
                                        ["http://site.test/new", "http://site.test/other"])
    finally:
        await conn.close()
    found = await rows(db_url)
    for url in ("http://site.test/new", "http://site.test/other"):
        assert bounds(found[url]) == (None, 7200.0, None), url
        # A discovered page waits for its window to take it in, rule or not.
        assert found[url]["parked"], found[url]["next_fetch_at"]
    assert "at least every 2h" in ok(db_url, "show", "http://site.test/new")


async def test_watch_pattern_exact_holds_for_a_url_seeded_later(db_url: str) -> None:
    ok(db_url, "seed", "http://shop.test/item/1")
    out = ok(db_url, "watch", "--pattern", SHOP, "--exact", "--watch", "#price")
    assert await trigger_state(db_url) == "DA"
    assert out.startswith(f"1 URLs matching '{SHOP}'"), out
    ok(db_url, "seed", "http://shop.test/item/2", "http://shop.test/about")
    found = await rows(db_url)
    for url in ("http://shop.test/item/1", "http://shop.test/item/2"):
        assert (found[url]["watch_exact"], found[url]["watch_css"]) == (True, "#price"), url
    about = found["http://shop.test/about"]
    assert (about["watch_exact"], about["watch_css"], about["ignore_css"]) == (False, None, None)
    shown = ok(db_url, "watch", "http://shop.test/item/2")
    assert "watch #price (the URL's own)" in shown and "(exact, the URL's own)" in shown, shown
    # A later command on another pattern changes one part; per part, the last set wins.
    ok(db_url, "watch", "--pattern", r"/item/[3-9]", "--ignore", ".ad")
    ok(db_url, "watch", "--pattern", r"/item/4", "--no-exact")
    ok(db_url, "seed", "http://shop.test/item/3", "http://shop.test/item/4")
    found = await rows(db_url)
    assert [(found[f"http://shop.test/item/{i}"]["watch_exact"],
             found[f"http://shop.test/item/{i}"]["watch_css"],
             found[f"http://shop.test/item/{i}"]["ignore_css"]) for i in (3, 4)] == [
        (True, "#price", ".ad"), (False, "#price", ".ad")]


async def test_clearing_a_rule_stops_it_applying_to_new_urls(db_url: str) -> None:
    ok(db_url, "bound", "--pattern", SHOP, "--at-least-every", "1h")
    ok(db_url, "watch", "--pattern", SHOP, "--exact", "--watch", "#price")
    ok(db_url, "seed", "http://shop.test/item/1")
    assert "0 URLs" not in ok(db_url, "bound", "--pattern", SHOP, "--clear")
    ok(db_url, "watch", "--pattern", SHOP, "--no-exact", "--clear")
    # Nothing left: the rules are gone and the trigger off.
    assert ok(db_url, "bound", "--list").strip() == "no schedule rules"
    assert await trigger_state(db_url) == "DD"
    ok(db_url, "seed", "http://shop.test/item/2")
    found = await rows(db_url)
    for url in ("http://shop.test/item/1", "http://shop.test/item/2"):
        row = found[url]
        assert bounds(row) == (None, None, None), url
        assert (row["watch_exact"], row["watch_css"]) == (False, None), url


async def test_the_rule_set_last_holds_and_a_cleared_one_gives_way(db_url: str) -> None:
    """Host, then pattern: the pattern's, as on a URL known when both ran. The host's set
    again: the host's. The host's cleared: the pattern's again, for known and new URLs."""
    ok(db_url, "seed", "http://shop.test/item/1")
    ok(db_url, "bound", "--host", "http://shop.test", "--at-least-every", "1d")
    ok(db_url, "bound", "--pattern", SHOP, "--at-least-every", "1h")
    ok(db_url, "seed", "http://shop.test/item/2", "http://shop.test/about")
    found = await rows(db_url)
    assert [found[f"http://shop.test/{p}"]["max"] for p in ("item/1", "item/2", "about")] == [
        3600.0, 3600.0, 86400.0]
    ok(db_url, "bound", "--host", "http://shop.test", "--at-least-every", "12h")
    ok(db_url, "seed", "http://shop.test/item/3")
    found = await rows(db_url)
    assert {found[f"http://shop.test/item/{i}"]["max"] for i in (1, 2, 3)} == {43200.0}
    out = ok(db_url, "bound", "--host", "http://shop.test", "--clear")
    assert out.strip() == ("4 URLs of host 'http://shop.test': no bounds (3 of them under "
                           "another rule that matches them)")
    ok(db_url, "seed", "http://shop.test/item/4", "http://shop.test/contact")
    found = await rows(db_url)
    assert {found[f"http://shop.test/item/{i}"]["max"] for i in (1, 2, 3, 4)} == {3600.0}
    assert found["http://shop.test/about"]["max"] is None
    assert found["http://shop.test/contact"]["max"] is None
    # A URL's own rule, cleared, gives way to the pattern's too.
    ok(db_url, "bound", "http://shop.test/item/1", "--at-most-every", "5m")
    out = ok(db_url, "bound", "http://shop.test/item/1", "--clear")
    assert out.strip() == ("http://shop.test/item/1: rule removed; another rule matches it: "
                           "at least every 1h")


async def test_a_window_rule_makes_a_new_url_due_in_its_window(db_url: str) -> None:
    start = dt.datetime.now(dt.UTC) + dt.timedelta(hours=2)
    window = f"{start:%H:%M}-{start + dt.timedelta(hours=1):%H:%M}"  # not open now
    ok(db_url, "bound", "--pattern", SHOP, "--window", window, "--at-least-every", "30m")
    before = time.time()
    ok(db_url, "seed", "http://shop.test/item/1", "http://shop.test/about")
    found = await rows(db_url)
    row = found["http://shop.test/item/1"]
    assert bounds(row) == (None, 1800.0, window)
    expected = next_allowed(parse_windows(window), before)
    assert expected > before + 3600  # the window's start, more than an hour from now
    assert row["next_fetch_at"].timestamp() == pytest.approx(expected, abs=1e-3)
    assert found["http://shop.test/about"]["next_fetch_at"].timestamp() < expected
    assert f"only in {window} (UTC)" in ok(db_url, "show", "http://shop.test/item/1")


async def test_urls_seeded_with_no_rules_are_unchanged(db_url: str, tmp_path: Path) -> None:
    # A rule stored and removed leaves nothing behind either.
    ok(db_url, "bound", "--host", "http://shop.test", "--at-least-every", "1h")
    ok(db_url, "bound", "--host", "http://shop.test", "--clear")
    assert await trigger_state(db_url) == "DD"
    before = dt.datetime.now(dt.UTC)
    seeds = tmp_path / "seeds.txt"
    seeds.write_text("".join(f"http://shop.test/item/{i}\n" for i in range(200)))
    ok(db_url, "seed", "--file", str(seeds))
    ok(db_url, "seed", "http://shop.test/one")
    after = dt.datetime.now(dt.UTC)
    found = await rows(db_url)
    assert len(found) == 201
    for url, row in found.items():
        assert bounds(row) == (None, None, None), url
        assert (row["watch_exact"], row["watch_css"], row["ignore_css"]) == (False, None, None)
        assert before - dt.timedelta(seconds=1) <= row["next_fetch_at"] <= after, url


async def test_sql_next_allowed_agrees_with_python(db_url: str) -> None:
    """crawler_next_allowed (the trigger's) against url_bounds.next_allowed (the worker's)."""
    from crawler.commands.bound import window_spans

    rng = random.Random(35)
    texts = ["Mon-Fri 08:00-18:00", "Sat,Sun 10:00-12:00", "22:00-06:00",
             "Sun 23:00-24:00; Mon 00:00-01:00", "Wed 12:00-12:01", "00:00-24:00"]
    conn = await asyncpg.connect(db_url)
    try:
        for text in texts:
            spans = window_spans(text)
            times = [rng.uniform(1.6e9, 1.9e9) for _ in range(200)]
            times += [1.7e9 - (1.7e9 + 3 * 86400) % 604800 + b for b in (spans or [])]
            got = await conn.fetch(
                "SELECT crawler_next_allowed($1::float8[], to_timestamp(t)) AS at "
                "FROM unnest($2::float8[]) WITH ORDINALITY AS u(t, n) ORDER BY n", spans, times)
            for at, row in zip(times, got, strict=True):
                expected = next_allowed(parse_windows(text), at)
                assert row["at"].timestamp() == pytest.approx(expected, abs=2e-6), (text, at)
        assert await conn.fetchval(
            "SELECT crawler_next_allowed('{}', 'infinity') = 'infinity'")
        assert await conn.fetchval("SELECT crawler_next_allowed(ARRAY[0, 60]::float8[], "
                                   "'infinity') = 'infinity'")
    finally:
        await conn.close()


async def trigger_condition(db_url: str) -> str | None:
    """The schedule rules trigger's WHEN, None without."""
    conn = await asyncpg.connect(db_url)
    try:
        definition = str(await conn.fetchval(
            "SELECT pg_get_triggerdef(oid) FROM pg_trigger WHERE tgrelid = 'urls'::regclass "
            "AND tgname = 'crawler_schedule_rules_for_new_urls'"))
    finally:
        await conn.close()
    return definition.split(" WHEN ", 1)[1] if " WHEN " in definition else None


async def test_the_trigger_fires_only_for_the_hosts_its_rules_can_match(db_url: str) -> None:
    from crawler.core.hostid import host_id

    ok(db_url, "bound", "--host", "http://shop.test", "--at-least-every", "1h")
    ok(db_url, "bound", "--pattern", r"^http://blog\.test/news/", "--at-least-every", "2h")
    condition = await trigger_condition(db_url)
    assert condition is not None
    assert str(host_id("http://shop.test")) in condition
    assert str(host_id("http://blog.test")) in condition
    # A pattern that may match any host: every new URL is looked at.
    ok(db_url, "bound", "--pattern", r"\.pdf$", "--at-least-every", "3h")
    assert await trigger_condition(db_url) is None
    ok(db_url, "seed", "http://shop.test/a", "http://blog.test/news/1", "http://other.test/b.pdf",
       "http://other.test/c")
    found = await rows(db_url)
    assert [found[u]["max"] for u in ("http://shop.test/a", "http://blog.test/news/1",
                                      "http://other.test/b.pdf", "http://other.test/c")] == [
        3600.0, 7200.0, 10800.0, None]
    ok(db_url, "bound", "--pattern", r"\.pdf$", "--clear")
    assert str(host_id("http://shop.test")) in (await trigger_condition(db_url) or "")
    ok(db_url, "seed", "http://other.test/d.pdf", "http://shop.test/e.pdf")
    found = await rows(db_url)
    assert found["http://other.test/d.pdf"]["max"] is None
    assert found["http://shop.test/e.pdf"]["max"] == 3600.0


PATTERNS = [
    SHOP, r"^http://shop\.test/item/[12]$", r"^https?://shop\.test/", r"^http://shop\.test",
    r"^http://shop\.test/(a|b)/", r"^http://shop\.test/a|^http://blog\.test/",
    r"^http://shop\.test/x*y", r"^http://shop\.test/\d+", r"^http://shop\.test/it[e]m/",
    r"^http://(shop|blog)\.test/", r"^http://shop\.test/[]|]", r"item/\d$", r"\.pdf$",
    r"^http://shop\.test/item/1?$", r"^http://shop\.test/item/1{2}", r"^http://shop\.test\/",
    r"^http://shop\.test:8080/", r"^http://blog\.test/item/",
]


async def test_a_rule_is_passed_over_only_where_its_pattern_cannot_match(db_url: str) -> None:
    """The generated prefix and host key never pass over a URL the pattern matches."""
    urls = [f"{origin}/{path}" for origin in (
        "http://shop.test", "https://shop.test", "http://blog.test", "http://shop.test:8080",
        "http://shop.testx") for path in (
        "", "item/1", "item/2", "item/11", "item/x", "a/", "b/c", "xy", "xxxy", "y", "123",
        "|", "]", "doc.pdf", "it%5Bem/")]
    conn = await asyncpg.connect(db_url)
    try:
        for pattern in PATTERNS:  # as crawler watch --pattern P --exact stores it
            await conn.fetch(QUERIES["store_watch_rule"], pattern, ["exact"], ["true"])
        rows = await conn.fetch(
            "SELECT w.pattern, w.prefix, u.url, u.url ~ w.pattern AS matches, "
            "crawler_pattern_matches(w.pattern, w.prefix, w.match_host_id, u.url, "
            "crawler_url_host_id(u.url)) AS passed "
            "FROM watch_rules AS w, unnest($1::text[]) AS u(url)", urls)
        assert len(rows) == len(PATTERNS) * len(urls)
        wrong = [(r["pattern"], r["prefix"], r["url"]) for r in rows
                 if r["matches"] != r["passed"]]
        assert wrong == []
        # The prefix is there where it helps.
        prefixes = {r["pattern"]: r["prefix"] for r in rows}
        assert prefixes[SHOP] == "http://shop.test/item/"
        assert prefixes[r"^http://shop\.test/x*y"] == "http://shop.test/"
        assert prefixes[r"\.pdf$"] is None
        assert prefixes[r"^http://shop\.test/a|^http://blog\.test/"] is None
    finally:
        await conn.close()


def test_a_bad_pattern_is_refused_before_it_is_stored(db_url: str) -> None:
    # Python's re takes it, PostgreSQL's ~ does not: refused before the rule is stored, so
    # that no insert ever runs it.
    for command in (("bound", "--pattern", "(?P<n>x)", "--at-least-every", "1h"),
                    ("watch", "--pattern", "(?P<n>x)", "--exact")):
        done = crawler(db_url, *command)
        assert done.returncode == 2, (command, done.stdout, done.stderr)
        assert "--pattern '(?P<n>x)': invalid regular expression" in done.stderr, done.stderr
    assert ok(db_url, "bound", "--list").strip() == "no schedule rules"
