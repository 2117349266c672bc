"""Hints as evidence in the daemon (issue 38): trust learned per (site, source) at fetch time,
and what a trusted, a doubted and an ignored source does to a page's schedule.

A loopback web (tests/hintsite.py) whose sitemap dates are right on one host, the moment of
reading on another, random on a third, crawled in rounds by the daemon's own worker and
sitemap reader on real PostgreSQL: the truthful host's dates become complete observations
after a handful of confirmations, the liars are ignored, a complete page waits for its
announcements (never past its longest interval) and is due as soon as one arrives, and when
the truthful host stops dating its changes its pages fall back to their own schedule at once.
The SQL twins of crawler.core.observed are checked against it.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import math
import time

import asyncpg
import pytest
from hintsite import PAGES, Crawl

from crawler.core.hint_evidence import assessed
from crawler.core.hint_trust import HintCounts, assess
from crawler.core.observed import complete_fetch_probability, hinted_fetch_time

pytestmark = pytest.mark.timeout(300)

HOUR = 3600.0
MAX_INTERVAL = 30 * 86400.0  # CRAWLER_MAX_INTERVAL's default, the worker's policy


def evens() -> list[int]:
    return list(range(0, PAGES, 2))


def odds() -> list[int]:
    return list(range(1, PAGES, 2))


async def learn(crawl: Crawl) -> None:
    """Rounds in which half the pages of every host change, alternately, until the truthful
    host's dates have been confirmed on both sides (changes announced, silences right)."""
    await crawl.start()
    for pages in (evens(), odds(), evens(), odds(), evens()):
        crawl.site.change(("truthful", "now", "random", "plain"), pages)
        await crawl.read_sitemaps()
        await crawl.fetch_all()


async def scenario(db_url: str) -> None:
    async with Crawl(db_url) as crawl:
        await learn(crawl)
        truthful = await crawl.trust("truthful")
        now = await crawl.trust("now")
        rand = await crawl.trust("random")
        assert truthful is not None and now is not None and rand is not None
        # The truthful host: every change announced, every silence right.
        assert truthful["classification"] == "complete", dict(truthful)
        assert truthful["hits"] >= 5 and truthful["quiet"] >= 5, dict(truthful)
        assert truthful["misses"] == 0 and truthful["false_alarms"] == 0, dict(truthful)
        counts = HintCounts(truthful["hits"], truthful["false_alarms"], truthful["misses"],
                            truthful["quiet"], truthful["expected_hinted"],
                            truthful["expected_silent"], truthful["dates"],
                            truthful["stamped_now"])
        assert assess(counts).classification == "complete"
        assert truthful["recall_mean"] == pytest.approx(assess(counts).recall)
        # "lastmod = now": found out by its dates, whatever its tests say.
        assert now["classification"] == "ignored", dict(now)
        assert now["stamped_now"] >= 0.9 * now["dates"] and now["dates"] >= 4, dict(now)
        assert "moment they were read" in assess(HintCounts(
            now["hits"], now["false_alarms"], now["misses"], now["quiet"],
            now["expected_hinted"], now["expected_silent"], now["dates"],
            now["stamped_now"])).reason
        # Random dates: its announcements never match the changes.
        assert rand["classification"] == "ignored", dict(rand)
        assert rand["hits"] == 0 and rand["misses"] > 0, dict(rand)
        # Pages last fetched before their source was trusted wait for its announcements all
        # the same: the blind fetch their incomplete schedule planned is put off.
        for url, row in (await crawl.rows("truthful")).items():
            assert row["next_fetch_at"].timestamp() > time.time() + 29 * 86400.0, url
        # No hints, no trust row, no hint state.
        assert await crawl.trust("plain") is None
        assert all(r["hints_since"] is None for r in (await crawl.rows("plain")).values())

        # One more round without changes: every truthful page has been fetched while its
        # source was complete, and waits for announcements, within the longest interval;
        # the liars' pages keep their own schedule (the worker's uniform hour).
        await crawl.fetch_all()
        for url, row in (await crawl.rows("truthful")).items():
            waited = row["next_fetch_at"].timestamp() - row["last_fetched_at"].timestamp()
            assert waited == pytest.approx(MAX_INTERVAL, abs=1.0), url
            assert row["planned_at"].timestamp() - row["last_fetched_at"].timestamp() == \
                pytest.approx(HOUR, abs=1.0)
        for name in ("now", "random", "plain"):
            for url, row in (await crawl.rows(name)).items():
                waited = row["next_fetch_at"].timestamp() - row["last_fetched_at"].timestamp()
                assert waited == pytest.approx(HOUR, abs=1.0), url

        # An announced change: the truthful page is due at once; the liars' are not.
        crawl.site.change(("truthful", "now", "random"), [1])
        started = time.time()
        await crawl.read_sitemaps()
        truthful_rows = await crawl.rows("truthful")
        assert truthful_rows[crawl.site.url("truthful", 1)]["next_fetch_at"].timestamp() \
            <= time.time()
        assert truthful_rows[crawl.site.url("truthful", 1)]["next_fetch_at"].timestamp() \
            >= started - 1.0
        for p in range(PAGES):
            if p != 1:
                row = truthful_rows[crawl.site.url("truthful", p)]
                assert row["next_fetch_at"].timestamp() > time.time() + 29 * 86400.0
        for name in ("now", "random"):
            row = (await crawl.rows(name))[crawl.site.url(name, 1)]
            waited = row["next_fetch_at"].timestamp() - row["last_fetched_at"].timestamp()
            assert waited == pytest.approx(HOUR, abs=1.0), name
        host_due = await crawl.pool.fetchval(
            "SELECT next_due_at FROM hosts WHERE id = crawler_host_id($1)",
            crawl.site.origin("truthful"))
        assert host_due.timestamp() <= time.time()

        # The truthful host stops dating its changes: its misses take the trust away, and
        # its pages fall back to their own schedule at once (not at their next fetch).
        crawl.site.silent = True
        await crawl.fetch_all()
        crawl.site.change(("truthful",), range(PAGES))
        await crawl.read_sitemaps()  # nothing new: the listing did not change
        await crawl.fetch_all(("truthful",))
        await crawl.fetch_all(("truthful",))  # tests the interval of the silent changes
        dropped = await crawl.trust("truthful")
        assert dropped is not None and dropped["misses"] >= 3, dict(dropped)
        assert dropped["classification"] != "complete", dict(dropped)
        for url, row in (await crawl.rows("truthful")).items():
            waited = row["next_fetch_at"].timestamp() - row["last_fetched_at"].timestamp()
            assert waited == pytest.approx(HOUR, abs=1.0), url


def test_trust_is_learned_per_site_and_source_and_schedules_announced_changes(
    db_url: str,
) -> None:
    asyncio.run(scenario(db_url))


async def overwritten(db_url: str) -> None:
    async with Crawl(db_url) as crawl:
        await learn(crawl)
        before = await crawl.trust("truthful")
        assert before is not None and before["classification"] == "complete", dict(before)
        # Page 1 changes and is fetched before the sitemap is read; it changes again, and the
        # read then dates only the second change: the interval of the first has no date in
        # it, and one after it. That is an overwritten date, not a miss.
        crawl.site.change(("truthful",), [1])
        await crawl.fetch_all(("truthful",))
        crawl.site.change(("truthful",), [1])
        await crawl.read_sitemaps()
        await crawl.fetch_all(("truthful",))
        after = await crawl.trust("truthful")
        assert after is not None, dict(before)
        assert after["misses"] == before["misses"] == 0, dict(after)
        assert after["classification"] == "complete", dict(after)
        # Silence with no later date is still a miss: the truthful host stops dating.
        crawl.site.silent = True
        crawl.site.change(("truthful",), [2])
        await crawl.fetch_all(("truthful",))
        await crawl.read_sitemaps()
        await crawl.fetch_all(("truthful",))
        silent = await crawl.trust("truthful")
        assert silent is not None and silent["misses"] == 1, dict(silent)


def test_a_last_change_date_overwritten_before_it_was_read_is_no_miss(db_url: str) -> None:
    asyncio.run(overwritten(db_url))


async def walked(db_url: str) -> None:
    from crawler.db.queries import fetch

    async with Crawl(db_url) as crawl:
        await learn(crawl)
        await crawl.fetch_all()
        # The planner's walk gives every page a blind fetch in an hour: a complete page keeps
        # waiting for its announcements, the others take it.
        soon = dt.datetime.now(dt.UTC) + dt.timedelta(hours=1)
        for name, waits in (("truthful", True), ("random", False)):
            rows = list((await crawl.rows(name)).values())
            await fetch(
                crawl.pool, "reschedule_urls", [r["id"] for r in rows], [soon] * len(rows),
                [24.0] * len(rows), [r["last_fetched_at"] for r in rows], [1.0] * len(rows),
                [r["host_id"] for r in rows])
            for before in rows:
                after = (await crawl.rows(name))[before["url"]]
                expected = before["next_fetch_at"] if waits else soon
                assert abs(after["next_fetch_at"] - expected) < dt.timedelta(seconds=1), name


def test_the_planners_walk_never_brings_a_complete_page_forward(db_url: str) -> None:
    asyncio.run(walked(db_url))


async def ignored(db_url: str) -> None:
    crawl = Crawl(db_url)
    crawl.settings = crawl.settings.model_copy(update={"hints": False})
    async with crawl:
        await learn(crawl)
        # The sitemaps were read and their URLs crawled, their dates left out.
        assert await crawl.pool.fetchval("SELECT count(*) FROM urls") == 4 * PAGES
        assert await crawl.pool.fetchval("SELECT count(*) FROM url_hints") == 0
        assert await crawl.pool.fetchval("SELECT count(*) FROM url_hint_state") == 0
        assert await crawl.trust("truthful") is None


def test_hints_off_reads_sitemaps_for_their_urls_only(db_url: str) -> None:
    asyncio.run(ignored(db_url))


async def twins(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        cases = [
            (0.0, 1.0, 2.0, 0.3, 0.9, 0.05), (0.0, 2.0, 0.5, 1.5, 0.6, 0.3),
            (0.0, 0.5, 10.0, 0.1, 0.99, 0.01), (1.0, 3.0, 0.2, 2.9, 0.5, 0.5),
            (0.0, 1.0, 0.0, 0.5, 0.9, 0.1), (0.0, 1.0, 3.0, 1.5, 0.8, 0.2),
        ]
        for last, planned, rate, hint, recall, false_alarm in cases:
            sql = await conn.fetchval(
                "SELECT crawler_hinted_fetch_time($1, $2, $3, $4, $5, $6)",
                last * 86400.0, planned * 86400.0, rate, hint * 86400.0, recall, false_alarm)
            python = hinted_fetch_time(last, planned, rate, hint, recall, false_alarm)
            assert sql / 86400.0 == pytest.approx(python, rel=1e-9, abs=1e-9)
        for rate, weight, mu, objective, low, high in [
            (2.0, 1.0, 0.8, "harmonic", 1 / 1440, 30.0), (0.1, 1.0, 0.01, "harmonic", 1.0, 30.0),
            (5.0, 2.0, 0.3, "freshness", 1 / 1440, 30.0), (5.0, 1.0, 0.3, "freshness", 0.1, 7.0),
            (0.0, 1.0, 1.0, "harmonic", 1 / 1440, 30.0), (3.0, 1.0, 0.0, "harmonic", 0.5, 30.0),
        ]:
            sql = await conn.fetchval(
                "SELECT crawler_complete_probability($1, $2, $3, $4, $5, $6)",
                rate, weight, mu, objective, low, high)
            python = complete_fetch_probability(rate, weight, mu, objective, low, high)
            assert sql == pytest.approx(python, rel=1e-12), (rate, weight, mu, objective)
            assert math.isfinite(sql)
            # Under a plan that solved mu over complete pages, the announcement's chance is
            # that probability; under one that did not, or with no plan, it is 1.
            announced = ("SELECT crawler_announced_fetch_probability($1, $2, $3, $4, $5, $6, "
                         "$7)")
            assert await conn.fetchval(
                announced, rate, weight, high * 86400.0, 40, mu, objective, low * 86400.0
            ) == pytest.approx(python, rel=1e-12)
            for sampled, plan_mu, plan_objective in [
                (0, mu, objective), (40, None, objective), (40, mu, "uniform"),
                (None, None, None),
            ]:
                assert await conn.fetchval(
                    announced, rate, weight, high * 86400.0, sampled, plan_mu,
                    plan_objective, low * 86400.0) == 1.0
        # hint_trust.classification (generated: the "now" rule over the tests' verdict) is
        # assess of all the counts, dates included.
        await conn.execute("INSERT INTO hosts (id, origin) VALUES (1, 'http://one.example')")
        for n, counts in enumerate([
            HintCounts(9, 0, 0, 9, 2.0, 2.0, 30, 2), HintCounts(9, 0, 0, 9, 2.0, 2.0, 30, 27),
            HintCounts(9, 0, 0, 9, 2.0, 2.0, 3, 3), HintCounts(9, 3, 3, 9, 1.0, 1.0, 10, 9),
            HintCounts(2, 2, 2, 2, 1.0, 1.0, 0, 0), HintCounts(9, 0, 0, 9, 2.0, 2.0, 10, 9),
        ]):
            stored = await conn.fetchval(
                "INSERT INTO hint_trust (host_id, source, hits, false_alarms, misses, quiet, "
                "expected_hinted, expected_silent, dates, stamped_now, tested_class) VALUES "
                "(1, $1, $2, $3, $4, $5, $6, $7, $8, $9, $10) RETURNING classification",
                f"s{n}", counts.hits, counts.false_alarms, counts.misses, counts.quiet,
                counts.expected_hinted, counts.expected_silent, counts.dates,
                counts.stamped_now, assessed(counts).classification)
            assert stored == assess(counts).classification, counts
    finally:
        await conn.close()


def test_the_sql_twins_of_the_observed_schedule_agree_with_it(db_url: str) -> None:
    asyncio.run(twins(db_url))


async def planned(db_url: str) -> None:
    from crawler.core.hint_evidence import solve_sample_observed
    from crawler.core.planning import fit_priors, sample_rates
    from crawler.core.schedule import SchedulePolicy
    from crawler.daemon.planner import solve_once
    from crawler.db.planning import read_sample
    from crawler.settings import default_settings

    async with Crawl(db_url) as crawl:
        await learn(crawl)
        await crawl.fetch_all()
        budget = 4 * PAGES * 6.0  # six fetches a day per page
        policy = SchedulePolicy(default_settings(
            objective="harmonic", default_interval=HOUR, budget_per_day=budget, concurrency=4,
            politeness_delay=0.0, planner_sample_urls=1_000,
        ))
        import numpy as np

        adopted, outcome = await solve_once(crawl.pool, policy, window_seconds=60.0,
                                            round_seconds=60.0, rng=np.random.default_rng(3))
        assert outcome is not None
        plan = await crawl.pool.fetchrow("SELECT * FROM plans ORDER BY version DESC LIMIT 1")
        # The truthful host's pages are planned as completely observed, under the same μ as
        # the others: the μ the planner stored is the one solve_observed gives on the sample.
        assert plan["complete_sampled"] == PAGES
        sample = await read_sample(crawl.pool, 1_000, np.random.default_rng(3))
        prior, host_priors = fit_priors(sample.histories)
        rates = sample_rates(sample, prior, host_priors)
        fitted = replace_policy(policy, prior, host_priors)
        rows = await crawl.pool.fetch(
            "SELECT s.url_id FROM url_hint_state AS s JOIN urls AS u ON u.id = s.url_id "
            "WHERE u.url = ANY($1)", crawl.site.urls("truthful"))
        truthful = {r["url_id"] for r in rows}
        assert sample.url_ids is not None
        complete = np.array([u in truthful for u in sample.url_ids.tolist()])
        assert int(complete.sum()) == PAGES
        announced = await crawl.pool.fetch(
            "SELECT s.url_id, ($2::float8 + count(DISTINCT h.claimed_at) FILTER ("
            "WHERE h.claimed_at > s.hints_since)) / ($3::float8 + extract(epoch FROM now() - "
            "s.hints_since)::float8 / 86400.0) AS rate FROM url_hint_state AS s "
            "JOIN url_hints AS h ON h.url_id = s.url_id AND h.host_id = s.host_id "
            "WHERE s.url_id = ANY($1) GROUP BY s.url_id, s.hints_since",
            list(truthful), prior.shape, prior.rate)
        by_url = {r["url_id"]: r["rate"] for r in announced}
        complete_rates = np.array([by_url.get(u, 0.0) for u in sample.url_ids.tolist()])
        observed = solve_sample_observed(sample, rates, complete, complete_rates, budget,
                                         fitted, 0.0)
        assert plan["mu"] == pytest.approx(observed.mu, rel=1e-3)
        assert adopted.mu == pytest.approx(plan["mu"])
        # The fetch processes read it with the plan: an announced change of a complete page
        # makes it due with the probability the optimum gives it (here p = 1: w / (μ λ) ≥ 1).
        p = await crawl.pool.fetchval(
            "SELECT crawler_complete_probability($1, 1.0, $2, 'harmonic', 60 / 86400.0, 30.0)",
            float(complete_rates[complete].max()), plan["mu"])
        assert p == pytest.approx(complete_fetch_probability(
            float(complete_rates[complete].max()), 1.0, plan["mu"], "harmonic", 60 / 86400.0,
            30.0))


def replace_policy(policy: object, prior: object, host_priors: object) -> object:
    from dataclasses import replace

    return replace(policy, prior=prior, host_priors=host_priors)  # type: ignore[type-var]


def test_the_planner_solves_one_multiplier_over_complete_and_incomplete_pages(
    db_url: str,
) -> None:
    asyncio.run(planned(db_url))


async def pings(db_url: str) -> None:
    from crawler.core.patterns import global_filter
    from crawler.daemon.indexnow import take_pinged
    from crawler.db import frontier

    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    assert pool is not None
    origin = "http://pinged.example"
    url = f"{origin}/news"
    everything = global_filter([], [])
    try:
        now = time.time()
        await frontier.seed(pool, [(url, 1.0)], now)
        await pool.execute(
            "UPDATE urls SET last_fetched_at = to_timestamp($2), next_fetch_at = to_timestamp($3),"
            " change_rate_per_day = 1.0 WHERE url = $1", url, now - 3 * HOUR, now + 21 * HOUR)

        async def due_at() -> float:
            value = await pool.fetchval("SELECT next_fetch_at FROM urls WHERE url = $1", url)
            return float(value.timestamp())

        async def trust(tested_class: str, hits: int, false_alarms: int, misses: int,
                        quiet: int) -> None:
            await pool.execute(
                "INSERT INTO hint_trust (host_id, source, hits, false_alarms, misses, quiet, "
                "tested_class, recall_mean, false_alarm_mean) VALUES (crawler_host_id($1), "
                "'ping', $2, $3, $4, $5, $6, $7, $8) ON CONFLICT (host_id, source) DO UPDATE "
                "SET hits = excluded.hits, false_alarms = excluded.false_alarms, "
                "misses = excluded.misses, quiet = excluded.quiet, "
                "tested_class = excluded.tested_class, recall_mean = excluded.recall_mean, "
                "false_alarm_mean = excluded.false_alarm_mean",
                origin, hits, false_alarms, misses, quiet, tested_class,
                (1 + hits) / (2 + hits + misses), (1 + false_alarms) / (2 + false_alarms + quiet))

        # Tested on announced intervals and found no better than chance: ignored.
        await trust("ignored", 3, 9, 2, 6)
        made_due, _ = await take_pinged(pool, [url], everything, now)
        assert made_due == 0
        assert await due_at() == pytest.approx(now + 21 * HOUR, abs=0.01)
        assert await pool.fetchval("SELECT count(*) FROM url_hints WHERE kind = 'ping'") == 1
        # Noisy: the first ping since the last fetch brings the fetch forward, as far as its
        # record warrants (crawler.core.observed.hinted_fetch_time), not to now.
        await trust("noisy", 12, 4, 6, 20)
        await pool.execute("DELETE FROM url_hints")
        made_due, _ = await take_pinged(pool, [url], everything, now + 1.0)
        assert made_due == 0
        moved = hinted_fetch_time((now - 3 * HOUR) / 86400, (now + 21 * HOUR) / 86400, 1.0,
                                  (now + 1.0) / 86400, 13 / 20, 5 / 26) * 86400
        assert now + 1.0 < moved < now + 21 * HOUR
        assert await due_at() == pytest.approx(moved, abs=0.01)
        # A second ping since that fetch moves nothing more.
        made_due, _ = await take_pinged(pool, [url], everything, now + 2.0)
        assert await due_at() == pytest.approx(moved, abs=0.01)
        # Complete: due at once, and the host with it.
        await trust("complete", 12, 0, 0, 20)
        made_due, _ = await take_pinged(pool, [url], everything, now + 3.0)
        assert made_due == 1
        assert await due_at() == pytest.approx(now + 3.0, abs=0.01)
        host_due = await pool.fetchval(
            "SELECT next_due_at FROM hosts WHERE id = crawler_host_id($1)", origin)
        assert host_due.timestamp() == pytest.approx(now + 3.0, abs=0.01)
    finally:
        await pool.close()


def test_pings_move_a_page_as_far_as_the_hosts_pings_are_trusted(db_url: str) -> None:
    asyncio.run(pings(db_url))
