"""The real daemon with a budget on the demo web: it learns the rates and spends the budget.

After warm-up, URLs that change faster are fetched more often up to the optimum's turning
point, and the daemon's fetch rate matches ``CRAWLER_BUDGET_PER_DAY`` within 10%.
"""

from __future__ import annotations

import asyncio
import time

import asyncpg
import numpy as np
import pytest
from daemon import daemon_env, start_daemon, stop_daemon

from crawler.core.budget import plan_population
from crawler.db import frontier
from crawler.demo.processes import PoissonProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(240)

SITES = 5
PAGES_PER_SITE = 8
BUDGET_PER_SECOND = 12.0
RUN_SECONDS = 45.0
WARMUP_SECONDS = 18.0


def true_rates_per_second() -> list[float]:
    """Mean change intervals log-spaced from 1.5 s to 400 s, interleaved across sites."""
    n = SITES * PAGES_PER_SITE
    return list(1.0 / np.geomspace(1.5, 400.0, n))


def sites(rates: list[float]) -> list[SiteSpec]:
    specs = []
    for s in range(SITES):
        pages = tuple(
            PageSpec(f"/p{i}", real=PoissonProcess(rate_per_second=rates[i]), seed=f"b{i}")
            for i in range(s, len(rates), SITES)
        )
        specs.append(SiteSpec(f"site{s}", pages))
    return specs


async def test_daemon_spends_budget_on_the_right_pages(db_url: str) -> None:
    rates = true_rates_per_second()
    web = DemoWeb(sites(rates))
    await web.start()
    path_rate = {f"/p{i}": r for i, r in enumerate(rates)}
    env = daemon_env(
        db_url, budget_per_day=str(BUDGET_PER_SECOND * 86400), planner_interval="3",
        min_interval="0.25", max_interval="60", default_interval="3", politeness_delay="0.02",
        poll_interval="0.05", claim_urls_per_host="4",
    )
    try:
        pool = await asyncpg.create_pool(db_url)
        await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
        started = time.time()
        proc = await start_daemon(env)
        await asyncio.sleep(RUN_SECONDS)
        out = await stop_daemon(proc)
        rows = await pool.fetch(
            "SELECT u.url, count(*) AS n FROM observations o JOIN urls u ON u.id = o.url_id "
            "WHERE o.fetched_at >= to_timestamp($1) AND o.fetched_at < to_timestamp($2) "
            "GROUP BY u.url", started + WARMUP_SECONDS, started + RUN_SECONDS - 1.0,
        )
        mu = await pool.fetchval("SELECT mu FROM plans ORDER BY version DESC LIMIT 1")
        await pool.close()
    finally:
        await web.stop()
    assert proc.returncode == 0, out[-3000:]
    assert mu is not None and mu > 0

    window = RUN_SECONDS - 1.0 - WARMUP_SECONDS
    counts = {row["url"].split("/", 3)[3]: row["n"] for row in rows}
    total_per_second = sum(counts.values()) / window
    assert abs(total_per_second - BUDGET_PER_SECOND) <= 0.1 * BUDGET_PER_SECOND, (
        total_per_second, out[-2000:])

    # The optimum with the true rates: its fetch rate rises with λ up to a turning point.
    lam = np.array([path_rate["/" + p] for p in sorted(counts)]) * 86400
    fetched = np.array([counts[p] for p in sorted(counts)], dtype=float)
    oracle = plan_population(lam, np.ones_like(lam), BUDGET_PER_SECOND * 86400,
                             min_interval_days=0.25 / 86400, max_interval_days=60 / 86400)
    turning = lam[np.argmax(oracle.fetch_rates_per_day)]
    below = lam <= turning
    assert below.sum() >= 10
    order = np.argsort(lam[below])
    # Rank correlation between true change rate and fetches, below the turning point.
    ranks_lam = np.argsort(np.argsort(lam[below][order]))
    ranks_fetch = np.argsort(np.argsort(fetched[below][order]))
    spearman = np.corrcoef(ranks_lam, ranks_fetch)[0, 1]
    print(f"budget {BUDGET_PER_SECOND}/s achieved {total_per_second:.2f}/s; "
          f"turning point at λ={turning / 86400:.3f}/s; spearman below it {spearman:.2f}")
    pairs = list(zip(lam[below][order] / 86400, fetched[below][order], strict=True))
    assert spearman > 0.7, (spearman, pairs)
