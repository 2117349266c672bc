"""Invariant: every fetch process applies the current plan (``daemons.plan_version``)."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from crawler.daemon.follow import PLAN_POLL_SECONDS

LIVE_SECONDS = 30.0


async def assert_every_process_applies_the_newest_plan(
    pool: asyncpg.Pool, expected_processes: int | None = None, deadline_seconds: float = 15.0
) -> None:
    """Every live fetch process shows the newest plan's version (within a few polls: a plan
    stored a moment ago is adopted at each process's next poll)."""
    deadline = time.monotonic() + max(deadline_seconds, 3.0 * PLAN_POLL_SECONDS)
    while True:
        newest = await pool.fetchval("SELECT max(version) FROM plans")
        rows = await pool.fetch(
            "SELECT owner, plan_version FROM daemons "
            "WHERE heartbeat_at > now() - make_interval(secs => $1)", LIVE_SECONDS,
        )
        behind = [dict(r) for r in rows if r["plan_version"] != newest]
        enough = expected_processes is None or len(rows) == expected_processes
        if newest is not None and not behind and enough:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"plan {newest}: processes behind {behind} of {len(rows)} live"
                f" (expected {expected_processes})"
            )
        await asyncio.sleep(0.2)
