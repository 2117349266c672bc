"""`crawler recheck` as an operator runs it: the URLs named (or of a host, or of a file) are
due now and their host with them; nothing else moves; one line says what was done."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

pytestmark = pytest.mark.timeout(120)

A = "http://a.example"
B = "http://b.example"


def crawler(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=60)


async def due(db_url: str) -> dict[str, bool]:
    conn = await asyncpg.connect(db_url)
    try:
        return {r["url"]: r["due"] for r in await conn.fetch(
            "SELECT url, next_fetch_at <= now() AS due FROM urls")}
    finally:
        await conn.close()


async def hosts_due(db_url: str) -> dict[str, bool]:
    conn = await asyncpg.connect(db_url)
    try:
        return {r["origin"]: r["due"] for r in await conn.fetch(
            "SELECT origin, next_due_at <= now() AS due FROM hosts")}
    finally:
        await conn.close()


async def schedule_far(db_url: str, parked: str | None = None) -> None:
    """Every URL a day away (``parked`` outside a page window), every host with them."""
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute("UPDATE urls SET next_fetch_at = CASE WHEN url = $1 "
                           "THEN 'infinity' ELSE now() + interval '1 day' END", parked)
        await conn.execute("UPDATE hosts SET next_due_at = now() + interval '1 day'")
    finally:
        await conn.close()


@pytest.mark.breaks_invariant(
    "hosts_due", reason="schedule_far moves URLs and hosts a day away by hand, in two statements "
    "whose now() differ")
async def test_recheck_urls_makes_them_due_and_counts_the_unknown(db_url: str) -> None:
    assert crawler(db_url, "seed", f"{A}/1", f"{A}/2", f"{B}/1").returncode == 0
    await schedule_far(db_url)
    done = crawler(db_url, "recheck", f"{A}/1", f"{A}/1", "http://A.example:80/2",
                   f"{B}/unknown")
    assert done.returncode == 1, done.stderr  # an unknown URL: partly done
    assert done.stdout.splitlines() == [
        "made 2 URLs due now (1 unknown); each is fetched once its host's politeness "
        "delay allows"
    ]
    assert f"unknown URL (not seeded): {B}/unknown" in done.stderr
    assert await due(db_url) == {f"{A}/1": True, f"{A}/2": True, f"{B}/1": False}
    assert await hosts_due(db_url) == {A: True, B: False}


@pytest.mark.breaks_invariant(
    "urls_scheduled", "hosts_due", reason="schedule_far parks a URL at infinity by hand with no "
    "page window, and moves URLs and hosts in two statements whose now() differ")
async def test_recheck_a_host_leaves_its_parked_window_pages(db_url: str) -> None:
    assert crawler(db_url, "seed", f"{A}/1", f"{A}/2", f"{A}/3", f"{B}/1").returncode == 0
    await schedule_far(db_url, parked=f"{A}/3")
    done = crawler(db_url, "recheck", "--host", "a.example")
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("made 2 URLs due now (0 unknown, 1 left to their page "
                                  "window)")
    assert await due(db_url) == {f"{A}/1": True, f"{A}/2": True, f"{A}/3": False,
                                 f"{B}/1": False}
    assert await hosts_due(db_url) == {A: True, B: False}
    await schedule_far(db_url, parked=f"{A}/3")
    both = crawler(db_url, "recheck", "--host", A, f"{A}/1", f"{B}/1")  # each counted once
    assert both.stdout.startswith("made 3 URLs due now (0 unknown, 1 left to their page "), \
        both.stdout
    unknown = crawler(db_url, "recheck", "--host", "https://nowhere.example")
    assert unknown.returncode == 2 and "unknown host https://nowhere.example" in unknown.stderr


@pytest.mark.breaks_invariant(
    "hosts_due", reason="schedule_far moves URLs and hosts a day away by hand, in two statements "
    "whose now() differ")
async def test_recheck_a_file(db_url: str, tmp_path: Path) -> None:
    assert crawler(db_url, "seed", f"{A}/1", f"{B}/1").returncode == 0
    await schedule_far(db_url)
    listing = tmp_path / "urls.txt"
    listing.write_text(f"# rechecked\n{B}/1\n\n")
    done = crawler(db_url, "recheck", "--file", str(listing))
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("made 1 URL due now (0 unknown)")
    assert await due(db_url) == {f"{A}/1": False, f"{B}/1": True}
    listing.write_text("not a url at all\n")
    bad = crawler(db_url, "recheck", "--file", str(listing))
    assert bad.returncode == 2 and f"{listing}:1: malformed URL" in bad.stderr
    nothing = crawler(db_url, "recheck")
    assert nothing.returncode == 2 and "recheck needs URLs" in nothing.stderr
