"""The live freshness harness: the real daemon, deployed as a user deploys it, against a web
whose changes are known, measured against the truth.

Two daemons (``python -m crawler run``, default ``--processes``) crawl the same live web at
the same time, one with the optimal schedule and one uniform, each on its own database seeded
with ``crawler seed``, at one fetch budget. Afterwards every fetch they recorded is read back
and ``crawler.sim.live`` turns it, with the pages' true change instants, into freshness and
age, beside the simulator's prediction and the analytic oracle. Everything listens and
connects on 127.0.0.0/8 only.

``run_hints`` compares instead the optimal daemon taking sitemap dates as evidence with the
same daemon ignoring them (``CRAWLER_HINTS``), on a web whose sites all serve a sitemap dated
truthfully, falsely or not at all (``crawler.demo.live.HINT_SITEMAPS``), seeded through the
sitemaps; the figures are per group of dates (``crawler.sim.live.evaluate_hints``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import random
import signal
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg

from crawler.core.model import SECONDS_PER_DAY
from crawler.db.migrate import upgrade
from crawler.demo.live import HINT_SITEMAPS, LiveWeb, live_web, observable_change_times
from crawler.demo.web import DemoWeb
from crawler.settings import ENV_PREFIX
from crawler.sim.live import (
    HintEvaluation,
    LiveEvaluation,
    RunShape,
    TruePage,
    evaluate,
    evaluate_hints,
)

# A daemon's recorded fetches, plan in force and fallback count (``_recorded``); its sitemap
# trust per (sitemap dates, classification) (``_sitemaps_and_trust``).
Recorded = tuple[list[list[tuple[float, str]]], dict[str, float], int]
Trust = dict[tuple[str, str], tuple[int, ...]]
# The daemons each comparison runs side by side, and the settings that set them apart.
ARMS: Mapping[str, Mapping[str, Mapping[str, str]]] = {
    "schedules": {"optimal": {"schedule": "optimal"}, "uniform": {"schedule": "uniform"}},
    # Same daemon, same budget, same web (whose sitemaps date a third of the pages right and
    # a third wrong): one takes the dates as evidence, the other ignores them.
    "hints": {"hints-on": {"schedule": "optimal", "hints": "on"},
              "hints-off": {"schedule": "optimal", "hints": "off"}},
}
_STOP_TIMEOUT_SECONDS = 60.0
_LOG_TAIL_BYTES = 4000
# The collection is seeded in this many batches spread over the first uniform interval.
SEED_BATCHES = 6


@dataclass(frozen=True, slots=True)
class LiveConfig:
    """One harness run. The daemons' settings that are not the defaults are here, with why."""

    seconds: float = 300.0
    warmup_seconds: float = 60.0
    pages: int = 300
    hosts: int = 30
    budget_per_day: float = 6.0 * SECONDS_PER_DAY
    seed: int = 0
    fastest_seconds: float = 5.0
    slowest_seconds: float = 20000.0
    # A quarter second between two requests to a host: with ten pages a host, no host's
    # politeness caps what the plan gives it, so the budget can be spent.
    politeness_delay: float = 0.25
    # Revisit bounds the plan must respect (the oracle gets the same): a minute would forbid
    # following pages that change every ten seconds, a month would let a page that answered
    # 404 three times never be seen again within the run.
    min_interval: float = 2.0
    max_interval: float = 3600.0
    # The planner re-solves often enough to converge within the run.
    planner_interval: float = 10.0
    # "schedules": optimal against uniform; "hints": hints taken against ignored (ARMS).
    compare: str = "schedules"
    # CRAWLER_SITEMAP_MAX_INTERVAL, when set: the longest interval between two reads of a
    # sitemap (a sitemap's dates are news only when read). Unset: the daemon's default.
    sitemap_max_interval: float | None = None
    # With compare="hints": also run the daemon taking hints at this share of the budget.
    hints_budget_scale: float | None = None
    extra_settings: Mapping[str, str] = field(default_factory=dict)

    @property
    def arms(self) -> Mapping[str, Mapping[str, str]]:
        arms = dict(ARMS[self.compare])
        if self.compare == "hints" and self.hints_budget_scale is not None:
            # A third daemon taking hints on a budget scaled to spend what the one ignoring
            # them spends: hint-driven fetches come on top of the plan's.
            scaled = {**arms["hints-on"],
                      "budget_per_day": repr(self.budget_per_day * self.hints_budget_scale)}
            arms = {"hints-on": arms["hints-on"],
                    f"on-x{self.hints_budget_scale:g}": scaled,
                    "hints-off": arms["hints-off"]}
        return arms

    @property
    def uniform_interval(self) -> float:
        """The interval at which a uniform schedule spends the budget."""
        return self.pages * SECONDS_PER_DAY / self.budget_per_day

    def shape(self) -> RunShape:
        return RunShape(
            seconds=self.seconds,
            warmup_seconds=self.warmup_seconds,
            budget_per_day=self.budget_per_day,
            min_interval_seconds=self.min_interval,
            max_interval_seconds=self.max_interval,
            planner_interval_seconds=self.planner_interval,
        )


@dataclass(frozen=True, slots=True)
class HintsRun:
    evaluation: HintEvaluation
    # Per arm: sitemap reads a second over the whole run; and per (sitemap dates, stored
    # classification of their source at the end), how many sites and the tests of their
    # dates (hits, false alarms, misses, quiet: crawler.core.hint_trust.HintCounts).
    sitemap_reads_per_second: Mapping[str, float]
    trust: Mapping[str, Mapping[tuple[str, str], tuple[int, ...]]]


@dataclass(frozen=True, slots=True)
class LiveRun:
    evaluation: LiveEvaluation
    # Per schedule: the plan in force at the end, and the URLs whose stored fetch rate is
    # still the uniform fallback's (the interval used before any plan).
    planner_state: Mapping[str, Mapping[str, float]]
    fallback_urls: Mapping[str, int]
    # Per schedule: pages the daemon never fetched, whatever the answer.
    never_fetched: Mapping[str, int]


def with_database(url: str, name: str) -> str:
    return urlunsplit(urlsplit(url)._replace(path="/" + name))


def daemon_environment(config: LiveConfig, db_url: str, arm: str, scratch: Path) -> dict[str, str]:
    """The environment of one daemon: the caller's, without any ``CRAWLER_*`` setting of its
    own (a CRAWLER_PROCESSES there would change the deployment under test), plus ours."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(ENV_PREFIX)}
    settings = {
        "database_url": db_url,
        "data_dir": str(scratch / f"data-{arm}"),
        "warc_dir": str(scratch / f"warc-{arm}"),
        "metrics_port": "0",
        "allow_networks": '["127.0.0.0/8"]',
        "budget_per_day": repr(config.budget_per_day),
        # Both daemons: the optimal one falls back to it before its first plan, and rechecks
        # a page that answered 404 at it.
        "default_interval": repr(config.uniform_interval),
        "min_interval": repr(config.min_interval),
        "max_interval": repr(config.max_interval),
        "planner_interval": repr(config.planner_interval),
        "politeness_delay": repr(config.politeness_delay),
        "shutdown_grace": "3",
        **({} if config.sitemap_max_interval is None
           else {"sitemap_max_interval": repr(config.sitemap_max_interval)}),
        **config.arms[arm],
        **config.extra_settings,
    }
    env.update({ENV_PREFIX + name.upper(): value for name, value in settings.items()})
    return env


async def _command(env: dict[str, str], *args: str) -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await proc.communicate()
    if proc.returncode != 0:
        raise RuntimeError(f"crawler {' '.join(args)} failed:\n{out.decode()[-_LOG_TAIL_BYTES:]}")


def _tail(path: Path) -> str:
    return path.read_bytes()[-_LOG_TAIL_BYTES:].decode(errors="replace")


async def _crawl(
    envs: Mapping[str, dict[str, str]],
    scratch: Path,
    seconds: float,
    during: Callable[[float], Awaitable[None]],
) -> float:
    """Run every daemon for ``seconds`` while ``during(started)`` runs beside them; return
    when they started (POSIX seconds). A daemon that exits early fails the run."""
    logs = {schedule: scratch / f"daemon-{schedule}.log" for schedule in envs}
    procs: dict[str, asyncio.subprocess.Process] = {}
    started = time.time()
    try:
        for schedule, env in envs.items():
            with logs[schedule].open("wb") as log:
                procs[schedule] = await asyncio.create_subprocess_exec(
                    sys.executable, "-m", "crawler", "run", env=env,
                    stdout=log, stderr=asyncio.subprocess.STDOUT,
                )
        waits: dict[asyncio.Future[object], str] = {
            asyncio.ensure_future(proc.wait()): name for name, proc in procs.items()
        }
        beside: asyncio.Future[object] = asyncio.ensure_future(during(started))
        # The run's length is the experiment's, not a wait for a condition.
        done, pending = await asyncio.wait([*waits, beside], timeout=seconds)
        for task in pending:
            task.cancel()
        if beside in done:
            beside.result()  # its failure fails the run
        exited = [waits[task] for task in done if task in waits]
        if exited:
            raise RuntimeError(f"the {exited[0]} daemon exited early:\n{_tail(logs[exited[0]])}")
    finally:
        for proc in procs.values():
            if proc.returncode is None:
                proc.send_signal(signal.SIGTERM)
        stuck = []
        for name, proc in procs.items():
            try:
                await asyncio.wait_for(proc.wait(), _STOP_TIMEOUT_SECONDS)
            except TimeoutError:
                stuck.append(name)
                proc.kill()
                await proc.wait()
    for name in stuck:
        raise RuntimeError(f"the {name} daemon did not stop:\n{_tail(logs[name])}")
    for name, proc in procs.items():
        if proc.returncode != 0:
            raise RuntimeError(f"the {name} daemon exited {proc.returncode}:\n{_tail(logs[name])}")
    return started


def seed_batches(urls: list[str], seed: int, count: int = SEED_BATCHES) -> list[list[str]]:
    """The URLs in ``count`` batches of shuffled URLs (every host in every batch)."""
    shuffled = list(urls)
    random.Random(f"seed_batches:{seed}").shuffle(shuffled)
    return [shuffled[k::count] for k in range(min(count, len(shuffled)))]


def true_pages(web: LiveWeb, demo: DemoWeb, started: float, until: float) -> list[TruePage]:
    """Every page's visible change instants up to ``until``, in seconds since ``started``."""
    shift = demo.start_time - started
    pages = []
    for page in web.pages:
        site = web.sites[page.site]
        spec = site.page(page.path)
        assert spec is not None
        times = observable_change_times(site, spec, until - demo.start_time)
        pages.append(TruePage(page.kind, page.change_rate_per_second,
                              tuple(t + shift for t in times), page.lastmod))
    return pages


# What the report shows of the plan in force, when stored.
PLAN_FIGURES = (
    "version", "mu", "budget_per_day", "achieved_per_day", "prior_shape", "prior_rate",
    "estimated_freshness",
)


async def _plan_in_force(conn: asyncpg.Connection) -> dict[str, float]:
    """The newest stored plan's figures: from the ``plans`` table where the schema has one,
    else from the planner's key-value state."""
    if await conn.fetchval("SELECT to_regclass('plans') IS NOT NULL"):
        row = await conn.fetchval("SELECT to_jsonb(p) FROM plans p ORDER BY version DESC LIMIT 1")
        stored = json.loads(row) if row is not None else {}
    else:
        rows = await conn.fetch("SELECT key, value FROM planner_state")
        stored = {r["key"]: r["value"] for r in rows}
    return {k: float(stored[k]) for k in PLAN_FIGURES if isinstance(stored.get(k), int | float)}


async def _recorded(
    db_url: str, urls: list[str], started: float, fallback_rate_per_day: float
) -> Recorded:
    """Per URL, its recorded fetches (seconds since ``started``, outcome), in order; the
    planner's stored state; and how many URLs still carry the uniform fallback rate."""
    index = {url: i for i, url in enumerate(urls)}
    fetches: list[list[tuple[float, str]]] = [[] for _ in urls]
    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch(
            "SELECT u.url, extract(epoch FROM o.fetched_at)::float8 AS at, o.outcome "
            "FROM observations o JOIN urls u ON u.id = o.url_id AND u.host_id = o.host_id "
            "ORDER BY o.fetched_at"
        )
        state = await _plan_in_force(conn)
        fallback = await conn.fetchval(
            "SELECT count(*) FROM urls WHERE abs(fetch_rate_per_day - $1) <= 1e-9 * $1",
            fallback_rate_per_day,
        )
    finally:
        await conn.close()
    for row in rows:
        fetches[index[row["url"]]].append((row["at"] - started, row["outcome"]))
    return fetches, state, int(fallback or 0)


async def _run_arms(
    config: LiveConfig, maintenance_url: str
) -> tuple[list[TruePage], dict[str, Recorded], dict[str, tuple[float, Trust]]]:
    """Crawl the live web with every arm of ``config.compare``, each on a scratch database
    (dropped at the end), and read back from each its fetches and planner state (``_recorded``)
    and, in the hint comparison, its sitemap reads and trust (``_sitemaps_and_trust``)."""
    web = live_web(
        config.pages, config.hosts, horizon_seconds=config.seconds + 600.0, seed=config.seed,
        fastest_seconds=config.fastest_seconds, slowest_seconds=config.slowest_seconds,
        sitemaps=HINT_SITEMAPS if config.compare == "hints" else (),
    )
    names = {arm: f"crawler_live_{arm.replace('-', '_')}_{uuid.uuid4().hex[:8]}"
             for arm in config.arms}
    admin = await asyncpg.connect(maintenance_url)
    with tempfile.TemporaryDirectory(prefix="crawler-live-") as scratch_dir:
        scratch = Path(scratch_dir)
        try:
            for name in names.values():
                await admin.execute(f'CREATE DATABASE "{name}"')
            urls_db = {s: with_database(maintenance_url, n) for s, n in names.items()}
            for url in urls_db.values():
                await upgrade(url)
            async with DemoWeb(list(web.sites)) as demo:
                urls = [demo.origins[page.site] + page.path for page in web.pages]
                envs = {
                    s: daemon_environment(config, url, s, scratch) for s, url in urls_db.items()
                }
                # Pages seeded by URL; where the sites have sitemaps, through them, site by
                # site (what a user does: the sitemaps are registered and their dates read).
                by_sitemap = config.compare == "hints"
                batches = seed_batches(demo.origins if by_sitemap else urls, config.seed)

                async def seed(batch: int) -> None:
                    if by_sitemap:
                        args = [a for origin in batches[batch] for a in ("--sitemaps", origin)]
                    else:
                        seed_file = scratch / f"seeds-{batch}.txt"
                        seed_file.write_text("\n".join(batches[batch]) + "\n")
                        args = ["--file", str(seed_file)]
                    await asyncio.gather(*(_command(env, "seed", *args) for env in envs.values()))

                async def seed_the_rest(started: float) -> None:
                    # Spread over one uniform interval, as the simulator starts each page at a
                    # random phase: a collection seeded at one instant would be fetched in
                    # bursts by the uniform daemon, a whole interval apart.
                    for batch in range(1, len(batches)):
                        due = started + batch * config.uniform_interval / len(batches)
                        await asyncio.sleep(max(0.0, due - time.time()))
                        await seed(batch)

                await seed(0)
                started = await _crawl(envs, scratch, config.seconds, seed_the_rest)
                pages = true_pages(web, demo, started, started + config.seconds)
                origins = list(demo.origins)
            fallback_rate = SECONDS_PER_DAY / config.uniform_interval
            recorded = {s: await _recorded(url, urls, started, fallback_rate)
                        for s, url in urls_db.items()}
            lastmods = [site.sitemap.lastmod if site.sitemap else None for site in web.sites]
            sitemaps = {s: await _sitemaps_and_trust(url, origins, lastmods, config.seconds)
                        for s, url in urls_db.items() if by_sitemap}
        finally:
            for name in names.values():
                with contextlib.suppress(asyncpg.PostgresError):
                    await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()
    return pages, recorded, sitemaps


async def run_live(config: LiveConfig, maintenance_url: str) -> LiveRun:
    """One harness run on a PostgreSQL server where scratch databases may be created (they
    are dropped at the end)."""
    pages, recorded, _ = await _run_arms(config, maintenance_url)
    evaluation = await asyncio.to_thread(
        evaluate, pages, {s: r[0] for s, r in recorded.items()}, config.shape()
    )
    return LiveRun(
        evaluation,
        {s: r[1] for s, r in recorded.items()},
        {s: r[2] for s, r in recorded.items()},
        {s: sum(1 for page in r[0] if not page) for s, r in recorded.items()},
    )


TEST_COUNTS = ("hits", "false_alarms", "misses", "quiet")


async def _sitemaps_and_trust(
    db_url: str, origins: list[str], lastmods: list[str | None], seconds: float
) -> tuple[float, Trust]:
    """Sitemap reads a second over the run, and per (the site's sitemap dates, the stored
    classification of its ``lastmod`` source: "none" without a row) how many sites and the
    sum of their tests (``TEST_COUNTS``). ``origins`` and ``lastmods`` (the
    ``SitemapSpec.lastmod`` mode; None without a sitemap) are in site order."""
    conn = await asyncpg.connect(db_url)
    try:
        reads = await conn.fetchval("SELECT coalesce(sum(reads), 0) FROM sitemaps")
        rows = await conn.fetch(
            "SELECT h.origin, t.* FROM hint_trust t JOIN hosts h "
            "ON h.id = t.host_id WHERE t.source = 'lastmod'"
        )
    finally:
        await conn.close()
    stored = {r["origin"]: r for r in rows}
    trust: Trust = {}
    for origin, lastmod in zip(origins, lastmods, strict=True):
        row = stored.get(origin)
        key = (lastmod or "no sitemap", row["classification"] if row else "none")
        counts = (1, *(int(row[c]) if row else 0 for c in TEST_COUNTS))
        before = trust.get(key, (0,) * len(counts))
        trust[key] = tuple(a + b for a, b in zip(before, counts, strict=True))
    return int(reads) / seconds, trust


async def run_hints(config: LiveConfig, maintenance_url: str) -> HintsRun:
    """The hint comparison (``compare="hints"``): the optimal daemon taking its sites'
    sitemap dates as evidence and the same daemon ignoring them, side by side."""
    if config.compare != "hints":
        raise ValueError("run_hints runs the hint comparison")
    pages, recorded, sitemaps = await _run_arms(config, maintenance_url)
    evaluation = await asyncio.to_thread(
        evaluate_hints, pages, {s: r[0] for s, r in recorded.items()}, config.shape()
    )
    return HintsRun(
        evaluation,
        {s: r[0] for s, r in sitemaps.items()},
        {s: r[1] for s, r in sitemaps.items()},
    )
