"""Per-fetch record latency: the fenced, typed ``record_fetch`` against the old statement.

Run: .venv/bin/python bench/bench_record.py [--urls 2000] [--database-url postgresql://...]

The subject is the daemon's write: one fetch_record (``record_fetches`` with one item), under
the lease token (a host row locked until commit). The baseline, measured in the same run on the
same database, is the statement it replaced: the same three writes with 37 positional
parameters and no fencing. Prints p50/p90/p99 of both and their ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid

import asyncpg
from scratch import add_database_url, server_url, with_database

from crawler.core.backoff import HostHealth
from crawler.core.model import FetchResult, Outcome
from crawler.core.patterns import EVERY_URL
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, Transition, transition
from crawler.db import frontier, migrate
from crawler.settings import default_settings

BASELINE = """
WITH observation AS (
    INSERT INTO observations (
        url_id, fetched_at, outcome, status, bytes, duration_seconds, simhash, content_hash,
        simhash_distance, changed, content_changed, last_modified, error_kind, truncated,
        host_id
    )
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14,
            (SELECT host_id FROM urls WHERE id = $1))
    ON CONFLICT (url_id, fetched_at, host_id) DO NOTHING
    RETURNING id
),
url AS (
    UPDATE urls
    SET state = $15, next_fetch_at = $16,
        last_fetched_at = $33, last_status = $4, last_simhash = $17, last_content_hash = $18,
        etag = $19, last_modified = $20, fetch_count = $21, change_count = $22,
        consecutive_failures = $23, changed_intervals_days = $24, unchanged_days = $25,
        intervals_observed = $26, change_rate_per_day = $27, fetch_rate_per_day = $28,
        redirect_to = $29, change_brackets_days = $34, update_period_days = $35,
        update_phase_days = $36, update_jitter_days = $37
    WHERE id = $1
    RETURNING host_id
)
UPDATE hosts
SET next_request_at = $30, consecutive_failures = $31, backoff_until = $32
WHERE id = (SELECT host_id FROM url)
RETURNING (SELECT count(*) FROM observation) AS observations_written
"""

POLICY = SchedulePolicy(default_settings(
    schedule="uniform", simhash_threshold=6, max_outlinks=100, max_depth=3))


def baseline_args(t: Transition) -> list[object]:
    """The old order-coupled parameter list, for the baseline statement."""
    r, o, s, h = t.record, t.observation, t.schedule, t.host
    dtm = frontier.to_datetime
    return [
        r.url_id, dtm(o.fetched_at), o.outcome.value, o.status, o.size_bytes,
        o.duration_seconds, frontier.to_signed64(o.simhash), o.content_hash,
        o.simhash_distance, o.changed, o.content_changed, dtm(o.last_modified), o.error_kind,
        o.truncated, r.state.value, dtm(s.next_fetch_at), frontier.to_signed64(r.last_simhash),
        r.last_content_hash, r.etag, dtm(r.last_modified), r.fetch_count, r.change_count,
        r.consecutive_failures, list(r.history.changed_intervals_days),
        r.history.unchanged_days, r.history.fetches, s.change_rate_per_day,
        s.fetch_rate_per_day, t.redirect_to, dtm(h.next_request_at), h.consecutive_failures,
        dtm(h.backoff_until), dtm(r.last_fetched_at), list(r.change_brackets_days),
        None, None, None,
    ]


def percentiles(samples: list[float]) -> str:
    q = statistics.quantiles(samples, n=100)
    return f"p50 {q[49] * 1e3:6.3f} ms  p90 {q[89] * 1e3:6.3f} ms  p99 {q[98] * 1e3:6.3f} ms"


async def main(url: str, n_urls: int) -> None:
    admin = await asyncpg.connect(url)
    name = f"crawler_bench_record_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    db_url = with_database(url, name)
    try:
        await migrate.upgrade(db_url)
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
        hosts = max(1, n_urls // 10)
        urls = [(f"http://127.0.{h // 250}.{h % 250 + 2}/p{i}", 1.0)
                for h in range(hosts) for i in range(n_urls // hosts)]
        await frontier.seed(pool, urls, time.time() - 1)
        claims = await frontier.claim(pool, "bench", max_hosts=hosts, urls_per_host=1000,
                                      lease_seconds=3600)
        body = ("<html><body><p>" + "words of a page " * 300 + "</p></body></html>").encode()
        subject: list[float] = []
        baseline: list[float] = []
        for claim in claims:
            for i, record in enumerate(claim.urls):
                now = time.time()
                result = FetchResult(now, 0.05, Outcome.OK, status=200, body=body,
                                     content_type="text/html")
                t = transition(record, result, HostContext(HostHealth(), 1.0, now), POLICY,
                               url_filter=EVERY_URL, now=now, rng_value=0.5)
                started = time.perf_counter()
                if i % 2 == 0:  # alternate, so that drift in the machine's load hits both
                    await frontier.record_fetch(pool, t, claim.lease)
                    subject.append(time.perf_counter() - started)
                else:
                    await pool.fetchval(BASELINE, *baseline_args(t))
                    baseline.append(time.perf_counter() - started)
        await pool.close()
        print(f"record_fetch, {len(subject)} fetches (fenced, typed rows): {percentiles(subject)}")
        print(f"baseline, {len(baseline)} fetches (37 positional, unfenced): "
              f"{percentiles(baseline)}")
        ratio = statistics.median(subject) / statistics.median(baseline)
        print(f"median ratio fenced-typed / baseline: {ratio:.2f}")
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--urls", type=int, default=2000)
    add_database_url(parser)
    args = parser.parse_args()
    with server_url(args.database_url) as url:
        asyncio.run(main(url, args.urls))
