"""The IndexNow receiver: ``GET /indexnow`` and ``POST /indexnow`` on the daemon's
HTTP server. The protocol's reading and checks, and the per-host state, are pure
(``crawler.core.indexnow``); this is the shell around them: the key file fetched, the URLs
made due.

A ping goes through, in order, and stops at the first refusal:

1. its format and its URLs' host (``read_get``, ``read_post``): 400, 422;
2. the host's token bucket: 429, before the database or the network is asked anything;
3. the host is one of the collection's (``known_host``): 403 otherwise, before any request;
4. the key: trusted if its file confirmed it lately; else the file is fetched, at most once
   per host per ``KEY_CHECK_INTERVAL_SECONDS`` for keys not verified (403 meanwhile), as
   politely as a page (``read_key``);
5. the URLs: known ones due now (``due_after_ping``) as far as the host's pings are trusted
   (``crawler.db.pings``), new ones seeded (the global URL patterns apply), a hint in
   ``url_hints`` for each: 200. A key check that takes longer than ``ANSWER_WAIT_SECONDS`` is
   answered 202 ("key validation pending"), and the URLs are taken when it confirms the key.

Under ``crawler run --processes N`` the parent serves /indexnow, so the buckets and the key
cache are one per machine; several daemons of a fleet each keep theirs.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import aiohttp
import asyncpg
from aiohttp import web

from crawler.core import model
from crawler.core.hostid import HostIdCollision
from crawler.core.indexnow import (
    KEY_FILE_MAX_BYTES,
    OUTCOME_STATUS,
    Bucket,
    KeyState,
    Ping,
    Refusal,
    due_after_ping,
    idle,
    key_check_started,
    key_checked,
    key_file_matches,
    key_verdict,
    read_get,
    read_post,
    retry_after,
    take,
)
from crawler.core.model import UrlRecord
from crawler.core.patterns import UrlFilter, global_filter, partition
from crawler.daemon.hosthold import HostHold, wait_for_lease
from crawler.db import frontier
from crawler.db.connect import create_pool
from crawler.db.errors import DB_ERRORS
from crawler.db.hostlease import known_host
from crawler.db.pings import take_ping
from crawler.metrics import PingMetrics
from crawler.net.fetch import fetch, new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings

log = logging.getLogger(__name__)

# How long a ping waits for its key check before it is answered 202.
ANSWER_WAIT_SECONDS = 5.0
# A key not verified (new or wrong) makes the host's key file be fetched at most this often.
KEY_CHECK_INTERVAL_SECONDS = 300.0
# A key the file confirmed is trusted this long, then checked again at its next ping.
KEY_VALID_SECONDS = 3600.0
# A key check waits this long for a daemon to give the host back, and gives up on a host whose
# politeness clock or backoff is further away than this: a check never holds a lease for long.
LEASE_WAIT_SECONDS = 60.0
TURN_WAIT_MAX_SECONDS = 60.0
# Key files read at once, each holding one of the receiver's connections.
KEY_CHECKS_AT_ONCE = 4
# Host buckets kept before full ones (the same as none) are forgotten.
BUCKETS_KEPT = 10_000
# A new URL seeded by a ping weighs as much as one seeded by `crawler seed`.
IMPORTANCE = 1.0
KEY_RESULTS = ("valid", "invalid", "failed")
# What ends a key check early: the database (or the network under it), or the host's lease
# lost to another holder (HostHold raises RuntimeError).
CHECK_ERRORS: tuple[type[BaseException], ...] = (*DB_ERRORS, RuntimeError)


@dataclass(frozen=True, slots=True)
class Answer:
    """What a ping is answered: its outcome (``OUTCOME_STATUS``), a line saying why, and for
    a 429 the seconds until the host may ping again."""

    outcome: str
    reason: str
    retry_after: float | None = None

    @property
    def status(self) -> int:
        return OUTCOME_STATUS[self.outcome]


@dataclass(slots=True)
class _Check:
    key: str
    key_url: str
    task: asyncio.Task[bool]


UNAVAILABLE = Answer("unavailable", "the receiver cannot answer now; ping again later")


class IndexNowReceiver:
    """Serves /indexnow (``crawler.daemon.http``). ``start`` before the first ping, ``close``
    at shutdown; a ping meanwhile is answered 503."""

    def __init__(self, settings: Settings, events: PingMetrics, *,
                 clock: Callable[[], float] = time.time) -> None:
        self.settings = settings
        self.events = events
        self.clock = clock
        self.per_second = settings.indexnow_pings_per_minute / 60.0
        self.burst = float(settings.indexnow_burst)
        # The key file answers itself: a redirect is not followed, and a body longer than a
        # key file is not one.
        self.key_limits = settings.model_copy(
            update={"max_redirects": 0, "max_body_bytes": KEY_FILE_MAX_BYTES})
        self.url_filter: UrlFilter = global_filter(settings.include, settings.exclude)
        self.owner = f"indexnow-{uuid.uuid4().hex[:12]}"
        self.database_url: str | None = None
        self.pool: asyncpg.Pool | None = None
        self.session: aiohttp.ClientSession | None = None
        self.buckets: dict[str, Bucket] = {}
        self.prune_at = BUCKETS_KEPT
        self.keys: dict[str, KeyState] = {}
        self.checks: dict[str, _Check] = {}
        self.tasks: set[asyncio.Task[Any]] = set()
        self.slots = asyncio.Semaphore(KEY_CHECKS_AT_ONCE)
        self.pool_lock = asyncio.Lock()
        self.closed = False
        events.start(list(OUTCOME_STATUS), KEY_RESULTS)

    async def start(self, database_url: str) -> None:
        """Ready to answer. The database pool is made at the first ping that needs it: a
        database away at start-up costs pings a 503, not the daemon its start."""
        self.database_url = database_url
        try:
            self.session = new_session(self.settings.user_agent,
                                       address_policy=AddressPolicy(self.settings.allow_networks),
                                       ca_bundle=self.settings.ca_bundle)
        except ValueError as error:  # an unreadable CRAWLER_CA_BUNDLE: the fetch processes
            # stop at start-up naming it; pings meanwhile are answered 503
            log.error("IndexNow pings not taken: %s", error)

    async def close(self) -> None:
        """Stop: checks under way are cancelled (their leases given back), then the pool and
        the session closed."""
        self.closed = True
        for task in list(self.tasks):
            task.cancel()
        await asyncio.gather(*self.tasks, return_exceptions=True)
        async with self.pool_lock:
            pool, self.pool = self.pool, None
        if pool is not None:
            await pool.close()
        if self.session is not None:
            await self.session.close()

    async def get(self, request: web.Request) -> web.Response:
        query = request.query
        params = {name: query.getone(name) for name in ("url", "key", "keyLocation")
                  if name in query}
        return await self.respond(read_get(params))

    async def post(self, request: web.Request) -> web.Response:
        try:
            body = await request.read()
        except web.HTTPRequestEntityTooLarge:
            return await self.respond(Refusal("invalid", "the body is too large"))
        return await self.respond(read_post(body))

    async def respond(self, read: Ping | Refusal) -> web.Response:
        answer = (Answer(read.outcome, read.reason) if isinstance(read, Refusal)
                  else await self.receive(read))
        self.events.ping_answered(answer.outcome)
        headers = ({"Retry-After": str(max(1, math.ceil(answer.retry_after)))}
                   if answer.retry_after is not None else None)
        return web.Response(status=answer.status, text=answer.reason + "\n", headers=headers)

    async def receive(self, ping: Ping) -> Answer:
        """A well-formed ping, through the bucket, the host and the key, to its URLs."""
        if self.closed or self.session is None:
            return UNAVAILABLE
        now = self.clock()
        origin = ping.key_origin
        allowed, bucket = take(self.buckets.get(origin), now, per_second=self.per_second,
                               burst=self.burst)
        self.keep_bucket(origin, bucket, now)
        if not allowed:
            wait = retry_after(bucket, now, per_second=self.per_second, burst=self.burst)
            return Answer("rate_limited", f"too many pings for {ping.host}: at most "
                          f"{self.settings.indexnow_burst} at once, "
                          f"{self.settings.indexnow_pings_per_minute:g} a minute", wait)
        try:
            pool = await self.database()
            host_id = await known_host(pool, origin)
        except DB_ERRORS as error:
            log.warning("IndexNow ping for %s not answered: %s", origin, error)
            return UNAVAILABLE
        if host_id is None:
            return Answer("unknown_host", f"{origin} is not a host of this crawler's "
                          "collection")
        key_url = ping.key_url
        check = self.checks.get(origin)
        if check is not None and (check.key, check.key_url) == (ping.key, key_url):
            task = check.task
        else:
            verdict = key_verdict(self.keys.get(origin), ping.key, key_url, now,
                                  check_interval=KEY_CHECK_INTERVAL_SECONDS)
            if verdict == "valid":
                return await self.take_urls(ping)
            if verdict == "refuse" or check is not None:
                return Answer("wrong_key", f"key not valid for {origin}: another key of the "
                              f"host was checked less than {KEY_CHECK_INTERVAL_SECONDS:g} s "
                              "ago; ping again later")
            task = self.start_check(origin, int(host_id), ping.key, key_url)
        done, _ = await asyncio.wait({task}, timeout=ANSWER_WAIT_SECONDS)
        if not done:
            self.spawn(self.take_when_verified(task, ping))
            return Answer("pending", "URLs received; key validation pending: they are taken "
                          "once the key file confirms the key")
        if task.cancelled():
            return UNAVAILABLE
        if not task.result():
            return Answer("wrong_key", f"key not valid: {key_url} does not hold it")
        return await self.take_urls(ping)

    def keep_bucket(self, origin: str, bucket: Bucket, now: float) -> None:
        """Remember ``origin``'s bucket; full buckets are forgotten when too many are kept
        (a flood of pings naming ever new hosts must not grow the receiver's memory)."""
        self.buckets[origin] = bucket
        if len(self.buckets) > self.prune_at:
            self.buckets = {o: b for o, b in self.buckets.items()
                            if not idle(b, now, per_second=self.per_second, burst=self.burst)}
            self.prune_at = max(BUCKETS_KEPT, 2 * len(self.buckets))

    async def database(self) -> asyncpg.Pool:
        async with self.pool_lock:
            if self.closed or self.database_url is None:
                raise ConnectionError("the receiver is closed")
            if self.pool is None:
                # Its own few connections: pings never take one the fetch loop needs.
                self.pool = await create_pool(self.database_url, min_size=1,
                                              max_size=KEY_CHECKS_AT_ONCE + 2)
            return self.pool

    def spawn(self, coroutine: Any) -> asyncio.Task[Any]:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)
        return task

    def start_check(self, origin: str, host_id: int, key: str, key_url: str) -> asyncio.Task[bool]:
        self.keys[origin] = key_check_started(self.keys.get(origin), self.clock())
        task: asyncio.Task[bool] = self.spawn(self.check_key(origin, host_id, key, key_url))
        self.checks[origin] = _Check(key, key_url, task)
        return task

    async def check_key(self, origin: str, host_id: int, key: str, key_url: str) -> bool:
        """Read the key file (``read_key``) and remember what it said; True when it holds
        the key. A check that could not read the file counts as a failed one: the host is
        not asked again before the interval is over."""
        result, detail = "failed", "not read"
        try:
            async with self.slots:
                result, detail = await self.read_key(origin, host_id, key, key_url)
        except CHECK_ERRORS as error:
            detail = f"{type(error).__name__}: {error}"
        finally:
            self.keys[origin] = key_checked(self.keys.get(origin), key, key_url,
                                            result == "valid", self.clock(),
                                            valid_for=KEY_VALID_SECONDS)
            self.checks.pop(origin, None)
        self.events.key_fetched(result)
        log.info("IndexNow key file %s: %s (%s)", key_url, result, detail)
        return result == "valid"

    async def read_key(self, origin: str, host_id: int, key: str,
                       key_url: str) -> tuple[str, str]:
        """One request for the key file, as polite as a page's: under the host's lease
        (``lease_host``, as the sitemap reader takes it), after the host's politeness
        clock, robots.txt obeyed (read from the host's cache when fresh, else fetched), and
        the host's clock moved by its delay after it. ``(result, detail)``."""
        pool = await self.database()
        assert self.session is not None
        async with pool.acquire() as conn:
            row = await wait_for_lease(conn, host_id, self.owner, LEASE_WAIT_SECONDS)
            if row is None:
                return "failed", f"{origin} stayed leased for {LEASE_WAIT_SECONDS:g} s"
            hold = HostHold(conn, self.owner, host_id, origin, row["lease_epoch"], row,
                            self.settings)
            try:
                if hold.refused is not None:
                    return "failed", f"{origin} is {hold.refused}"
                if hold.next_request - time.time() > TURN_WAIT_MAX_SECONDS:
                    return "failed", f"{origin} is backing off"
                await hold.robots(self.session, self.settings)
                if not hold.policy.allowed(key_url):
                    return "failed", "robots.txt disallows the key file"
                await hold.turn()
                try:
                    fetched = await fetch(self.session, UrlRecord(url_id=0, url=key_url),
                                          self.key_limits, send_validators=False)
                finally:
                    await hold.sent()
            finally:
                await hold.release()
        if (fetched.outcome == model.OK and not fetched.truncated
                and key_file_matches(fetched.body, key)):
            return "valid", "the file holds the key"
        if fetched.status is None:
            return "failed", str(fetched.error_kind)
        return "invalid", f"answered {fetched.status}" + (
            " without the key" if fetched.outcome == model.OK else "")

    async def take_when_verified(self, task: asyncio.Task[bool], ping: Ping) -> None:
        """A ping answered 202: its URLs are taken once the key is confirmed."""
        if not await task or self.closed:
            return
        answer = await self.take_urls(ping)
        log.info("IndexNow ping for %s, answered 202: %s", ping.host, answer.reason)

    async def take_urls(self, ping: Ping) -> Answer:
        """The effect of a ping whose key is valid (``take_pinged``)."""
        try:
            pool = await self.database()
            due, added = await take_pinged(pool, ping.urls, self.url_filter,
                                           due_after_ping(self.clock()))
        except HostIdCollision as collision:
            return Answer("unknown_host", str(collision))
        except DB_ERRORS as error:
            log.warning("IndexNow ping for %s not taken: %s", ping.host, error)
            return UNAVAILABLE
        left = len(ping.urls) - due
        rest = (f"; {left} new ones not taken (CRAWLER_INCLUDE / CRAWLER_EXCLUDE)"
                if left else "")
        return Answer("accepted", f"{len(ping.urls)} URLs received: {due} due now "
                      f"({added} new){rest}")


async def take_pinged(pool: asyncpg.Pool, urls: Sequence[str], url_filter: UrlFilter,
                      due: float) -> tuple[int, int]:
    """Pinged URLs of known hosts: the new ones the global patterns pass seeded (as `crawler
    seed` would), then every one known due at ``due`` (if not sooner) with a hint in
    ``url_hints``, and its host due by then too (``crawler.db.pings.take_ping``). Returns how
    many URLs were made due, and how many of them were new."""
    kept, _ = partition([url_filter], urls)
    added = 0
    if kept:
        added = (await frontier.seed(pool, dict.fromkeys(kept, IMPORTANCE), due)).inserted
    async with pool.acquire() as conn:
        made_due = await take_ping(conn, urls, due)
    return made_due, added
