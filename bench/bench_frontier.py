"""The frontier at size: seeding, claim + record without HTTP, claim and idle-wake latency,
a planner round, and the database's size per URL and per observation.

Run: .venv/bin/python bench/bench_frontier.py [--sizes 100000:10000,1000000:100000]
         [--no-planner | --planner-walk] [--record-seconds 20] [--database-url postgresql://...]

Each size is URLS:HOSTS. For each, a scratch database is created on the server and dropped
afterwards: the embedded PostgreSQL, started for the run, unless --database-url or
CRAWLER_TEST_DATABASE_URL names another. 10% of hosts are leased by another daemon and 10%
backed off, as in a busy fleet.
Claim + record runs twice on the same due work (one URL in ten): with the old path, one
``record_fetch`` statement (one commit) per fetch and one ``release_host`` per host, and with
the daemon's recorder (``crawler.daemon.recorder``), which writes many hosts' fetches in one
statement, each host given back with its last fetch; it prints both rates and their ratio.
Then the recorder's loop runs in one process per CPU at once, as ``crawler run`` runs its fetch
processes by default: that rate is the daemon's (issue 13 asks 20,000 URLs/s). A phase ends
after --record-seconds or when the due work runs out.
After the last size a table compares claim and idle-wake latency with the first size's (issue
13 asks 10^7 URLs within 1.5x of 10^5). The planner round runs in a process of its own, as
the daemon's does, and reports the time to solve μ and that process's peak RSS (issue 13 asks
at most 10 s and 1 GB at 10^7); it stops before the re-plan walk, which is paced background
work (about an hour at 10^7), unless --planner-walk. --no-planner skips the round.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import statistics
import time
import uuid
from collections.abc import Callable
from dataclasses import replace

import asyncpg
import numpy as np
import uvloop
from scratch import add_database_url, server_url, with_database

from crawler.core.backoff import HostHealth
from crawler.core.model import FetchResult, Observation, Outcome, UrlRecord
from crawler.core.patterns import EVERY_URL
from crawler.core.planning import PlannerOutcome
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, Transition, transition
from crawler.daemon import heap
from crawler.daemon.planner import solve_once
from crawler.daemon.processes import default_processes
from crawler.daemon.recorder import Recorder
from crawler.db import frontier, migrate, queries
from crawler.db.planning import planner_pool
from crawler.settings import default_settings

POLICY = SchedulePolicy(default_settings(
    schedule="uniform", default_interval=86400.0, simhash_threshold=6, max_outlinks=100,
    max_depth=3,
))
LATENCY_SAMPLES = 1000  # per figure: the p99 is the 10th slowest
BODY = ("<html><body><p>" + "words of a page " * 30 + "</p></body></html>").encode()


def percentiles(samples: list[float]) -> str:
    ms = sorted(s * 1000 for s in samples)
    return (f"p50 {statistics.median(ms):.2f} ms, "
            f"p99 {ms[min(len(ms) - 1, int(0.99 * len(ms)))]:.2f} ms")


def fetch_maker() -> Callable[[UrlRecord], Transition]:
    """A fetch of a claimed URL as the worker records it, built by copying one real 200's
    transition onto the URL: the bench measures claiming and recording, not parsing (see
    ``transition_cost``), so that both record paths get the same, cheap transitions.

    Built field by field rather than by ``dataclasses.replace`` (10 us a fetch, an eighth of
    the bench's Python per URL), and one observation serves every fetch of the same
    millisecond (no URL is fetched twice in one): this stand-in is not what is timed."""
    template: Transition | None = None
    observation: Observation | None = None
    observation_at = 0.0

    def make(record: UrlRecord) -> Transition:
        nonlocal template, observation, observation_at
        now = time.time()
        if template is None:
            result = FetchResult(now, 0.01, Outcome.OK, status=200, body=BODY,
                                 content_type="text/html")
            template = transition(record, result, HostContext(HostHealth(), 0.0, now), POLICY,
                                  url_filter=EVERY_URL, now=now, rng_value=0.5)
        if observation is None or now - observation_at > 0.001:
            observation = replace(template.observation, fetched_at=now)
            observation_at = now
        t = template
        return Transition(
            record,
            replace(t.record, url_id=record.url_id, url=record.url, host_id=record.host_id),
            observation, t.schedule, t.host, t.redirect_to, t.seed, t.window, t.event,
        )

    return make


def transition_cost(records: list[UrlRecord]) -> float:
    """Seconds of CPU per fetch that a real 200's transition (parse, simhash, schedule) costs."""
    started = time.perf_counter()
    for record in records:
        now = time.time()
        result = FetchResult(now, 0.01, Outcome.OK, status=200, body=BODY,
                             content_type="text/html")
        transition(record, result, HostContext(HostHealth(), 0.0, now), POLICY,
                   url_filter=EVERY_URL, now=now, rng_value=0.5)
    return (time.perf_counter() - started) / max(1, len(records))


async def record_claim_single(pool: asyncpg.Pool, claim: frontier.HostClaim,
                              make: Callable[[UrlRecord], Transition]) -> int:
    """The old path: one record_fetch statement (one transaction) per fetch, then release."""
    for record in claim.urls:
        await frontier.record_fetch(pool, make(record), claim.lease)
    await frontier.release_host(pool, claim.lease)
    return len(claim.urls)


async def record_claim_batched(recorder: Recorder, claim: frontier.HostClaim,
                               make: Callable[[UrlRecord], Transition]) -> int:
    """The worker's path: each fetch through the recorder (batched with other hosts'), the
    last one giving the host back (a host without URLs is released, batched too)."""
    for record in claim.urls:
        await recorder.record(make(record), claim.lease, release=record is claim.urls[-1])
    if not claim.urls:
        await recorder.release(claim.lease)
    return len(claim.urls)


async def claim_and_record(
    pool: asyncpg.Pool, seconds: float, *, batched: bool, claim_hosts: int, in_flight: int,
) -> tuple[int, float, float, str]:
    """Claim due hosts and record one fetch of each claimed URL, hosts concurrently as the
    daemon drains them (up to ``in_flight`` hosts at once), for ``seconds``. Returns URLs
    recorded, seconds, seconds spent waiting for claims, and the batches written."""
    make = fetch_maker()
    recorder = Recorder(pool)
    owner = f"bench-{uuid.uuid4().hex[:6]}"
    recorded = 0
    claiming = 0.0
    tasks: set[asyncio.Task[int]] = set()
    failed: list[asyncio.Task[int]] = []
    wake = asyncio.Event()

    def finished(task: asyncio.Task[int]) -> None:
        # As the worker keeps its host tasks (crawler.daemon.worker): a done callback and a
        # wake-up, not asyncio.wait over thousands of tasks (each call visits them all).
        nonlocal recorded
        tasks.discard(task)
        if task.cancelled() or task.exception() is not None:
            failed.append(task)
        else:
            recorded += task.result()
        wake.set()

    started = time.perf_counter()
    exhausted = False
    while time.perf_counter() - started < seconds and not (exhausted and not tasks):
        if failed:
            failed[0].result()  # raises the host task's error
        free = in_flight - len(tasks)
        if free > 0 and not exhausted:
            t0 = time.perf_counter()
            claims = await frontier.claim(pool, owner, max_hosts=min(free, claim_hosts),
                                          urls_per_host=8, lease_seconds=600)
            claiming += time.perf_counter() - t0
            exhausted = not claims
            for c in claims:
                task = asyncio.create_task(
                    record_claim_batched(recorder, c, make) if batched
                    else record_claim_single(pool, c, make)
                )
                tasks.add(task)
                task.add_done_callback(finished)
            if len(claims) == min(free, claim_hosts):
                continue
        if tasks:
            wake.clear()
            await wake.wait()
    elapsed = time.perf_counter() - started
    while tasks:
        wake.clear()
        await wake.wait()
    if failed:
        failed[0].result()
    batches = recorder.records.batches
    shape = (f"{batches:,} record batches of {recorder.records.items / batches:.0f} fetches"
             if batches else "one statement per fetch")
    return recorded, elapsed, claiming, shape


def _claim_and_record_child(
    db_url: str, seconds: float, claim_hosts: int, in_flight: int,
    start: multiprocessing.synchronize.Barrier, results: multiprocessing.queues.Queue[object],
) -> None:
    """One fetch process's claim + record loop (``claim_and_record``), started with the
    others at the barrier; puts (URLs, seconds)."""

    async def run() -> tuple[int, float]:
        pool = await asyncpg.create_pool(db_url, min_size=2, max_size=8)
        heap.settle()  # as a fetch process does once started
        try:
            await asyncio.to_thread(start.wait)
            recorded, elapsed, _, _ = await claim_and_record(
                pool, seconds, batched=True, claim_hosts=claim_hosts, in_flight=in_flight)
            return recorded, elapsed
        finally:
            await pool.close()

    try:
        results.put(uvloop.run(run()))
    except BaseException as exc:  # said to the parent, which would otherwise wait forever
        start.abort()
        results.put(exc)
        raise


async def claim_and_record_processes(
    db_url: str, seconds: float, processes: int, *, claim_hosts: int, in_flight: int,
) -> tuple[int, float]:
    """``claim_and_record`` with the recorder in ``processes`` processes at once, as
    ``crawler run`` runs one fetch process per CPU (``--processes``), each with its share of
    the hosts in flight: URLs recorded by all, and the longest one's seconds. Spawned, not
    forked: this process has an event loop and connections a fork would copy."""
    context = multiprocessing.get_context("spawn")
    start = context.Barrier(processes + 1)
    results: multiprocessing.queues.Queue[object] = context.Queue()
    children = [
        context.Process(target=_claim_and_record_child, daemon=True, args=(
            db_url, seconds, claim_hosts, max(1, in_flight // processes), start, results))
        for _ in range(processes)
    ]
    for child in children:
        child.start()
    try:
        await asyncio.to_thread(start.wait, 300)  # every child imported and connected
        outcomes = [await asyncio.to_thread(results.get, True, seconds + 600)
                    for _ in children]
    finally:
        for child in children:
            await asyncio.to_thread(child.join, 30)
            if child.is_alive():
                child.kill()
    failed = [o for o in outcomes if isinstance(o, BaseException)]
    if failed:
        raise RuntimeError("a claim + record process failed") from failed[0]
    done = [o for o in outcomes if isinstance(o, tuple)]
    return sum(r for r, _ in done), max(e for _, e in done)


def peak_rss_mb() -> float:
    """This process's peak resident set (VmHWM), in MB. Not ``ru_maxrss``: that survives
    ``execve``, so a spawned child would report the RSS of the parent it was forked from."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


class _Solved(Exception):
    """Ends a planner round once μ is solved and stored, before its re-plan walk."""


def _planner_child(db_url: str, n_urls: int, walk: bool,
                   results: multiprocessing.queues.Queue[object]) -> None:
    """One planner round in a process of its own, as the daemon runs it
    (``crawler.daemon.planner.PlannerProcess``), so that its peak RSS is the planner's, imports
    included, and not the bench's (which held the seed's rows). Puts the line to print."""

    async def run() -> str:
        pool = await planner_pool(db_url)  # its own connections, as the planner's
        solved: list[tuple[PlannerOutcome, float, float]] = []

        def on_solved(_policy: object, outcome: PlannerOutcome) -> None:
            solved.append((outcome, time.perf_counter(), peak_rss_mb()))
            if not walk:
                raise _Solved

        try:
            _, walked = await solve_once(
                pool, SchedulePolicy(default_settings(budget_per_day=n_urls / 2.0,
                                                      concurrency=32, politeness_delay=1.0)),
                window_seconds=60.0, round_seconds=0.0, rng=np.random.default_rng(1),
                on_solved=on_solved,
            )
        except _Solved:
            walked = None
        finally:
            await pool.close()
        outcome, solved_at, rss = solved[0]
        line = (f"planner round (a process of its own): solved in {outcome.solve_seconds:.1f} s "
                f"on a sample of {outcome.sampled:,} (population ~{outcome.population:,.0f}), "
                f"mu {outcome.mu:.4g}; peak RSS at the solve {rss:.0f} MB")
        if walked is not None:
            line += (f"; the re-plan walk rescheduled {walked.rescheduled:,} URLs in "
                     f"{time.perf_counter() - solved_at:.1f} s more, peak RSS "
                     f"{peak_rss_mb():.0f} MB")
        else:
            line += " (re-plan walk skipped: --planner-walk runs it)"
        return line

    try:
        results.put(uvloop.run(run()))
    except BaseException as exc:  # said to the parent, which would otherwise wait forever
        results.put(exc)
        raise


def planner_round(db_url: str, n_urls: int, walk: bool) -> str:
    """``_planner_child`` spawned and waited for: the line it reports."""
    context = multiprocessing.get_context("spawn")
    results: multiprocessing.queues.Queue[object] = context.Queue()
    child = context.Process(target=_planner_child, args=(db_url, n_urls, walk, results))
    child.start()
    try:
        outcome = results.get(True, 24 * 3600.0)
    finally:
        child.join(30)
        if child.is_alive():
            child.kill()
    if isinstance(outcome, BaseException):
        raise RuntimeError("the planner round failed") from outcome
    assert isinstance(outcome, str)
    return outcome


async def record_only(pool: asyncpg.Pool, seconds: float, *, batched: bool,
                      in_flight: int) -> tuple[int, float]:
    """The record side alone: claim due hosts first (not timed), then record their fetches
    and release them, ``in_flight`` hosts at once, for at most ``seconds``. URLs, seconds."""
    make = fetch_maker()
    owner = f"bench-{uuid.uuid4().hex[:6]}"
    claims: list[frontier.HostClaim] = []
    while len(claims) < 20_000:
        more = await frontier.claim(pool, owner, max_hosts=1000, urls_per_host=8,
                                    lease_seconds=600)
        if not more:
            break
        claims.extend(more)
    recorder = Recorder(pool)
    queue = iter(claims)
    recorded = 0
    started = time.perf_counter()

    async def drain() -> None:
        nonlocal recorded
        for claim in queue:
            if time.perf_counter() - started > seconds:
                break
            done = await (record_claim_batched(recorder, claim, make) if batched
                          else record_claim_single(pool, claim, make))
            recorded += done  # after the await: other drains add meanwhile

    await asyncio.gather(*(drain() for _ in range(in_flight)))
    elapsed = time.perf_counter() - started
    await frontier.release_owner(pool, owner)
    return recorded, elapsed


async def make_due_again(pool: asyncpg.Pool) -> None:
    """The URLs due at the start (one in ten) due again, so each record phase has the same
    work."""
    await pool.execute("UPDATE urls SET next_fetch_at = now() - interval '1 second' "
                       "WHERE id % 10 = 0")
    await pool.execute("UPDATE hosts SET next_due_at = (SELECT min(next_fetch_at) FROM urls "
                       "WHERE host_id = hosts.id)")
    await pool.execute("VACUUM ANALYZE urls, hosts")


async def plan_buffers(pool: asyncpg.Pool, query: str, *args: object) -> int:
    """Shared buffers one run of the statement touches (EXPLAIN ANALYZE, rolled back)."""
    async with pool.acquire() as conn:
        tx = conn.transaction()
        await tx.start()
        try:
            raw = await conn.fetchval(
                "EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) " + queries.statements(conn)[query],
                *args)
        finally:
            await tx.rollback()
    plan = (json.loads(raw) if isinstance(raw, str) else raw)[0]["Plan"]
    return int(plan["Shared Hit Blocks"] + plan["Shared Read Blocks"])


def quantile_ms(samples: list[float], q: float) -> float:
    ms = sorted(s * 1000 for s in samples)
    return ms[min(len(ms) - 1, int(q * len(ms)))]


async def main(url: str, sizes: list[tuple[int, int]], planner: bool,
               record_seconds: float, walk: bool = False) -> None:
    rows = []
    for n_urls, n_hosts in sizes:
        rows.append(await run_size(url, n_urls, n_hosts, planner, record_seconds, walk))
    print("\nURLs        hosts     claim p50/p99 ms   wake p50/p99 ms   claim p99 vs first")
    for r in rows:
        print(f"{r['urls']:>10,} {r['hosts']:>9,}   {r['claim_p50']:6.2f} / {r['claim_p99']:6.2f}"
              f"    {r['wake_p50']:6.2f} / {r['wake_p99']:6.2f}"
              f"    {r['claim_p99'] / rows[0]['claim_p99']:.2f}x")


async def run_size(url: str, n_urls: int, n_hosts: int, planner: bool,
                   record_seconds: float, walk: bool) -> dict[str, float]:
    figures: dict[str, float] = {"urls": n_urls, "hosts": n_hosts}
    admin = await asyncpg.connect(url)
    name = f"crawler_bench_frontier_{uuid.uuid4().hex[:8]}"
    await admin.execute(f'CREATE DATABASE "{name}"')
    db_url = with_database(url, name)
    try:
        await migrate.upgrade(db_url)
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=8)
        per_host = max(1, n_urls // n_hosts)
        urls = [(f"http://h{h}.bench.example/p{i}", 1.0)
                for h in range(n_hosts) for i in range(per_host)]
        started = time.perf_counter()
        await frontier.seed(pool, urls, time.time() - 1)
        seed_seconds = time.perf_counter() - started
        del urls
        print(f"seed: {n_urls:,} URLs on {n_hosts:,} hosts in {seed_seconds:.1f} s "
              f"({n_urls / seed_seconds:,.0f} URLs/s)")
        # Most URLs were fetched and are not due; 10% of hosts leased elsewhere, 10% backed off.
        await pool.execute(
            "UPDATE urls SET state = 'active', last_fetched_at = now() - interval '1 hour', "
            "next_fetch_at = now() + random() * interval '1 day', fetch_rate_per_day = 1, "
            "change_rate_per_day = 0.5, intervals_observed = 3, unchanged_days = 1, "
            "changed_intervals_days = '{0.5}' WHERE id % 10 <> 0"
        )
        await pool.execute(
            "UPDATE hosts SET next_due_at = (SELECT min(next_fetch_at) FROM urls "
            "WHERE host_id = hosts.id)"
        )
        await pool.execute(
            "UPDATE hosts SET lease_owner = 'other', lease_expires_at = now() + interval "
            "'1 hour' WHERE id % 10 = 1"
        )
        await pool.execute(
            "UPDATE hosts SET backoff_until = now() + interval '1 hour', "
            "consecutive_failures = 3 WHERE id % 10 = 2"
        )
        await pool.execute("VACUUM ANALYZE")
        # The set-up's writes flushed before timing: a checkpoint in the middle of the samples
        # is what a p99 of a few hundred samples otherwise measures.
        await pool.execute("CHECKPOINT")

        claim_latency: list[float] = []
        for _ in range(LATENCY_SAMPLES):
            t0 = time.perf_counter()
            claims = await frontier.claim(pool, "probe", max_hosts=16, urls_per_host=16,
                                          lease_seconds=600)
            claim_latency.append(time.perf_counter() - t0)
            for c in claims:
                await frontier.release_host(pool, c.lease)
        wake_latency: list[float] = []
        for _ in range(LATENCY_SAMPLES):
            t0 = time.perf_counter()
            await frontier.earliest_due(pool)
            wake_latency.append(time.perf_counter() - t0)
        print(f"claim (16 hosts x 16 URLs): {percentiles(claim_latency)}, "
              f"{await plan_buffers(pool, 'claim_due_work', 16, 'probe', 16, 600.0)} buffers")
        print(f"idle wake (earliest_due): {percentiles(wake_latency)}, "
              f"{await plan_buffers(pool, 'earliest_due')} buffers")
        figures.update(
            claim_p50=quantile_ms(claim_latency, 0.5), claim_p99=quantile_ms(claim_latency, 0.99),
            wake_p50=quantile_ms(wake_latency, 0.5), wake_p99=quantile_ms(wake_latency, 0.99),
        )

        probe = await frontier.claim(pool, "cost", max_hosts=200, urls_per_host=8,
                                     lease_seconds=600)
        cost = transition_cost([r for c in probe for r in c.urls])
        await frontier.release_owner(pool, "cost")
        rates: dict[bool, float] = {}
        for label, batched, claim_hosts, in_flight in (
            ("per-fetch statement (old)", False, 64, 64),
            ("batched recorder", True, 500, 2000),
        ):
            await make_due_again(pool)
            recorded, seconds, claiming, shape = await claim_and_record(
                pool, record_seconds, batched=batched, claim_hosts=claim_hosts,
                in_flight=in_flight,
            )
            rates[batched] = recorded / seconds
            print(f"claim + record without HTTP, {label}: {recorded:,} URLs in {seconds:.1f} s "
                  f"({rates[batched]:,.0f} URLs/s; claims of {claim_hosts} hosts x 8 URLs, "
                  f"{in_flight} hosts in flight, {claiming:.1f} s waiting for claims; {shape})")
        print(f"claim + record: batched / per-fetch = {rates[True] / rates[False]:.1f}x "
              f"(a real 200's transition adds {cost * 1e6:.0f} us of CPU per fetch, not counted)")
        # The daemon as `crawler run` starts it: one fetch process per CPU, sharing the
        # frontier through host leases; the figure issue 13's target is about.
        processes = default_processes()
        await make_due_again(pool)
        recorded, seconds = await claim_and_record_processes(
            db_url, record_seconds, processes, claim_hosts=500, in_flight=2000)
        in_processes = recorded / seconds
        print(f"claim + record without HTTP, batched recorder in {processes} processes (the "
              f"daemon's default, one per CPU): {recorded:,} URLs in {seconds:.1f} s "
              f"({in_processes:,.0f} URLs/s, {in_processes / rates[True]:.2f}x one process)")
        alone = {}
        for label, batched, in_flight in (("per-fetch statement (old)", False, 64),
                                          ("batched recorder", True, 2000)):
            await make_due_again(pool)
            recorded, seconds = await record_only(pool, record_seconds, batched=batched,
                                                  in_flight=in_flight)
            alone[batched] = recorded / seconds
            print(f"record alone (claimed beforehand), {label}: {recorded:,} URLs in "
                  f"{seconds:.1f} s ({alone[batched]:,.0f} URLs/s, {in_flight} hosts in flight)")
        print(f"record alone: batched / per-fetch = {alone[True] / alone[False]:.1f}x")
        figures.update(record_single=rates[False], record_batched=rates[True],
                       record_processes=in_processes)
        sizes = await pool.fetchrow(
            "SELECT pg_total_relation_size('urls') + pg_total_relation_size('hosts') AS urls, "
            "(SELECT count(*) FROM urls) AS n_urls, "
            "(SELECT sum(pg_total_relation_size(relid)) "  # partitioned: sum the months
            "FROM pg_partition_tree('observations')) AS obs, "
            "(SELECT count(*) FROM observations) AS n_obs"
        )
        print(f"database: {sizes['urls'] / max(sizes['n_urls'], 1):.0f} B per URL (urls + hosts "
              f"with indexes), {sizes['obs'] / max(sizes['n_obs'], 1):.0f} B per observation")
        if not planner:
            await pool.close()
            return figures

        await pool.close()
        print(await asyncio.to_thread(planner_round, db_url, n_urls, walk))
        return figures
    finally:
        await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        await admin.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--sizes", default="100000:10000,1000000:100000",
                        help="URLS:HOSTS[,URLS:HOSTS...], e.g. 10000000:1000000 for 10^7")
    parser.add_argument("--no-planner", action="store_true", help="skip the planner round")
    parser.add_argument("--planner-walk", action="store_true",
                        help="finish the planner round with its re-plan walk (an hour at 10^7)")
    parser.add_argument("--record-seconds", type=float, default=20.0)
    add_database_url(parser)
    args = parser.parse_args()
    sizes = [(int(u), int(h)) for u, h in (p.split(":") for p in args.sizes.split(","))]
    # On uvloop, as the daemon runs (crawler.cli.run_with_uvloop), and with its collector
    # settings (crawler.daemon.heap): the figures are its own.
    heap.settle()
    with server_url(args.database_url) as url:
        uvloop.run(main(url, sizes, not args.no_planner, args.record_seconds,
                        args.planner_walk))
