"""Invariants any scenario can check: of the frontier once its daemons have stopped, and of
the plan while they run."""

from __future__ import annotations

import asyncio
import time

import asyncpg

from crawler.daemon.follow import PLAN_POLL_SECONDS

# A URL "has a next fetch time" when its next_fetch_at is a finite timestamp. The one
# exception is by design: a window page outside its window that is not gone is parked
# ('infinity') until the window takes it in again (crawler.db.windows), which makes it due.
UNSCHEDULED = """
SELECT u.url, u.state, u.next_fetch_at::text AS next_fetch_at, u.site_id, u.in_window
FROM urls AS u
WHERE NOT isfinite(u.next_fetch_at)
  AND NOT (u.next_fetch_at = 'infinity' AND u.site_id IS NOT NULL AND NOT u.in_window
           AND u.state <> 'gone')
ORDER BY u.url
"""

# A host not leased is due no later than its earliest scheduled URL: otherwise no daemon
# claims it when that URL comes due, and the URL's time is a time in name only.
HOSTS_DUE_LATE = """
SELECT h.origin, h.next_due_at::text AS next_due_at, min(u.next_fetch_at)::text AS earliest
FROM hosts AS h JOIN urls AS u ON u.host_id = h.id
WHERE isfinite(u.next_fetch_at) AND h.lease_owner IS NULL
GROUP BY h.id, h.origin, h.next_due_at
HAVING h.next_due_at IS NULL OR h.next_due_at > min(u.next_fetch_at)
ORDER BY h.origin
"""


async def unscheduled_urls(db_url: str) -> list[dict[str, object]]:
    """The URLs that are not removed yet have no next fetch time (none is the answer)."""
    conn = await asyncpg.connect(db_url)
    try:
        return [dict(r) for r in await conn.fetch(UNSCHEDULED)]
    finally:
        await conn.close()


async def hosts_due_after_their_urls(db_url: str) -> list[dict[str, object]]:
    """Hosts given back whose due time is later than their earliest URL's (none is the
    answer once the daemons have stopped)."""
    conn = await asyncpg.connect(db_url)
    try:
        return [dict(r) for r in await conn.fetch(HOSTS_DUE_LATE)]
    finally:
        await conn.close()


async def assert_every_url_scheduled(db_url: str) -> None:
    """Every URL that was not removed has a next fetch time (a window page parked outside
    its window excepted), and every host is due by its earliest URL's time."""
    unscheduled = await unscheduled_urls(db_url)
    assert not unscheduled, f"URLs with no next fetch time: {unscheduled}"
    late = await hosts_due_after_their_urls(db_url)
    assert not late, f"hosts due later than their earliest URL: {late}"


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
