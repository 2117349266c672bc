"""Discovery on a static site of a few hundred pages equals what wget's recursive spider finds.

Normalisation differences between the two, applied to wget's list before comparing:
- URLs are compared after the crawler's normalisation (``normalize_url``): lower-case host,
  default port dropped, percent-encoding normalised, query parameters sorted, session ids
  removed; wget keeps URLs as written (minus fragments, which both drop).
- wget also requests /robots.txt, which the crawler fetches too but does not list as a page.
- Broken links (404) are in both sets: wget reports them as broken, the crawler keeps them as
  discovered URLs in state ``gone``, outside the window.
"""

from __future__ import annotations

import asyncio
import re
import sys
import tempfile
import time

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from toolcheck import require_tool

from crawler.core.links import normalize_url
from crawler.demo.sites import static_site
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(240)

URL_LINE = re.compile(r"URL:\s*(\S+)")


def wget_urls(output: str) -> set[str]:
    found = set(URL_LINE.findall(output))
    broken = output.split("broken links.", 1)[1] if "broken links." in output else ""
    found |= {line.strip() for line in broken.splitlines() if line.startswith("http")}
    normalized = {normalize_url(u) for u in found if not u.endswith("/robots.txt")}
    return {u for u in normalized if u is not None}


async def test_discovery_matches_wget_spider(db_url: str) -> None:
    wget = require_tool("wget", "wget")
    web = DemoWeb([static_site(n_pages=300)])
    await web.start()
    root = web.origins[0] + "/"
    env = daemon_env(
        db_url, schedule="uniform", default_interval="3600", politeness_delay="0.005",
        poll_interval="0.05", claim_urls_per_host="200",
    )
    try:
        seed = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "seed", "--window", "1000", root, env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )
        assert await seed.wait() == 0
        proc = await start_daemon(env)
        pool = await asyncpg.create_pool(db_url)
        deadline = time.time() + 120
        while time.time() < deadline:
            pending = await pool.fetchval(
                "SELECT count(*) FROM urls WHERE site_id IS NOT NULL AND in_window "
                "AND fetch_count = 0"
            )
            if pending == 0:
                break
            await asyncio.sleep(0.5)
        out = await stop_daemon(proc)
        assert proc.returncode == 0, out[-2000:]
        crawled = {r["url"] for r in await pool.fetch(
            "SELECT url FROM urls WHERE site_id IS NOT NULL")}
        gone = await pool.fetchval("SELECT count(*) FROM urls WHERE state = 'gone'")
        await pool.close()
        with tempfile.TemporaryDirectory() as scratch:
            spider = await asyncio.create_subprocess_exec(
                wget, "--spider", "--recursive", "--no-parent", "--level=inf",
                "--no-verbose", "-nd", "-P", scratch, root,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            spidered, _ = await asyncio.wait_for(spider.communicate(), 120)
    finally:
        await web.stop()

    expected = wget_urls(spidered.decode())
    assert len(expected) > 250
    assert crawled == expected, (sorted(crawled - expected)[:10], sorted(expected - crawled)[:10])
    assert gone >= 1  # the site's broken links were found and recorded as gone
