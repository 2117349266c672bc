"""The plan is data every fetch process reads: ``crawler run --processes 2`` schedules every
fetch under a solved plan, and a daemon restarted with other settings re-plans at once.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from dataclasses import replace

import asyncpg
import numpy as np
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from invariants import assert_every_process_applies_the_newest_plan

from crawler.core.estimate import GammaPrior
from crawler.core.schedule import SchedulePolicy, optimal_fetch_rate_per_day
from crawler.core.stored_plan import host_priors_from_json
from crawler.daemon.follow import PLAN_POLL_SECONDS
from crawler.db import frontier
from crawler.demo.processes import PoissonProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb
from crawler.settings import Settings

pytestmark = pytest.mark.timeout(300)

SITES = 16
PAGES_PER_SITE = 5
DEFAULT_INTERVAL = 7.0  # seconds; no plan of these tests gives a URL exactly this interval


def web_sites() -> list[SiteSpec]:
    """Pages whose mean change intervals spread from 2 s to 10 min, over many hosts."""
    intervals = np.geomspace(2.0, 600.0, SITES * PAGES_PER_SITE)
    return [
        SiteSpec(f"site{s}", tuple(
            PageSpec(f"/p{i}", real=PoissonProcess(rate_per_second=1.0 / intervals[i]),
                     seed=f"s{i}")
            for i in range(s, intervals.size, SITES)
        ))
        for s in range(SITES)
    ]


def settings_env(db_url: str, budget_per_second: float, **extra: str) -> dict[str, str]:
    return daemon_env(
        db_url, budget_per_day=str(budget_per_second * 86400), min_interval="0.5",
        max_interval="120", default_interval=str(DEFAULT_INTERVAL), politeness_delay="0.05",
        poll_interval="0.05", detect_periods="false", **extra,
    )


async def wait_for(
    pool: asyncpg.Pool, query: str, deadline_seconds: float, *args: object
) -> object:
    deadline = time.monotonic() + deadline_seconds
    while time.monotonic() < deadline:
        value = await pool.fetchval(query, *args)
        if value:
            return value
        await asyncio.sleep(0.2)
    raise AssertionError(f"not within {deadline_seconds}s: {query} {args}")


async def test_every_process_fetches_under_the_plan(db_url: str) -> None:
    web = DemoWeb(web_sites())
    await web.start()
    env = settings_env(db_url, 8.0, planner_interval="4", processes="2")
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        proc = await start_daemon(env)
        try:
            first_plan = await wait_for(
                pool, "SELECT extract(epoch FROM min(solved_at)) FROM plans WHERE mu IS NOT NULL",
                120.0,
            )
            await asyncio.sleep(25.0)  # fetching under the plans for a while
            # Both fetch processes schedule under the newest plan.
            await assert_every_process_applies_the_newest_plan(pool, expected_processes=2)
        finally:
            out = await stop_daemon(proc)
        plans = await pool.fetch("SELECT * FROM plans ORDER BY version")
        urls = await pool.fetch(
            "SELECT host_id, importance, change_rate_per_day, fetch_rate_per_day, "
            "extract(epoch FROM last_attempt_at) AS attempted FROM urls "
            "WHERE state = 'active' AND consecutive_failures = 0 AND last_fetched_at IS NOT NULL"
        )
    finally:
        await pool.close()
        await web.stop()
    assert proc.returncode == 0, out[-3000:]
    assert out.count("scheduling under plan") >= 2, out[-3000:]
    base = SchedulePolicy(Settings(
        min_interval=0.5, max_interval=120, default_interval=DEFAULT_INTERVAL,
        detect_periods=False, schedule="optimal",
    ))
    policies = [
        replace(base, mu=p["mu"], prior=GammaPrior(p["prior_shape"], p["prior_rate"]),
                host_priors=host_priors_from_json(p["host_priors"]))
        for p in plans if p["mu"] is not None
    ]
    # A fetch this long after the first plan was stored is scheduled by a process that has
    # read it (each polls every PLAN_POLL_SECONDS).
    settled = float(first_plan) + 2.0 * PLAN_POLL_SECONDS + 1.0  # type: ignore[arg-type]
    checked = 0
    fallback = 86400.0 / DEFAULT_INTERVAL
    for row in urls:
        if row["attempted"] is None or row["attempted"] < settled:
            continue
        checked += 1
        rate = row["fetch_rate_per_day"]
        assert rate != pytest.approx(fallback, rel=1e-9), (dict(row), out[-2000:])
        derived = [
            optimal_fetch_rate_per_day(row["change_rate_per_day"], row["importance"], policy)
            for policy in policies
        ]
        assert any(rate == pytest.approx(d, rel=1e-6) for d in derived), (
            dict(row), derived[-3:])
    assert checked >= 0.8 * len(urls) and checked >= 40, (checked, len(urls))
    print(f"{checked} URLs fetched under {len(policies)} plans, none at the fallback",
          file=sys.stderr)


async def status_json(db_url: str) -> dict[str, object]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "status", "--json",
        env=daemon_env(db_url), stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode == 0, err.decode()
    status: dict[str, object] = json.loads(out)
    return status


async def test_a_restart_with_half_the_budget_replans_at_once(db_url: str) -> None:
    web = DemoWeb(web_sites())
    await web.start()
    planner_interval = 40.0
    pool = await asyncpg.create_pool(db_url)
    total_rate = (
        "SELECT sum(fetch_rate_per_day) FROM urls WHERE state = 'active' "
        "AND consecutive_failures = 0 AND fetch_rate_per_day IS NOT NULL"
    )
    try:
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        env = settings_env(db_url, 8.0, planner_interval=str(planner_interval))
        proc = await start_daemon(env)
        try:
            await wait_for(pool, "SELECT count(*) FROM plans WHERE mu IS NOT NULL", 120.0)
            # Long enough that every URL was fetched under the first plan.
            await wait_for(pool, "SELECT count(*) = 0 FROM urls WHERE last_fetched_at IS NULL",
                           60.0)
            await asyncio.sleep(8.0)
        finally:
            out = await stop_daemon(proc)
        assert proc.returncode == 0, out[-3000:]
        before_version = await pool.fetchval("SELECT max(version) FROM plans")
        before_rate = await pool.fetchval(total_rate)
        before_due = dict(await pool.fetch("SELECT id, next_fetch_at FROM urls"))

        env = settings_env(db_url, 4.0, planner_interval=str(planner_interval))
        proc = await start_daemon(env)
        restarted = time.monotonic()
        try:
            version = await wait_for(
                pool, "SELECT max(version) FROM plans WHERE version > $1 "
                "AND budget_setting_per_day = $2", planner_interval, before_version, 4.0 * 86400,
            )
            # Well within one planner interval: the re-plan at start, not the next round.
            assert time.monotonic() - restarted < planner_interval
            status = await status_json(db_url)
            planner = status["planner"]
            assert isinstance(planner, dict)
            assert planner["version"] == version
            assert planner["budget_per_day"] == pytest.approx(4.0 * 86400)
            assert planner["budget_source"] == "CRAWLER_BUDGET_PER_DAY"
            assert planner["solved_for"]["budget_setting_per_day"] == pytest.approx(4.0 * 86400)
            # The walk moved the population's rates (and due times) to the new plan.
            deadline = time.monotonic() + planner_interval
            while time.monotonic() < deadline:
                after_rate = await pool.fetchval(total_rate)
                if after_rate < 0.75 * before_rate:
                    break
                await asyncio.sleep(0.5)
            assert after_rate < 0.75 * before_rate, (before_rate, after_rate)
            after_due = dict(await pool.fetch("SELECT id, next_fetch_at FROM urls"))
            moved = sum(after_due[k] != v for k, v in before_due.items())
            assert moved >= 0.5 * len(before_due), (moved, len(before_due))
        finally:
            out = await stop_daemon(proc)
        assert proc.returncode == 0, out[-3000:]
        assert "re-planning now" in out, out[-3000:]
    finally:
        await pool.close()
        await web.stop()


async def test_a_lower_uniform_interval_pulls_due_times_in(db_url: str) -> None:
    web = DemoWeb(web_sites())
    await web.start()
    pool = await asyncpg.create_pool(db_url)
    latest_due = "SELECT extract(epoch FROM max(next_fetch_at)) FROM urls WHERE state = 'active'"
    try:
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        env = daemon_env(db_url, schedule="uniform", default_interval="3600",
                         min_interval="1", planner_interval="60", politeness_delay="0.05",
                         poll_interval="0.05")
        proc = await start_daemon(env)
        try:
            await wait_for(pool, "SELECT count(*) = 0 FROM urls WHERE last_fetched_at IS NULL",
                           60.0)
            await wait_for(pool, "SELECT count(*) FROM plans", 60.0)
        finally:
            out = await stop_daemon(proc)
        assert proc.returncode == 0, out[-3000:]
        assert await pool.fetchval(latest_due) > time.time() + 3000  # an hour away

        env = daemon_env(db_url, schedule="uniform", default_interval="20",
                         min_interval="1", planner_interval="60", politeness_delay="0.05",
                         poll_interval="0.05")
        proc = await start_daemon(env)
        restarted = time.time()
        try:
            # Every URL due within the new interval of its last fetch, without waiting an hour.
            deadline = time.monotonic() + 45.0
            while time.monotonic() < deadline:
                if await pool.fetchval(latest_due) < time.time() + 20.0:
                    break
                await asyncio.sleep(0.5)
            assert await pool.fetchval(latest_due) < time.time() + 20.0
            # ... and fetched again at the new interval.
            await wait_for(pool, "SELECT count(*) = 0 FROM urls WHERE state = 'active' AND "
                           "last_attempt_at < to_timestamp($1)", 60.0, restarted)
        finally:
            out = await stop_daemon(proc)
        assert proc.returncode == 0, out[-3000:]
        assert "re-planning now" in out, out[-3000:]
    finally:
        await pool.close()
        await web.stop()
