"""The collection from the real daemon crawling the demo web.

Every WARC file passes ``warcio check`` and ``warcio index``; every index row reads back its
record; ``crawler get URL --at T`` returns exactly the body the demo served at T (the demo
renders it again from its ground truth); ``crawler diff`` shows a real rewrite and not the
per-request timestamp; a page that never changes is stored once plus revisits; gone and
changed pages produce change events.
"""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from warctools import check_files, check_index_rows

from crawler.db import frontier
from crawler.demo.processes import ScheduledProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb
from crawler.store.index import load_body, version_at, versions
from crawler.store.warc import SUFFIX

pytestmark = pytest.mark.timeout(240)

ROWS = """
SELECT s.*, u.url, o.duration_seconds
FROM stored_records s
JOIN urls u ON u.id = s.url_id
JOIN observations o ON o.url_id = s.url_id AND o.fetched_at = s.fetched_at
ORDER BY s.id
"""


def sites() -> list[SiteSpec]:
    news = PageSpec("/news", real=ScheduledProcess((3.1, 7.3)), cosmetic_per_request=True,
                    seed="news")
    cosmetic = PageSpec("/cosmetic", cosmetic=ScheduledProcess((2.0, 4.0, 6.0)),
                        cosmetic_per_request=True)
    still = PageSpec("/still")
    doomed = PageSpec("/doomed", deleted_at_seconds=4.2)
    return [SiteSpec("a", (news, cosmetic)), SiteSpec("b", (still, doomed))]


async def wait_until_running(proc: asyncio.subprocess.Process) -> None:
    """Until the daemon logs that it runs (its fetch loop starts right after)."""
    assert proc.stdout is not None
    async with asyncio.timeout(90):
        while True:
            line = await proc.stdout.readline()
            assert line, "daemon exited before it started"
            if b"metrics at" in line:
                return


def cli(db_url: str, warc_dir: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    env = daemon_env(db_url, warc_dir=str(warc_dir))
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, timeout=60, check=False)


async def test_collection_from_the_demo_web(db_url: str, tmp_path: Path) -> None:
    warc_dir = tmp_path / "warc"
    env = daemon_env(db_url, schedule="uniform", default_interval="0.6",
                     min_interval="0.5", politeness_delay="0.05", poll_interval="0.1",
                     warc_dir=str(warc_dir), warc_max_bytes="60000")
    # The daemon first (slow to start on a loaded machine), then the web: site time starts
    # when the crawl can begin, so the scheduled changes fall inside it.
    proc = await start_daemon(env)
    pool = await asyncpg.create_pool(db_url)
    await wait_until_running(proc)
    web = DemoWeb(sites())
    await web.start()
    try:
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        await asyncio.sleep(11.0)
        output = await stop_daemon(proc)
        assert proc.returncode == 0, output
        rows = [dict(r) for r in await pool.fetch(ROWS)]
        events = await pool.fetch("SELECT e.kind, e.payload, u.url FROM change_events e "
                                  "JOIN urls u ON u.id = e.url_id ORDER BY e.id")
        content_fetches = await pool.fetchval(
            "SELECT count(*) FROM observations WHERE status IN (200, 304, 404, 410)")
        async with pool.acquire() as conn:
            stored = {url: await versions(conn, url) for url in web.urls(web.start_time)}
        await pool.close()
    finally:
        await web.stop()

    files = sorted(warc_dir.glob("*" + SUFFIX))
    assert len(files) >= 2, "rotated by CRAWLER_WARC_MAX_BYTES"
    assert not list(warc_dir.glob("*.open")), "a stopped daemon closes its file"
    check_files(files)
    check_index_rows(warc_dir, rows)
    # Every fetch that got a response (200, 304, 404) has its record.
    assert len(rows) == content_fetches

    # get --at T: exactly the body the demo served at T, for every fetch.
    checked = 0
    for url, url_versions in stored.items():
        for version in url_versions:
            served = web.body_at(url, version.fetched_at.timestamp() + 1.0e-3 + next(
                r["duration_seconds"] for r in rows if r["id"] == version.id))
            current = version_at(url_versions, version.fetched_at)
            assert current is version
            if version.status == 404:
                assert served is None
                continue
            assert load_body(warc_dir, url_versions, version).payload == served, (url, version)
            checked += 1
    assert checked > 40

    news, still = web.origins[0] + "/news", web.origins[1] + "/still"
    some = stored[news][len(stored[news]) // 2]
    got = cli(db_url, warc_dir, "get", news, "--at", some.fetched_at.isoformat())
    assert got.returncode == 0, got.stderr
    assert got.stdout == web.body_at(news, some.fetched_at.timestamp() + 0.5e-3 + next(
        r["duration_seconds"] for r in rows if r["id"] == some.id))

    # A page that never changes: one response, then revisits.
    kinds = [v.record_type for v in stored[still]]
    assert kinds[0] == "response" and kinds.count("response") == 1, kinds
    assert kinds.count("revisit") >= 5

    # diff across the last real change: the rewritten text, and every other line that
    # differs, the per-request timestamp included; the distance first.
    diff = cli(db_url, warc_dir, "diff", news)
    assert diff.returncode == 0, diff.stderr
    lines = diff.stdout.decode().splitlines()
    assert lines[0].startswith(f"{news}: simhash distance "), lines[0]
    changed_lines = [ln for ln in lines[3:] if ln.startswith(("+", "-"))]
    assert len(changed_lines) > 10, lines
    assert any(ln.startswith("+") and "Rendered at" in ln for ln in changed_lines)
    text = cli(db_url, warc_dir, "get", news, "--text")
    assert text.returncode == 0 and b"Rendered at" in text.stdout

    listed = cli(db_url, warc_dir, "versions", still, "--json")
    assert [v["record_type"] for v in json.loads(listed.stdout)] == kinds

    # Change events: the two rewrites of /news and /doomed going away.
    by_kind = [(e["url"], e["kind"]) for e in events]
    assert by_kind.count((news, "changed")) == 2, by_kind
    assert (web.origins[1] + "/doomed", "gone") in by_kind
    assert all(url != web.origins[0] + "/cosmetic" for url, _ in by_kind)
    first = json.loads(events[0]["payload"])
    changes = cli(db_url, warc_dir, "changes", "--json", "--limit", "1")
    page = json.loads(changes.stdout)
    assert len(page["events"]) == 1
    rest = json.loads(cli(db_url, warc_dir, "changes", "--json", "--after",
                          page["next_cursor"]).stdout)
    assert len(page["events"]) + len(rest["events"]) == len(events)
    changed_event = next(json.loads(e["payload"]) for e in events if e["kind"] == "changed")
    assert changed_event["added"] and changed_event["removed"]
    assert changed_event["distance"] >= 6 and changed_event["warc_file"]
    assert first["url"]
