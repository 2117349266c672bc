"""The simulator decides like the REAL worker: same record, same answer, same time.

The daemon side is `crawler.daemon.worker.Worker` against a real PostgreSQL: it claims the
URLs from the frontier, fetches robots.txt and every page over HTTP from a loopback server,
runs the transition and commits it. The simulator side is `crawler.sim.step`, fed the same
page version at the same (virtual) time. The pages' change instants come from the
simulator's own `grimes` population (clocked hourly and daily pages, Poisson pages), with
failed fetches (HTTP 500 and 403) and half the pages sending a truthful Last-Modified.

Virtual time: the worker's fetcher hook asks the loopback server for the page (a real HTTP
request, the body the simulator's `page_body` of the version due then) and stamps the result
with the virtual fetch time, days after a Monday in 2025, so weeks of history pass in seconds
and every scheduled time stays due. Before each fetch, the hook compares what the worker
committed for the previous fetch (``urls.next_fetch_at``, the stored change rate, the record
it claimed back) with what `sim.step` computed for it.
"""

from __future__ import annotations

import asyncio
import email.utils
import math
import random
import time
from bisect import bisect_right
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from tls import serve

from crawler.core.estimate import GammaPrior
from crawler.core.model import (
    HTTP_ERROR,
    OK,
    SECONDS_PER_DAY,
    FetchResult,
    Outcome,
    Schedule,
    UrlRecord,
)
from crawler.core.schedule import SchedulePolicy
from crawler.daemon.worker import Worker
from crawler.db import frontier
from crawler.net.fetch import fetch
from crawler.net.session import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import Settings, default_settings
from crawler.sim import step
from crawler.sim.simulator import build_population

pytestmark = pytest.mark.timeout(60)

BASE_DAYS = 20094.0  # 2025-01-06, a Monday, 00:00 UTC: virtual day 0
HOUR = 1.0 / 24.0
FETCHES_PER_PAGE = 45
WAIT_SECONDS = 45.0
LIMITS = default_settings(connect_timeout=2.0, total_timeout=5.0)


class NullEvents:
    def __getattr__(self, name: str) -> object:
        return lambda *args, **kwargs: None


@dataclass
class Page:
    """One URL: its ground truth, the simulator's record of it, the fetches so far."""

    path: str
    kind: str
    instants: list[float]  # change times, virtual days
    dated: bool
    sim_record: UrlRecord
    rng: random.Random  # the page's own draws: the same whatever order the worker fetches in
    sim_schedule: Schedule | None = None
    now: float = 0.0  # virtual day of the latest fetch
    fetches: int = 0
    compared: int = 0
    periodic_seen: bool = False
    outcomes: list[Outcome] = field(default_factory=list)


def close(a: float | None, b: float | None, *, rel: float = 1e-9, abs_: float = 1e-9) -> bool:
    if a is None or b is None:
        return a is b
    return math.isclose(a, b, rel_tol=rel, abs_tol=abs_)


def differences(page: Page, claimed: UrlRecord, row: asyncpg.Record) -> list[str]:
    """Where the worker's committed state after a fetch differs from the simulator's."""
    sim, schedule = page.sim_record, page.sim_schedule
    assert schedule is not None
    found = []
    if not close(row["next_fetch_at"], schedule.next_fetch_at, abs_=2e-6):
        found.append(f"next_fetch_at {row['next_fetch_at']} != {schedule.next_fetch_at}")
    if not close(row["change_rate_per_day"], schedule.change_rate_per_day):
        found.append(
            f"change rate {row['change_rate_per_day']} != {schedule.change_rate_per_day}"
        )
    if not close(claimed.change_rate_per_day, sim.change_rate_per_day):
        found.append("claimed change rate")
    mine, theirs = claimed.history, sim.history
    if (
        mine.fetches != theirs.fetches
        or not close(mine.unchanged_days, theirs.unchanged_days)
        or len(mine.changed_intervals_days) != len(theirs.changed_intervals_days)
        or not all(
            close(a, b)
            for a, b in zip(mine.changed_intervals_days, theirs.changed_intervals_days, strict=True)
        )
    ):
        found.append(f"history {mine} != {theirs}")
    if (claimed.periodic is None) != (sim.periodic is None) or (
        claimed.periodic is not None
        and sim.periodic is not None
        and not all(
            close(a, b)
            for a, b in (
                (claimed.periodic.period_days, sim.periodic.period_days),
                (claimed.periodic.phase_days, sim.periodic.phase_days),
                (claimed.periodic.jitter_days, sim.periodic.jitter_days),
            )
        )
    ):
        found.append(f"periodic {claimed.periodic} != {sim.periodic}")
    for name in ("state", "fetch_count", "change_count", "consecutive_failures"):
        if getattr(claimed, name) != getattr(sim, name):
            found.append(f"{name} {getattr(claimed, name)} != {getattr(sim, name)}")
    if not close(claimed.last_fetched_at, sim.last_fetched_at, abs_=2e-6):
        found.append("last_fetched_at")
    return [f"{page.path} after fetch {page.fetches}: {what}" for what in found]


def next_visit(page: Page, rng: random.Random) -> float:
    """The virtual day of the page's next fetch: mostly at random gaps (so clocked pages are
    seen often enough to be recognised), sometimes when the worker scheduled it."""
    scheduled = None if page.sim_schedule is None else page.sim_schedule.next_fetch_at
    if page.fetches == 0:
        return rng.uniform(0.0, 0.05)
    if scheduled is not None and rng.random() < 0.3:
        due = scheduled / SECONDS_PER_DAY - BASE_DAYS
        if page.now < due < page.now + 2.0:
            return due
    mean_gap = HOUR / 3 if page.kind == "hourly" else 0.3
    return page.now + rng.uniform(0.3, 1.7) * mean_gap


@pytest.fixture
async def pool(db_url: str) -> AsyncIterator[asyncpg.Pool]:
    connections = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
    yield connections
    await connections.close()


async def test_simulator_step_decides_like_the_worker_through_the_database(
    pool: asyncpg.Pool,
) -> None:
    days = 16.0
    population = build_population("grimes", 40, days, seed=3)
    chosen: list[int] = []
    for kind in ("hourly", "daily", "poisson-workhours"):
        chosen += [i for i, k in enumerate(population.kinds) if k == kind][:2]
    assert len(chosen) == 6
    times = population.change_times_days.tolist()
    offsets = population.offsets.tolist()
    pages = {
        f"/p{index}": Page(
            path=f"/p{index}",
            kind=population.kinds[index],
            instants=times[offsets[index] : offsets[index + 1]],
            dated=number % 2 == 1,
            sim_record=UrlRecord(url_id=index, url=f"sim://{index}"),
            rng=random.Random(index),
        )
        for number, index in enumerate(chosen)
    }
    scheduling = {"schedule": "optimal", "max_interval": 7 * SECONDS_PER_DAY}
    policy = SchedulePolicy(step.sim_settings(**scheduling), mu=0.3, prior=GammaPrior(0.8, 4.0))
    serving: dict[str, tuple[int, bytes, dict[str, str]]] = {}
    problems: list[str] = []
    finished = asyncio.Event()

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        status, body, headers = serving[request.path]
        return web.Response(status=status, body=body, headers=headers)

    async def fetcher(
        session: aiohttp.ClientSession, record: UrlRecord, limits: Settings
    ) -> FetchResult:
        path = "/" + record.url.rsplit("/", 1)[-1]
        page = pages[path]
        if page.sim_schedule is not None:
            row = await pool.fetchrow(
                "SELECT extract(epoch FROM next_fetch_at)::float8 AS next_fetch_at, "
                "change_rate_per_day FROM urls WHERE id = $1",
                record.url_id,
            )
            problems.extend(differences(page, record, row))
            page.compared += 1
            if problems or all(p.compared >= FETCHES_PER_PAGE for p in pages.values()):
                finished.set()
        # The same page, at the same virtual time, for both.
        rng = page.rng
        page.now = next_visit(page, rng)
        version = bisect_right(page.instants, page.now)
        outcome = OK if page.fetches == 0 or rng.random() < 0.88 else HTTP_ERROR
        last_change_days = None
        headers = {"Content-Type": "text/plain"}
        if page.dated and version > 0 and outcome == OK:
            # Whole seconds, as an HTTP date carries them.
            seconds = math.floor((BASE_DAYS + page.instants[version - 1]) * SECONDS_PER_DAY)
            last_change_days = seconds / SECONDS_PER_DAY - BASE_DAYS
            headers["Last-Modified"] = email.utils.formatdate(seconds, usegmt=True)
        sim_result = step.simulated_result(
            BASE_DAYS + page.now,
            version,
            None if last_change_days is None else BASE_DAYS + last_change_days,
            outcome,
        )
        page.sim_record, page.sim_schedule = step.simulated_fetch(
            page.sim_record, sim_result, policy
        )
        page.periodic_seen |= page.sim_record.periodic is not None
        status = 200 if outcome == OK else rng.choice([500, 403])
        serving[path] = (status, step.page_body(version), headers)
        result = await fetch(session, record, limits)
        if result.outcome != outcome or (outcome == OK and result.body != sim_result.body):
            problems.append(f"{path}: the server answered {result} for {outcome}")
            finished.set()
        page.fetches += 1
        page.outcomes.append(outcome)
        return replace(result, fetched_at=sim_result.fetched_at)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    settings = LIMITS.model_copy(update={
        **scheduling,
        "concurrency": 2, "poll_interval": 0.02, "politeness_delay": 0.0, "lease_seconds": 60.0,
        # Failed requests back the host off for milliseconds, not seconds (real time).
        "backoff_base_seconds": 0.001, "breaker_open_seconds": 0.001,
        "backoff_cap_seconds": 0.002,
    })
    worker_policy = SchedulePolicy(settings, mu=policy.mu, prior=policy.prior)
    session = new_session("simbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"]))
    worker = Worker(settings, "sim-parity", pool, session, NullEvents(),  # type: ignore[arg-type]
                    fetcher=fetcher, schedule=lambda: worker_policy)
    task: asyncio.Task[None] | None = None
    async with serve(app=app) as origin:
        try:
            await frontier.seed(pool, [(origin + path, 1.0) for path in pages], time.time() - 1)
            task = asyncio.create_task(worker.run())
            deadline = time.monotonic() + WAIT_SECONDS
            while not finished.is_set():
                assert time.monotonic() < deadline, {p.path: p.compared for p in pages.values()}
                assert not task.done(), task
                await asyncio.sleep(0.05)
        finally:
            worker.stop()
            if task is not None:
                await task
            await asyncio.gather(*worker.host_tasks, return_exceptions=True)
            await session.close()
    assert not problems, problems[:5]
    for page in pages.values():
        assert page.compared >= FETCHES_PER_PAGE
        assert HTTP_ERROR in page.outcomes  # failures are part of every history
        if page.kind in ("hourly", "daily") and page.dated:
            # The histories exercise the clock-timed path, not only the Poisson one (dated
            # changes reveal a clock within these few fetches; undated ones take hundreds).
            assert page.periodic_seen, page.path
    # The worker committed every fetch it made (one observation each).
    observed = await pool.fetchval("SELECT count(*) FROM observations")
    assert observed >= sum(p.compared for p in pages.values())
