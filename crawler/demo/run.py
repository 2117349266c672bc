"""``crawler demo``: the whole main job with no network — what ``make run`` starts.

Serves the synthetic demo web on loopback, seeds its pages, and runs the real daemon against
it on the configured database (the embedded one by default), printing progress until Ctrl-C.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time

import asyncpg

from crawler.daemon.run import run_daemon
from crawler.db import frontier, migrate
from crawler.db.connect import create_pool, database_url
from crawler.db.queries import QUERIES
from crawler.demo.sites import demo_sites
from crawler.demo.web import DemoWeb
from crawler.settings import Settings

DEMO_PORT = 8700
PROGRESS_SECONDS = 5.0

# Unless the operator set them, the demo revisits fast so changes show within a minute.
DEMO_DEFAULTS = {
    "default_interval": 15.0,
    "min_interval": 2.0,
    "politeness_delay": 0.2,
    "shutdown_grace": 3.0,
    "planner_interval": 10.0,
    "allow_networks": ["127.0.0.0/8"],
}


def demo_settings(settings: Settings) -> Settings:
    updates = {k: v for k, v in DEMO_DEFAULTS.items() if k not in settings.model_fields_set}
    return settings.model_copy(update=updates)


async def print_progress(pool: asyncpg.Pool, started: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_SECONDS)
        with contextlib.suppress(asyncpg.PostgresError, OSError):
            counts = await pool.fetchrow(QUERIES["status_counts"])
            totals = await pool.fetchrow(
                "SELECT count(*) AS fetches, count(*) FILTER (WHERE changed) AS changes, "
                "count(*) FILTER (WHERE content_changed AND NOT changed) AS cosmetic "
                "FROM observations WHERE fetched_at >= to_timestamp($1)", started
            )
            assert counts is not None and totals is not None
            print(
                f"[{time.time() - started:5.0f}s] fetched {totals['fetches']:5d}  "
                f"changes {totals['changes']:4d}  cosmetic-only {totals['cosmetic']:4d}  "
                f"due {counts['due_all']:4d}  urls {counts['urls']}",
                flush=True,
            )


async def run_demo(settings: Settings, args: argparse.Namespace) -> int:
    settings = demo_settings(settings)
    url = await asyncio.to_thread(database_url, settings)
    await migrate.upgrade(url)
    sites = demo_sites(n_sites=args.sites, pages_per_site=args.pages)
    try:
        web = DemoWeb(sites, port=DEMO_PORT)
        await web.start()
    except OSError:  # the fixed port is taken: any free one will do
        web = DemoWeb(sites, port=0)
        await web.start()
    pool = await create_pool(url)
    started = time.time()
    try:
        seeded = await frontier.seed(pool, [(u, 1.0) for u in web.urls()], started)
        print(f"demo web: {len(web.origins)} sites on {', '.join(web.origins)}")
        print(f"seeded {seeded.inserted} new URLs ({seeded.already_known} already known); "
              "crawling — Ctrl-C to stop", flush=True)
        progress = asyncio.create_task(print_progress(pool, started))
        try:
            return await run_daemon(settings, url, duration=args.duration)
        finally:
            progress.cancel()
    finally:
        await pool.close()
        await web.stop()
