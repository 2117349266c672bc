"""``crawler demo``: the whole main job with no network — what ``make run`` starts.

Serves the synthetic demo web on loopback, seeds its pages, and runs the real daemon against
it, printing progress until Ctrl-C. The demo keeps to a data directory of its own (an
embedded server under ``CRAWLER_DATA_DIR/demo``): its hosts, events and demo settings stay
out of the user's ``status``, ``changes``, report and webhook unless the command line names a
database or directory for it (``crawler demo --database-url URL`` or ``--data-dir DIR``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import time

import asyncpg

from crawler.daemon.run import run_daemon
from crawler.db import frontier, migrate
from crawler.db.connect import create_pool, database_url, describe
from crawler.db.status import progress_since
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
    "log_stats_interval": 0.0,  # the demo prints its own progress line (print_progress)
}


# Settings that point at the user's own crawl: from the environment they are the user's setup,
# not a choice for the demo, which uses them only when its command line names them.
OWN_PLACES = ("database_url", "warc_dir", "webhook_url")
DEMO_SUBDIRECTORY = "demo"


def demo_settings(settings: Settings, given: frozenset[str] = frozenset()) -> Settings:
    """The demo's settings: fast revisits unless set, and its own data directory unless
    ``given`` (the settings named on its command line) places it."""
    updates: dict[str, object] = {
        k: v for k, v in DEMO_DEFAULTS.items() if k not in settings.model_fields_set
    }
    updates.update({name: None for name in OWN_PLACES if name not in given})
    if "data_dir" not in given and "database_url" not in given:
        updates["data_dir"] = settings.data_dir / DEMO_SUBDIRECTORY
    return settings.model_copy(update=updates)


def where(settings: Settings) -> str:
    """Where the demo's data is, and how another command reads it."""
    if settings.database_url is not None:
        return f"demo data in {describe(settings.database_url)}"
    return (f"demo data in {settings.data_dir} (its own embedded PostgreSQL; other commands "
            f"read it with CRAWLER_DATA_DIR={settings.data_dir})")


async def print_progress(pool: asyncpg.Pool, started: float) -> None:
    while True:
        await asyncio.sleep(PROGRESS_SECONDS)
        with contextlib.suppress(asyncpg.PostgresError, OSError):
            now = await progress_since(pool, started)
            print(
                f"[{time.time() - started:5.0f}s] fetched {now.fetches:5d}  "
                f"changes {now.changes:4d}  cosmetic-only {now.cosmetic:4d}  "
                f"due {now.due:4d}  urls {now.urls}",
                flush=True,
            )


async def run_demo(settings: Settings, args: argparse.Namespace) -> int:
    given = frozenset(name for name in Settings.model_fields
                      if getattr(args, name, None) is not None)
    settings = demo_settings(settings, given)
    print(where(settings), flush=True)
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
