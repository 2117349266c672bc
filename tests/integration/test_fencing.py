"""Fenced leases against a real PostgreSQL: a write under a lease that expired or moved on is
refused whole, counted and never retried; transient conflicts (40P01, 40001) are retried."""

from __future__ import annotations

import asyncio
import time

import aiohttp
import aiohttp.web
import asyncpg
import pytest
from prometheus_client import CollectorRegistry
from test_frontier import urls_for

from crawler.core.backoff import HostHealth
from crawler.core.model import FetchResult, Outcome
from crawler.core.patterns import global_filter
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, transition
from crawler.daemon.recorder import Recorder
from crawler.daemon.worker import Worker
from crawler.db import frontier
from crawler.db.frontier import HostClaim, LeaseLost
from crawler.db.record import write_transition
from crawler.metrics import Metrics
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings

# Each test with the plain statements and with the Citus variants (conftest.statements).
pytestmark = pytest.mark.usefixtures("statements")

SETTINGS = Settings(total_timeout=5.0, lease_seconds=30.0, default_interval=3600.0)
POLICY = SchedulePolicy(SETTINGS)
URL_FILTER = global_filter(SETTINGS.include, SETTINGS.exclude)


def fetched(claim: HostClaim, url_index: int = 0):  # type: ignore[no-untyped-def]
    record = claim.urls[url_index]
    now = time.time()
    result = FetchResult(now, 0.01, Outcome.OK, status=200, content_type="text/html",
                         body=b"<html><body><p>words and more words</p></body></html>")
    return transition(record, result, HostContext(HostHealth(), 1.0, now), POLICY,
                      url_filter=URL_FILTER, now=now, rng_value=0.5)


async def counts(pool: asyncpg.Pool) -> tuple[int, int]:
    row = await pool.fetchrow(
        "SELECT (SELECT count(*) FROM observations) AS obs, "
        "(SELECT coalesce(sum(fetch_count), 0) FROM urls) AS fetches"
    )
    assert row is not None
    return row["obs"], row["fetches"]


async def test_a_claim_returns_a_lease_token_timed_by_the_database(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, urls_for(2, 2), time.time() - 1)
        claims = await frontier.claim(pool, "a", max_hosts=5, urls_per_host=5,
                                      lease_seconds=30)
        after = time.monotonic()
        assert {c.lease.epoch for c in claims} == {1}
        for c in claims:  # never later than the database's expiry
            assert 25.0 < c.lease.remaining_seconds(after) <= 30.0
        await frontier.release_owner(pool, "a")
        again = await frontier.claim(pool, "a", max_hosts=5, urls_per_host=5,
                                     lease_seconds=30)
        assert {c.lease.epoch for c in again} == {2}  # every claim moves the epoch on
    finally:
        await pool.close()


async def test_a_stale_lease_writes_nothing_and_the_new_holder_writes(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, urls_for(1, 2), time.time() - 1)
        [stale] = await frontier.claim(pool, "stopped", max_hosts=1, urls_per_host=5,
                                       lease_seconds=0.3)
        t_stale = fetched(stale)
        await asyncio.sleep(0.5)
        # Expired, not yet claimed again: refused by the database's clock alone.
        with pytest.raises(LeaseLost):
            await write_transition(pool, t_stale, stale.lease)
        [fresh] = await frontier.claim(pool, "live", max_hosts=1, urls_per_host=5,
                                       lease_seconds=30)
        assert fresh.lease.epoch == stale.lease.epoch + 1
        # Still refused, whole, with the new owner holding the host.
        with pytest.raises(LeaseLost):
            await write_transition(pool, t_stale, stale.lease)
        assert await counts(pool) == (0, 0)
        # The same owner under an older epoch is refused too (the token is owner + epoch).
        with pytest.raises(LeaseLost):
            await write_transition(pool, fetched(fresh), frontier.Lease(
                fresh.lease.host_id, "live", fresh.lease.epoch - 1, fresh.lease.expires_monotonic
            ))
        assert await write_transition(pool, fetched(fresh), fresh.lease)
        assert await counts(pool) == (1, 1)
        # Neither can the stale holder release, back off or store robots.txt for the host.
        assert not await frontier.release_host(pool, stale.lease)
        with pytest.raises(LeaseLost):
            await frontier.set_host_backoff(pool, stale.lease, time.time() + 3600)
        owner = await pool.fetchval("SELECT lease_owner FROM hosts")
        backoff = await pool.fetchval("SELECT backoff_until FROM hosts")
        assert (owner, backoff) == ("live", None)
        assert await frontier.release_host(pool, fresh.lease)
    finally:
        await pool.close()


async def test_windowed_and_extra_writes_roll_back_with_a_refused_record(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    ran: list[int] = []

    async def extra(conn: asyncpg.Connection, t: object) -> None:
        ran.append(1)

    try:
        await frontier.seed(pool, urls_for(1, 1), time.time() - 1)
        [claim] = await frontier.claim(pool, "a", max_hosts=1, urls_per_host=5,
                                       lease_seconds=0.3)
        t = fetched(claim)
        await asyncio.sleep(0.5)
        with pytest.raises(LeaseLost):
            await write_transition(pool, t, claim.lease, extra_writes=[extra])
        assert ran == [] and await counts(pool) == (0, 0)
    finally:
        await pool.close()


async def test_a_stale_lease_cannot_write_the_host_diagnostics(db_url: str) -> None:
    """The host's last error and its SSRF note are fenced like every other host write."""
    pool = await asyncpg.create_pool(db_url)
    try:
        await frontier.seed(pool, urls_for(1, 1), time.time() - 1)
        [stale] = await frontier.claim(pool, "stopped", max_hosts=1, urls_per_host=5,
                                       lease_seconds=30)
        # Another daemon took the host (as after a pause past the lease).
        await pool.execute("UPDATE hosts SET lease_owner = 'live', lease_epoch = lease_epoch + 1")
        live = frontier.Lease(stale.lease.host_id, "live", stale.lease.epoch + 1,
                              stale.lease.expires_monotonic)
        with pytest.raises(LeaseLost, match="host error"):
            await frontier.note_host_error(pool, stale.lease, "tls_expired", time.time())
        with pytest.raises(LeaseLost, match="refused note"):
            await frontier.set_host_refused(pool, stale.lease, "refused")
        diagnostics = "SELECT last_error_kind, refused_reason FROM hosts"
        assert tuple(await pool.fetchrow(diagnostics)) == (None, None)
        # The holder writes them: the note changes once, then stays.
        await frontier.note_host_error(pool, live, "tls_expired", time.time())
        assert await frontier.set_host_refused(pool, live, "refused")
        assert not await frontier.set_host_refused(pool, live, "refused")
        assert tuple(await pool.fetchrow(diagnostics)) == ("tls_expired", "refused")
        # Nor can the stale holder clear the note.
        with pytest.raises(LeaseLost, match="refused note"):
            await frontier.set_host_refused(pool, stale.lease, None)
        assert await pool.fetchval("SELECT refused_reason FROM hosts") == "refused"
        assert await frontier.set_host_refused(pool, live, None)
        assert not await frontier.set_host_refused(pool, live, None)
        assert await pool.fetchval("SELECT refused_reason FROM hosts") is None
        # An expired lease is refused by the database's clock, even with no other holder.
        await pool.execute("UPDATE hosts SET lease_expires_at = now() - interval '1 second'")
        with pytest.raises(LeaseLost):
            await frontier.note_host_error(pool, live, "timeout", time.time())
        with pytest.raises(LeaseLost):
            await frontier.set_host_refused(pool, live, None)
    finally:
        await pool.close()


class Pages:
    """A loopback server that counts requests."""

    def __init__(self) -> None:
        self.requests = 0

    async def handle(self, request: aiohttp.web.Request) -> aiohttp.web.Response:
        if request.path == "/robots.txt":
            return aiohttp.web.Response(status=404)
        self.requests += 1
        return aiohttp.web.Response(text="<html><body><p>page</p></body></html>",
                                    content_type="text/html")


async def test_a_worker_that_lost_its_lease_drops_the_result_and_stops(db_url: str) -> None:
    pages = Pages()
    app = aiohttp.web.Application()
    app.router.add_get("/{tail:.*}", pages.handle)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    pool = await asyncpg.create_pool(db_url)
    metrics = Metrics(CollectorRegistry())
    try:
        urls = [(f"http://127.0.0.1:{port}/p{i}", 1.0) for i in range(5)]
        await frontier.seed(pool, urls, time.time() - 1)
        settings = Settings(total_timeout=5.0, lease_seconds=30.0, politeness_delay=0.0,
                            allow_networks=["127.0.0.0/8"])
        [claim] = await frontier.claim(pool, "stalled", max_hosts=1, urls_per_host=5,
                                       lease_seconds=30)
        # Another daemon took the host (as after a pause past the lease).
        await pool.execute("UPDATE hosts SET lease_owner = 'other', lease_epoch = lease_epoch + 1")
        async with new_session("t", address_policy=AddressPolicy(["127.0.0.0/8"])) as session:
            worker = Worker(settings, "stalled", pool, session, metrics)
            await worker.drain_host(claim)
        # Its first write (the host's refused note, after robots.txt) was refused: no page
        # was requested after it, and nothing else was tried.
        assert pages.requests == 0
        assert await counts(pool) == (0, 0)
        rejected = metrics.registry.get_sample_value(
            "crawler_lease_rejected_writes_total", {"write": "refused note"}
        )
        assert rejected == 1.0
        assert metrics.registry.get_sample_value(
            "crawler_lease_rejected_writes_total", {"write": "robots.txt"}
        ) is None
        assert await pool.fetchval("SELECT lease_owner FROM hosts") == "other"
    finally:
        await pool.close()
        await runner.cleanup()


@pytest.mark.parametrize(("sqlstate", "name"), [("40P01", "deadlock"), ("40001", "serialization")])
async def test_deadlocks_and_serialization_failures_are_retried(
    db_url: str, sqlstate: str, name: str
) -> None:
    pool = await asyncpg.create_pool(db_url)
    attempts: list[int] = []

    async def conflicted_once() -> str:
        attempts.append(1)
        if len(attempts) == 1:  # PostgreSQL raises the real error class for the SQLSTATE
            await pool.execute(
                f"DO $$ BEGIN RAISE EXCEPTION '{name}' USING ERRCODE = '{sqlstate}'; END $$"
            )
        return "done"

    try:
        worker = Worker(SETTINGS, "me", pool, None,  # type: ignore[arg-type]
                        Metrics(CollectorRegistry()))
        assert await worker._with_db_retry(conflicted_once) == "done"
        assert len(attempts) == 2
    finally:
        await pool.close()


async def test_a_connection_left_mid_protocol_is_retried_on_a_fresh_one(db_url: str) -> None:
    """A server shutdown can leave a pooled connection mid-protocol; asyncpg then raises
    InternalClientError on its next statement (seen when PostgreSQL restarted under a running
    daemon). That is retried, and the pool's connections are replaced, not reused."""
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=1)
    attempts: list[int] = []

    async def broken_once() -> int:
        backend = await pool.fetchval("SELECT pg_backend_pid()")
        attempts.append(backend)
        if len(attempts) == 1:  # what asyncpg raises; it cannot be provoked on demand
            raise asyncpg.exceptions.InternalClientError(
                "cannot switch to state 12; another operation (2) is in progress"
            )
        return int(backend)

    try:
        worker = Worker(SETTINGS, "me", pool, None,  # type: ignore[arg-type]
                        Metrics(CollectorRegistry()))
        assert await worker._with_db_retry(broken_once) == attempts[-1]
        assert len(attempts) == 2
        assert attempts[0] != attempts[1]  # a new connection (a new backend), not the old one
    finally:
        await pool.close()


async def test_a_retried_write_gives_up_once_its_lease_has_run_out(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    attempts: list[int] = []

    async def always_deadlocked() -> None:
        attempts.append(1)
        await pool.execute("DO $$ BEGIN RAISE EXCEPTION 'd' USING ERRCODE = '40P01'; END $$")

    try:
        await frontier.seed(pool, urls_for(1, 1), time.time() - 1)
        [claim] = await frontier.claim(pool, "me", max_hosts=1, urls_per_host=1,
                                       lease_seconds=1.0)
        worker = Worker(SETTINGS, "me", pool, None,  # type: ignore[arg-type]
                        Metrics(CollectorRegistry()))
        with pytest.raises(LeaseLost):
            await asyncio.wait_for(
                worker._with_db_retry(always_deadlocked, lease=claim.lease), timeout=30
            )
        assert 1 < len(attempts) < 10
    finally:
        await pool.close()


@pytest.mark.parametrize("writer", ["transaction", "recorder"])
@pytest.mark.breaks_invariant(
    "hosts_due", reason="it makes its URL and its host due by hand, in two statements whose now() "
    "differ")
async def test_a_written_transition_reads_back_as_the_same_record(
    db_url: str, writer: str
) -> None:
    """The typed rows carry every column exactly: bytes, unsigned fingerprints, arrays,
    timestamps, the periodic model and the Last-Modified evidence; written alone in a
    transaction (``write_transition``) or in a batch (the daemon's ``Recorder``)."""
    pool = await asyncpg.create_pool(db_url)
    recorder = Recorder(pool)
    try:
        await frontier.seed(pool, urls_for(1, 1), time.time() - 1)
        record = None
        dated = round(time.time(), 3) - 86_400.0  # the date moves with the content
        for round_ in range(6):
            [claim] = await frontier.claim(pool, "me", max_hosts=1, urls_per_host=1,
                                           lease_seconds=30)
            if record is not None:
                assert claim.urls[0] == record  # what was written is what is read
            now = round(time.time(), 3)  # the database keeps microseconds
            words = f"version {round_ // 2} " * 40
            body = f"<html><body><p>{words}</p></body></html>"
            result = FetchResult(now, 0.01, Outcome.OK, status=200, content_type="text/html",
                                 body=body.encode(), etag=f'"e{round_}"',
                                 last_modified=round(dated + 7200.0 * (round_ // 2), 3))
            t = transition(claim.urls[0], result, HostContext(HostHealth(), 1.0, now), POLICY,
                           url_filter=URL_FILTER, now=now, rng_value=0.5)
            if writer == "recorder":
                assert await recorder.record(t, claim.lease)
                assert await recorder.release(claim.lease)
            else:
                assert await write_transition(pool, t, claim.lease)
                await frontier.release_host(pool, claim.lease)
            await pool.execute("UPDATE urls SET next_fetch_at = now() - interval '1 second'")
            await pool.execute("UPDATE hosts SET next_due_at = now() - interval '1 second', "
                               "next_request_at = now() - interval '1 second'")
            record = t.record
        assert record is not None and record.fetch_count == 6
        assert record.last_modified_evidence_days and record.history.fetches == 5
        assert record.last_simhash is not None and record.last_content_hash
    finally:
        await pool.close()
