"""The planner at scale, against a real PostgreSQL: a bounded sample gives the full solve's μ,
one daemon per fleet solves, the fleet's budget counts every live daemon, and a re-plan keeps
a periodic page's alignment (the same ``next_fetch`` as after a fetch)."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import AsyncIterator
from typing import Any

import asyncpg
import numpy as np
import pytest

from crawler.core.budget import derived_budget_per_day, plan_population
from crawler.core.estimate import ChangeHistory, GammaPrior
from crawler.core.model import SECONDS_PER_DAY, UrlRecord
from crawler.core.periodic import PeriodicModel
from crawler.core.planning import PlannerOutcome
from crawler.core.replan import current_rates, moved_urls, replanned
from crawler.core.schedule import SchedulePolicy
from crawler.daemon.planner import solve_once
from crawler.db import frontier
from crawler.db.planning import (
    RESCHEDULE_CHUNK,
    fleet_budget,
    planner_pool,
    read_sample,
    reschedule,
)
from crawler.db.queries import PLAIN_QUERIES
from crawler.settings import default_settings

pytestmark = pytest.mark.timeout(180)

HOSTS = 400
PER_HOST = 50
POLICY = SchedulePolicy(default_settings(min_interval=60.0, max_interval=30 * 86400.0))


def planned(**settings: Any) -> SchedulePolicy:
    """POLICY, with the settings a test's planning rounds read (budget, fleet, sample)."""
    return SchedulePolicy(POLICY.settings.model_copy(update=settings))


async def populate(pool: asyncpg.Pool, hosts: int = HOSTS) -> np.ndarray:
    """Fetched URLs with log-spread change rates; returns the rates in id order."""
    urls = [(f"http://127.0.0.{h % 250 + 2}:{8000 + h}/p{i}", 1.0)
            for h in range(hosts) for i in range(PER_HOST)]
    await frontier.seed(pool, urls, time.time())
    await pool.execute(
        """UPDATE urls SET state = 'active', last_fetched_at = now() - interval '1 hour',
                  next_fetch_at = now() + interval '1 day',
                  change_rate_per_day = 0.01 * power(10000.0, random()),
                  fetch_rate_per_day = 1.0"""
    )
    # Histories that say those rates: 200 fetches a mean change interval apart, 126 of which
    # saw a change (1 - 1/e of them), so the posterior the planner re-estimates is the rate.
    await pool.execute(
        """UPDATE urls SET intervals_observed = 200,
                  changed_intervals_days = array_fill(1.0 / change_rate_per_day, ARRAY[126]),
                  unchanged_days = 74.0 / change_rate_per_day"""
    )
    rows = await pool.fetch("SELECT change_rate_per_day FROM urls ORDER BY id")
    return np.array([r[0] for r in rows])


async def test_sampled_solve_matches_the_full_population(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    try:
        rates = await populate(pool)
        budget = 0.3 * rates.size * 24.0
        full = plan_population(
            rates, np.ones(rates.size), budget, min_interval_days=60 / SECONDS_PER_DAY,
            max_interval_days=30.0,
        )
        # The stored rates are the full optimum's, except every tenth URL's, which is off by 3x.
        ids = [r[0] for r in await pool.fetch("SELECT id FROM urls ORDER BY id")]
        stored = full.fetch_rates_per_day.copy()
        off = np.arange(rates.size) % 10 == 0
        stored[off] *= 3.0
        await pool.execute(
            "UPDATE urls SET fetch_rate_per_day = t.r FROM unnest($1::bigint[], $2::float8[]) "
            "AS t(id, r) WHERE urls.id = t.id", ids, stored.tolist(),
        )
        policy, outcome = await solve_once(
            pool, planned(budget_per_day=budget, concurrency=8, politeness_delay=0.0,
                          planner_sample_urls=2_000),
            window_seconds=60.0, round_seconds=60.0,
            rng=np.random.default_rng(1),
        )
        assert outcome is not None
        assert 1_500 <= outcome.sampled <= 2_500
        assert outcome.population == pytest.approx(rates.size, rel=0.05)
        # μ from a 10% sample is within a few percent of μ from every URL.
        assert outcome.mu == pytest.approx(full.mu, rel=0.1)
        assert policy.mu == outcome.mu
        stored_mu = await pool.fetchval("SELECT mu FROM plans ORDER BY version DESC LIMIT 1")
        assert stored_mu == pytest.approx(outcome.mu)
        # The walk rescheduled exactly the URLs whose rate under the solved policy moved
        # materially from the stored one: nearly every off URL, and few others. (Not every
        # one: an off URL near the freshness cut-off can land within 10% of its tripled rate
        # under the sample's slightly different μ, and then correctly keeps its schedule.)
        # Each URL's rate as the walk estimates it: its history under the fitted prior.
        rows = await pool.fetch(
            "SELECT host_id, changed_intervals_days, unchanged_days, intervals_observed "
            "FROM urls ORDER BY id")
        histories = [ChangeHistory(tuple(r[1]), r[2], r[3]) for r in rows]
        current = current_rates(histories, rates, [r[0] for r in rows], policy.prior,
                                policy.host_priors)
        expected = moved_urls(stored, current, np.ones(rates.size), policy)
        assert expected[off].mean() > 0.95
        assert expected[~off].mean() < 0.1
        assert outcome.rescheduled == expected.sum()
        after = np.array(
            [r[0] for r in await pool.fetch("SELECT fetch_rate_per_day FROM urls ORDER BY id")]
        )
        assert np.array_equal(~np.isclose(after, stored), expected)
    finally:
        await pool.close()


@pytest.fixture
async def small_fleet(db_url: str) -> AsyncIterator[tuple[asyncpg.Pool, SchedulePolicy]]:
    """2,000 fetched URLs on 40 hosts, and a policy whose settings fix the budget."""
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    try:
        await populate(pool, hosts=40)
        yield pool, planned(budget_per_day=1e4, concurrency=8, politeness_delay=0.0,
                            planner_sample_urls=1_000)
    finally:
        await pool.close()


async def test_one_planner_per_fleet(small_fleet: tuple[asyncpg.Pool, SchedulePolicy]) -> None:
    pool, policy = small_fleet
    _, first = await solve_once(pool, policy, window_seconds=60, round_seconds=30)
    adopted, second = await solve_once(pool, policy, window_seconds=60, round_seconds=30)
    assert first is not None
    assert second is None  # a round was solved less than 30 s ago: adopt it
    assert adopted.mu == pytest.approx(first.mu)
    await pool.execute("UPDATE planner_state SET updated_at = now() - interval '31 seconds'")
    _, third = await solve_once(pool, policy, window_seconds=60, round_seconds=30)
    assert third is not None


async def test_a_round_walks_when_mu_drifted_since_the_last_walk(
    small_fleet: tuple[asyncpg.Pool, SchedulePolicy],
) -> None:
    # The walk is decided against the policy of the last walk, not the last round's: a μ
    # drifting 1% a round would otherwise never reschedule anything.
    pool, base = small_fleet

    async def round_(
        policy: SchedulePolicy, walked: SchedulePolicy | None
    ) -> tuple[SchedulePolicy, PlannerOutcome | None]:
        await pool.execute("UPDATE planner_state SET updated_at = now() - interval '1 hour'")
        return await solve_once(
            pool, policy, window_seconds=60, round_seconds=30,
            rng=np.random.default_rng(1), walked=walked,
        )

    first_policy, first = await round_(base, None)
    assert first is not None and first.walked
    # Each walk replaces seeded rates with the URLs' own estimates, which moves μ; once a
    # walk reschedules nothing, the population holds still and so does μ.
    settled, outcome = first_policy, first
    for _ in range(5):
        if outcome.rescheduled == 0:
            break
        settled, next_outcome = await round_(settled, settled)
        assert next_outcome is not None
        outcome = next_outcome
    assert outcome.rescheduled == 0
    _, still = await round_(settled, settled)
    assert still is not None and not still.walked
    # The last round's μ is this one's, but the last walk's was 5% away.
    assert settled.mu is not None
    drifted = dataclasses.replace(settled, mu=settled.mu * 1.05)
    _, again = await round_(settled, drifted)
    assert again is not None and again.walked


async def test_derived_budget_counts_every_live_daemon(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    try:
        await populate(pool, hosts=HOSTS)
        settings = default_settings(budget_per_day=None, concurrency=4, politeness_delay=2.0)
        alone = await fleet_budget(pool, settings)
        assert alone == pytest.approx(derived_budget_per_day(np.full(HOSTS, 2.0), 4))
        for i in range(3):
            await pool.execute("INSERT INTO daemons (owner, concurrency) VALUES ($1, 4)", f"d{i}")
        await pool.execute(
            "INSERT INTO daemons (owner, concurrency, heartbeat_at) "
            "VALUES ('dead', 100, now() - interval '1 hour')"
        )
        fleet = await fleet_budget(pool, settings)
        assert fleet == pytest.approx(derived_budget_per_day(np.full(HOSTS, 2.0), 12))
    finally:
        await pool.close()


def test_replan_keeps_a_periodic_pages_alignment() -> None:
    day = SECONDS_PER_DAY
    now = 1_000 * day
    record = dataclasses.replace(
        UrlRecord(url_id=1, url="http://127.0.0.2/p"),
        state="active",
        last_fetched_at=now - 0.25 * day,
        periodic=PeriodicModel(1.0, 0.5, 0.01, 0.0),
    )
    policy = dataclasses.replace(POLICY, mu=1e-3, prior=GammaPrior(1.0, 1.0))
    schedule = replanned(record, policy, now)
    # A daily update at phase 0.5 day: the next fetch follows the next update, not last + 1/f.
    assert schedule.next_fetch_at >= now
    phase = (schedule.next_fetch_at / day) % 1.0
    assert 0.5 <= phase < 0.6, phase


async def test_a_small_sparse_population_is_read_whole_every_round(db_url: str) -> None:
    """After most of the frontier was removed, the live URLs are few and scattered over a wide
    key range: the sample's estimate of them (random starts per stratum) varied from round to
    round, and the budget with it (QA: 77 to 195 live URLs estimated for ~200). A population no
    larger than the sample is read whole: the same exact figures every round."""
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    try:
        await populate(pool, hosts=100)  # 5,000 URLs
        await pool.execute("DELETE FROM urls WHERE (id * 7919) % 100 >= 6")  # ~300 left
        live = await pool.fetchval("SELECT count(*) FROM urls")
        assert 200 <= live <= 400
        for seed in range(6):
            sample = await read_sample(pool, 1_000, np.random.default_rng(seed))
            assert sample.population == live
            assert sample.host_ids.size == live
        # Larger than the sample: still the stratified estimate, from about `size` rows.
        sample = await read_sample(pool, 100, np.random.default_rng(0))
        assert sample.host_ids.size <= 150
        assert sample.population == pytest.approx(live, rel=0.5)
    finally:
        await pool.close()


async def test_the_planners_walk_is_planned_for_each_chunk(db_url: str) -> None:
    """The walk's statements carry 2,000-row arrays. After five executions PostgreSQL may
    switch a prepared statement to a generic plan, blind to the arrays' sizes: that made each
    chunk of the walk 20 times slower (42 ms to 870 ms), so a round beside fetching took the
    fetch loop's database time. The planner's connections plan every execution."""
    pool = await planner_pool(db_url)
    try:
        await populate(pool)  # 20,000 URLs: ten chunks of the walk
        assert await pool.fetchval("SHOW plan_cache_mode") == "force_custom_plan"
        policy = dataclasses.replace(POLICY, mu=1.0)
        assert await reschedule(pool, policy) > 5 * RESCHEDULE_CHUNK
        plans = []
        async with pool.acquire() as a, pool.acquire() as b:  # both of its connections
            for conn in (a, b):
                plans += await conn.fetch(
                    "SELECT generic_plans, custom_plans FROM pg_prepared_statements "
                    "WHERE statement = $1", PLAIN_QUERIES["reschedule_urls"],
                )
        assert sum(p["custom_plans"] for p in plans) >= 6  # past the switch to generic
        assert sum(p["generic_plans"] for p in plans) == 0, plans
    finally:
        await pool.close()
