"""Page-window discovery against a site that creates, moves and deletes pages on a schedule.

After the site has been revisited a few times, the crawler's window equals the window computed
from the live link graph, and entered/left times match the ground truth to within a revisit.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import time

import asyncpg
import numpy as np
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from invariants import assert_every_url_scheduled

from crawler.demo.sites import evolving_site, static_site
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(240)

WINDOW = 30
HORIZON_SECONDS = 20.0
RUN_SECONDS = 28.0  # after the site clock starts: its horizon plus 8 s
REVISIT_SECONDS = 1.0
# A transition is seen when the page linking to the moved page is next fetched: one revisit,
# plus claim and politeness slack.
TOLERANCE_SECONDS = 2 * REVISIT_SECONDS + 1.0


def truth_transitions(
    web: DemoWeb, start: float, end: float
) -> dict[str, list[tuple[float, bool]]]:
    """Per URL, the times its membership in the true window flipped (time, now inside)."""
    transitions: dict[str, list[tuple[float, bool]]] = {}
    inside: set[str] = set()
    for t in np.arange(start, end, 0.05):
        window = set(web.window(0, WINDOW, at=float(t)))
        for url in window ^ inside:
            transitions.setdefault(url, []).append((float(t), url in window))
        inside = window
    return transitions


async def test_window_follows_the_live_site(db_url: str) -> None:
    site = evolving_site("evolving", 40, n_created=10, n_deleted=6, n_moved=6,
                         horizon_seconds=HORIZON_SECONDS, seed=3)
    web = DemoWeb([site])
    await web.start()
    root = web.origins[0] + "/"
    env = daemon_env(
        db_url, schedule="uniform", default_interval=str(REVISIT_SECONDS), min_interval="0.2",
        politeness_delay="0.01", poll_interval="0.05", claim_urls_per_host="64",
    )
    try:
        seeded = subprocess.run(
            [sys.executable, "-m", "crawler", "seed", "--window", str(WINDOW), root],
            env=env, capture_output=True, text=True, timeout=60,
        )
        assert seeded.returncode == 0, seeded.stderr
        proc = await start_daemon(env)
        # The site's evolution is timed from its clock: start that clock once the daemon has
        # fetched the root, so a slow start on a loaded machine does not eat the scenario.
        conn = await asyncpg.connect(db_url)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.returncode is None:
            if await conn.fetchval("SELECT count(*) FROM observations"):
                break
            await asyncio.sleep(0.1)
        await conn.close()
        web.start_time = web.clock()
        await asyncio.sleep(RUN_SECONDS)  # the scenario's length, not a wait for a condition
        end = time.time()
        out = await stop_daemon(proc)
        assert proc.returncode == 0, out[-2000:]
        conn = await asyncpg.connect(db_url)
        rows = await conn.fetch(
            "SELECT url, in_window, entered_window_at, left_window_at FROM urls "
            "WHERE site_id IS NOT NULL"
        )
        await conn.close()
        listing = subprocess.run(
            [sys.executable, "-m", "crawler", "urls", "--site", root, "--json"],
            env=env, capture_output=True, text=True, timeout=60,
        )
    finally:
        await web.stop()

    crawler_window = {r["url"] for r in rows if r["in_window"]}
    assert crawler_window == set(web.window(0, WINDOW, at=end))
    await assert_every_url_scheduled(db_url)  # deleted pages too: they may come back
    assert listing.returncode == 0 and '"in_window": true' in listing.stdout

    truth = truth_transitions(web, web.start_time, end)
    by_url = {r["url"]: r for r in rows}
    checked = 0
    for url, flips in truth.items():
        last_time, now_inside = flips[-1]
        if last_time - web.start_time < 3.0:
            continue  # in the window from the start: entered when first discovered
        row = by_url[url]
        seen = row["entered_window_at"] if now_inside else row["left_window_at"]
        assert seen is not None, (url, flips)
        lag = seen.timestamp() - last_time
        assert -0.2 <= lag <= TOLERANCE_SECONDS, (url, flips, lag)
        checked += 1
    assert checked >= 8, checked


async def test_a_page_crawled_before_it_became_a_window_root_has_its_links_read(
    db_url: str,
) -> None:
    """A URL seeded plainly and fetched (its ETag stored) and then made a window's root: the
    window grows from its links, though the server answers its validators with 304."""
    web = DemoWeb([static_site("static", 20, seed=5)])
    await web.start()
    root = web.origins[0] + "/"
    env = daemon_env(
        db_url, schedule="uniform", default_interval="0.5", min_interval="0.2",
        politeness_delay="0.01", poll_interval="0.05",
    )
    conn = await asyncpg.connect(db_url)
    proc = None
    try:
        seeded = subprocess.run([sys.executable, "-m", "crawler", "seed", root], env=env,
                                capture_output=True, text=True, timeout=60)
        assert seeded.returncode == 0, seeded.stderr
        proc = await start_daemon(env)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.returncode is None:
            if await conn.fetchval("SELECT count(*) FROM observations WHERE status = 304"):
                break  # fetched whole, then answered 304 to its validators
            await asyncio.sleep(0.1)
        assert await conn.fetchval("SELECT etag IS NOT NULL FROM urls WHERE url = $1", root)
        windowed = subprocess.run(
            [sys.executable, "-m", "crawler", "seed", "--window", "6", root],
            env=env, capture_output=True, text=True, timeout=60,
        )
        assert windowed.returncode == 0, windowed.stderr
        in_window = 0
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and proc.returncode is None:
            in_window = await conn.fetchval("SELECT count(*) FROM urls WHERE in_window")
            if in_window == 6:
                break
            await asyncio.sleep(0.1)
        assert in_window == 6
    finally:
        if proc is not None:
            out = await stop_daemon(proc)
            assert proc.returncode == 0, out[-2000:]
        await conn.close()
        await web.stop()
