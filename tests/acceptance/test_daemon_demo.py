"""The real daemon (`crawler run` in its own process) against the demo web.

Pages with known change schedules must produce observations whose detected changes match the
ground truth, a cosmetic-only edit must be recorded as not changed, and SIGTERM mid-run must
leave no lease behind and lose no observation.
"""

from __future__ import annotations

import asyncio
import itertools
import time

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon

from crawler.db import frontier
from crawler.demo.processes import PoissonProcess, ScheduledProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(180)

# Fetch times and server render times differ by a few milliseconds; a change this close to a
# fetch could fall on either side of it, so such intervals are not judged.
AMBIGUOUS_SECONDS = 0.15


def sites() -> list[SiteSpec]:
    scheduled = PageSpec("/scheduled", real=ScheduledProcess((2.2, 4.7, 8.3, 9.1, 13.6)))
    poisson = PageSpec("/poisson", real=PoissonProcess(rate_per_second=0.4), seed="p")
    cosmetic = PageSpec(
        "/cosmetic",
        cosmetic=ScheduledProcess(tuple(0.5 + 1.5 * k for k in range(20))),
        cosmetic_per_request=True,
    )
    still = PageSpec("/still")
    return [
        SiteSpec("a", (scheduled, cosmetic)),
        SiteSpec("b", (poisson, still)),
    ]


async def run_daemon_process(
    db_url: str, pool: asyncpg.Pool, web: DemoWeb, *, min_seconds: float, min_observations: int
) -> tuple[int, str, float]:
    """Run the daemon until it has fetched every URL once, then restart the demo's site clock
    (so the scheduled changes fall inside the crawl however slowly the daemon started), run at
    least ``min_seconds`` more and until every URL has ``min_observations`` observations:
    conditions, not fixed times, so a loaded machine only makes the test slower, not red.
    Returns the exit code, the output and the server-clock time the site clock restarted."""
    env = daemon_env(db_url, schedule="uniform", default_interval="0.7", min_interval="0.5",
                     politeness_delay="0.05", poll_interval="0.1")
    proc = await start_daemon(env)
    deadline = time.monotonic() + 150.0
    clock_started: float | None = None
    restarted_at = 0.0
    while time.monotonic() < deadline and proc.returncode is None:
        fewest = await pool.fetchval(
            "SELECT min(n) FROM (SELECT count(o.id) AS n FROM urls u "
            "LEFT JOIN observations o ON o.url_id = u.id GROUP BY u.id) AS c"
        ) or 0
        if clock_started is None and fewest >= 1:
            restarted_at = web.start_time = web.clock()
            clock_started = time.monotonic()
        if (
            clock_started is not None
            and time.monotonic() - clock_started >= min_seconds
            and fewest >= min_observations
        ):
            break
        await asyncio.sleep(0.25)
    out = await stop_daemon(proc)  # mid-run: requests are in flight all the time
    assert proc.returncode is not None
    return proc.returncode, out, restarted_at


def changed_between(times: list[float], start: float, end: float) -> bool | None:
    """Did a real change happen in (start, end]? None when one is too close to call."""
    for t in times:
        if abs(t - start) < AMBIGUOUS_SECONDS or abs(t - end) < AMBIGUOUS_SECONDS:
            return None
    return any(start < t <= end for t in times)


async def test_daemon_detects_known_changes_and_drains_on_sigterm(db_url: str) -> None:
    web = DemoWeb(sites())
    await web.start()
    try:
        pool = await asyncpg.create_pool(db_url)
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        code, output, restarted_at = await run_daemon_process(
            db_url, pool, web, min_seconds=16.0, min_observations=14
        )
        truth = {
            f"{web.origins[k]}{page['path']}": page
            for k, site_truth in enumerate(web.truth())
            for page in site_truth["pages"]  # type: ignore[index]
        }
        rows = await pool.fetch(
            "SELECT u.url, o.fetched_at, o.changed, o.content_changed, o.outcome "
            "FROM observations o JOIN urls u ON u.id = o.url_id ORDER BY u.url, o.fetched_at"
        )
        hosts_leased = await pool.fetchval(
            "SELECT count(*) FROM hosts "
            "WHERE lease_owner IS NOT NULL OR lease_expires_at IS NOT NULL"
        )
        await pool.close()
    finally:
        await web.stop()

    assert code == 0, output
    assert hosts_leased == 0, output

    # Nothing lost: every request the server answered is an observation in the database.
    served = sum(web.visits.values())
    assert len(rows) == served, (len(rows), served)

    by_url: dict[str, list[asyncpg.Record]] = {}
    for row in rows:
        by_url.setdefault(row["url"], []).append(row)
    judged = mismatches = 0
    for url, observations in by_url.items():
        assert {o["outcome"] for o in observations} <= {"ok", "not_modified"}, url
        assert len(observations) >= 8, (url, len(observations))
        change_times = [float(t) for t in truth[url]["real_change_times"]]
        for before, after in itertools.pairwise(observations):
            if before["fetched_at"].timestamp() < restarted_at + AMBIGUOUS_SECONDS:
                continue  # fetched before the site clock restarted: another timeline
            expected = changed_between(
                change_times, before["fetched_at"].timestamp(), after["fetched_at"].timestamp()
            )
            if expected is None:
                continue
            judged += 1
            mismatches += after["changed"] != expected
    assert judged > 40  # 4 URLs x at least 13 pairs, a few too close to a change to call
    assert mismatches == 0

    cosmetic = by_url[f"{web.origins[0]}/cosmetic"]
    assert not any(o["changed"] for o in cosmetic)
    # Bytes differ on every full response (a per-request counter); 304s carry no body.
    assert sum(bool(o["content_changed"]) for o in cosmetic) >= 5
    # A page that never changes is refetched with If-None-Match: each answer is a 304,
    # recorded as an observation of "not changed".
    still = by_url[f"{web.origins[1]}/still"]
    assert still[0]["outcome"] == "ok"
    assert all(o["outcome"] == "not_modified" and o["changed"] is False for o in still[1:])
    scheduled = by_url[f"{web.origins[0]}/scheduled"]
    assert sum(bool(o["changed"]) for o in scheduled) >= 4
