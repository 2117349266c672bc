"""Hints as evidence in the database: tests at fetch time, trust kept current.

``test_fetches`` runs in the transaction that records a batch of fetches: one statement
(``test_hints``) tests every hinted URL's pending fetch interval against its sources and
counts the results per (host, source) in ``hint_trust``; only when a row was counted, one more
(``assess_hint_trust``) stores the verdicts and moves the pages of a source whose trust changed.
The arrival of hints (a sitemap read, a ping) is SQL alone.
"""

from __future__ import annotations

import asyncio
import json
import math
from collections.abc import Sequence

import asyncpg
import numpy as np

from crawler.core.estimate import DEFAULT_PRIOR, GammaPrior
from crawler.core.hint_evidence import (
    AUDIT_CHANGES,
    STAMPED_NOW_SECONDS,
    UNPROVEN_PING_TESTS,
    assessed,
    counts_of,
    solve_sample_observed,
)
from crawler.core.hint_trust import null_changed_probability
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.observed import OBSERVED_OBJECTIVES
from crawler.core.planning import Sample
from crawler.core.schedule import SchedulePolicy, timing_model
from crawler.core.transition import Transition
from crawler.db import queries
from crawler.db.frontier import refresh_hosts
from crawler.db.queries import QUERIES


def _seconds(value: float | None) -> float | None:
    """A time for a float8 parameter: None stays None; ±inf is a timestamp to_timestamp takes."""
    if value is None:
        return None
    return value if math.isfinite(value) else (math.inf if value > 0 else -math.inf)


async def hinted(
    conn: asyncpg.Connection | asyncpg.Pool, transitions: Sequence[Transition]
) -> set[int]:
    """The url ids of ``transitions`` (fetches about to be recorded) whose URLs have hints: the
    only ones ``test_fetches`` needs. The claim said which (``UrlRecord.hinted``); the URLs it
    did not say of are looked up, in one probe. A URL that gets its first hint after its
    claim is tested from its next fetch on."""
    tested = [t for t in transitions if t.observation.changed is not None]
    found = {t.record.url_id for t in tested if t.before.hinted}
    unknown = [t for t in tested if t.before.hinted is None]
    if unknown:
        hosts = [t.record.host_id for t in unknown]
        rows = await conn.fetch(QUERIES["hinted_urls"], hosts,
                                [t.record.url_id for t in unknown], sorted(set(hosts)))
        found.update(r["url_id"] for r in rows)
    return found


async def test_fetches(
    conn: asyncpg.Connection, transitions: Sequence[Transition], *, max_interval_seconds: float,
    prior: GammaPrior = DEFAULT_PRIOR, policy: SchedulePolicy | None = None,
) -> list[tuple[int, str, str, str]]:
    """Test the hints of ``transitions`` (new fetches of URLs with hints just recorded in
    ``conn``'s open transaction); only fetches with a change verdict count. Each one's interval
    becomes its URL's pending test, with p0 per source (``null_changed_probability``); a page
    timed by its update clock (under ``policy``) is fetched just after its expected update,
    which tests nothing of a source, and gets none. Returns the (host, source, was, now) whose
    classification changed (their pages have moved already)."""
    tested = [t for t in transitions if t.observation.changed is not None]
    if not tested:
        return []
    hosts, urls = [t.record.host_id for t in tested], [t.record.url_id for t in tested]
    distinct = sorted(set(hosts))
    fetched = [t.observation.fetched_at for t in tested]
    # A test of the new interval only where there is one, and the page is not timed.
    starts = [
        _seconds(t.before.last_fetched_at)
        if policy is None or timing_model(t.before, policy) is None else None
        for t in tested
    ]
    sources = await conn.fetch(QUERIES["hint_sources_at_fetch"], hosts, urls, fetched)
    by_url = {t.record.url_id: (t, start) for t, start in zip(tested, starts, strict=True)}
    p0s = []
    for row in sources:
        t, start = by_url[row["url_id"]]
        if start is None:
            continue
        end = t.observation.fetched_at
        p0 = null_changed_probability(
            int(row["announced"]), (end - row["hints_since"]) / SECONDS_PER_DAY,
            (end - start) / SECONDS_PER_DAY, t.before.history,
        )
        p0s.append({"url_id": row["url_id"], "source": row["source"], "p0": p0})
    parameters = [max_interval_seconds, AUDIT_CHANGES, prior.shape, prior.rate]
    rows = await conn.fetch(
        QUERIES["test_hints"], hosts, urls, starts, fetched,
        [bool(t.observation.changed) for t in tested],
        [_seconds(t.schedule.next_fetch_at) for t in tested], distinct, parameters,
        json.dumps(p0s),
    )
    if not rows:
        return []
    verdicts = [(r, assessed(counts_of(r))) for r in rows]
    changed = await conn.fetch(
        QUERIES["assess_hint_trust"], [r["host_id"] for r, _ in verdicts],
        [r["source"] for r, _ in verdicts], [v.classification for _, v in verdicts],
        [v.precision for _, v in verdicts], [v.recall for _, v in verdicts],
        [v.false_alarm for _, v in verdicts], [v.reason for _, v in verdicts],
        sorted({r["host_id"] for r in rows}), parameters,
    )
    return [(r["host_id"], r["source"], r["was"], r["now"]) for r in changed]


# Rounds for the hosts a daemon's write held locked when their due times were refreshed.
REFRESH_ATTEMPTS = 5


async def record_claims(
    conn: asyncpg.Connection, urls: Sequence[str], hosts: Sequence[int], kinds: Sequence[str],
    claimed: Sequence[float], sources: Sequence[str], now: float,
) -> set[int]:
    """Record the dates sitemaps and feeds claimed (``record_url_hints``) and schedule what they
    announce, the hosts locked first in id order as a fetch's record locks them (a hint and a
    fetch of the same URL wait for each other instead of deadlocking). Returns the hosts whose
    URLs moved; ``refresh_due`` gives them their due times once this has committed."""
    distinct = sorted(set(hosts))
    async with conn.transaction():
        await conn.execute(QUERIES["indexnow_lock_hosts"], distinct)
        # The rows written reference only the hosts just locked, which no one can delete before
        # this commits: the foreign keys' per-row checks are skipped where the role allows it.
        if conn.get_server_version().major >= 15:
            await queries.fetchval(conn, "skip_redundant_checks")
        rows = await conn.fetch(
            QUERIES["record_url_hints"], list(urls), list(hosts), list(kinds), list(claimed),
            list(sources), now, distinct,
            [STAMPED_NOW_SECONDS, AUDIT_CHANGES, DEFAULT_PRIOR.shape, DEFAULT_PRIOR.rate],
        )
    return {r["host_id"] for r in rows}


async def refresh_due(conn: asyncpg.Connection, hosts: set[int]) -> None:
    """The due times of hosts whose URLs a hint moved, after the move committed: a daemon's
    release that read the URLs before it may have written an older one (as ``crawler recheck``
    and a ping do)."""
    waiting = set(hosts)
    for attempt in range(REFRESH_ATTEMPTS):
        await refresh_hosts(conn, waiting)
        if not waiting:
            return
        await asyncio.sleep(0.05 * (attempt + 1))


def ping_parameters() -> tuple[int, float, float]:
    """``indexnow_pinged``'s last parameters: the announced tests under which a host's pings
    are taken at their word, and the prior when no plan is stored."""
    return UNPROVEN_PING_TESTS, DEFAULT_PRIOR.shape, DEFAULT_PRIOR.rate


# Sampled URLs looked up per statement when the planner marks the complete ones.
SAMPLE_CHUNK = 10_000


async def observed_mu(
    pool: asyncpg.Pool, sample: Sample, rates: np.ndarray, budget_per_day: float,
    policy: SchedulePolicy, politeness_delay: float,
) -> tuple[float, int] | None:
    """The planner's μ over both kinds of pages: the sampled URLs a complete source
    observes are planned as completely observed (``solve_sample_observed``). Returns (μ, how
    many sampled pages were complete); None when there are none, or the objective is one the
    complete-observation optimum is not derived for (age, β-currency): the plan's μ is then
    the incomplete-observation one."""
    if sample.url_ids is None or sample.url_ids.size == 0:
        return None
    if policy.settings.objective not in OBSERVED_OBJECTIVES:
        return None
    prior = policy.prior
    complete: dict[int, float] = {}
    hosts = sample.host_ids.tolist()
    urls = sample.url_ids.tolist()
    for first in range(0, len(urls), SAMPLE_CHUNK):
        chunk_hosts = hosts[first:first + SAMPLE_CHUNK]
        rows = await pool.fetch(QUERIES["complete_in_sample"], chunk_hosts,
                                urls[first:first + SAMPLE_CHUNK], sorted(set(chunk_hosts)),
                                prior.shape, prior.rate)
        complete.update((r["url_id"], float(r["announced_rate"])) for r in rows)
    if not complete:
        return None
    mask = np.array([u in complete for u in urls], dtype=bool)
    complete_rates = np.array([complete.get(u, 0.0) for u in urls], dtype=np.float64)
    solved = await asyncio.to_thread(
        solve_sample_observed, sample, rates, mask, complete_rates, budget_per_day, policy,
        politeness_delay,
    )
    return solved.mu, int(mask.sum())
