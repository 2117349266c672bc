"""The planner: re-solve μ and the prior so the fleet's fetch rate matches the budget.

It runs in a process of its own (``PlannerProcess``, niced) with its own connections, so the
fetch loop never waits for it. One daemon per fleet solves in a round (``planner_claim_round``:
whoever finds the last round older than most of an interval); the others adopt the stored
state.

A round reads a bounded, stratified sample of the live population (``id_strata``: a few
URLs from random starts spread over the primary key), fits the empirical-Bayes prior on it,
and solves μ for the budget scaled to the sample, with each host's politeness cap scaled the
same way. It then walks the population in small chunks and reschedules only URLs whose fetch
rate moved materially, through the same ``crawler.core.schedule.next_fetch`` the worker calls
after a fetch (so a detected update period survives a re-plan). Each statement is its own
short transaction and skips rows a fetcher holds locked, so the planner never waits for the
fetch loop and is never in a deadlock with it. No lock is held across the solve.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import heapq
import logging
import math
import multiprocessing
import os
import signal
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection

import asyncpg
import numpy as np

from crawler.core.budget import (
    BUDGET_CONFIGURED,
    PopulationPlan,
    budget_in_force,
    collection_estimates,
    estimated_population,
    fleet_budget_per_day,
    id_strata,
    plan_population,
)
from crawler.core.estimate import DEFAULT_PRIOR, ChangeHistory, GammaPrior, fit_gamma_prior
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.replan import (
    current_rates,
    interval_bounds_days,
    moved_urls,
    policy_moved,
    replanned,
)
from crawler.core.schedule import SchedulePolicy, uniform_interval_seconds
from crawler.core.stored_plan import (
    BUDGET_FROM_DEFAULT,
    BUDGET_FROM_SETTING,
    Plan,
    SolvedFor,
    applied,
    plan_document,
    plan_from_row,
    settings_moved,
    solved_for,
)
from crawler.db.connect import create_pool
from crawler.db.errors import DB_ERRORS, raise_if_cancelling, retried_later
from crawler.db.frontier import record_from_row, refresh_hosts, to_datetime
from crawler.db.queries import QUERIES
from crawler.metrics import Events

log = logging.getLogger(__name__)

RESCHEDULE_CHUNK = 2_000
# After each sample statement the planner rests half as long as it took (the solve waits on the
# sample, so it stays quick: at most two thirds of a core). After each chunk of the rescheduling
# walk it rests twice as long: the walk is background work whose writes hit the same rows and
# the same database backends as the fetch loop (a niced planner process does not nice them), so
# it takes at most a third of its connection's time and the fetch loop keeps the rest.
SAMPLE_REST_PER_WORK = 0.5
WALK_REST_PER_WORK = 2.0
# Hosts skipped by a due-time refresh (a fetcher held them locked) are retried this often, for
# at most this long after the walk.
HOST_REFRESH_RETRY_SECONDS = 0.2
HOST_REFRESH_PATIENCE_SECONDS = 10.0
# Live URLs read from each stratum of the key space.
URLS_PER_STRATUM = 50
STRATA_PER_STATEMENT = 200
# Host priors fitted per round (the hosts with most sampled URLs), and the sampled URLs a host
# needs for one (crawler.core.estimate.fit_priors_by_host's threshold).
MAX_HOST_PRIORS = 16
# The global prior's fit thins the sampled histories to this many (its cost is linear in them;
# two parameters need far fewer).
PRIOR_HISTORIES = 5_000
MIN_URLS_FOR_HOST_PRIOR = 50
# Plans kept in the database: the newest is in force; the rest are history for operators.
PLANS_KEPT = 100
# The planner process yields the CPU to the fetch loop when both want it.
PLANNER_NICENESS = 10
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
# How often the daemon checks that its planner process is still alive.
PLANNER_WATCH_SECONDS = 1.0
# A daemon whose heartbeat is older than this many heartbeats is counted as gone.
HEARTBEATS_TO_LIVE = 3.0


# Test hook (tests/acceptance/test_daemon_supervision.py): the first N starts of the planner in
# this daemon raise, so that supervision can be seen restarting it.
_TEST_FAILURES_LEFT = [int(os.environ.get("CRAWLER_TEST_PLANNER_FAIL", "0") or 0)]


def _test_failure_hook() -> None:
    if _TEST_FAILURES_LEFT[0] > 0:
        _TEST_FAILURES_LEFT[0] -= 1
        raise RuntimeError("planner made to fail by CRAWLER_TEST_PLANNER_FAIL")


@dataclass(frozen=True, slots=True)
class PlannerInputs:
    budget_per_day: float | None
    concurrency: int
    politeness_delay: float
    default_interval_seconds: float
    sample_urls: int
    heartbeat_seconds: float


@dataclass(frozen=True, slots=True)
class PlannerOutcome:
    mu: float
    budget_per_day: float
    achieved_per_day: float
    estimated_freshness: float
    estimated_beta_currency: float
    prior: GammaPrior
    rescheduled: int
    sampled: int
    population: float
    solve_seconds: float
    walked: bool = False  # whether the round walked the population (μ or the prior moved)
    version: int = 0  # the stored plan's


@dataclass(frozen=True, slots=True)
class Sample:
    """The sampled live URLs, as arrays (one entry per URL)."""

    host_ids: np.ndarray
    importance: np.ndarray
    change_rates: np.ndarray  # NaN where the URL has no estimate yet
    crawl_delays: np.ndarray  # NaN where the host has no Crawl-delay
    histories: dict[str, list[ChangeHistory]]
    population: float
    url_histories: list[ChangeHistory | None]  # per sampled URL, None where it has none
    # The URLs' own interval bounds (crawler bound), in seconds; NaN where they have none.
    own_min_seconds: np.ndarray | None = None
    own_max_seconds: np.ndarray | None = None


async def read_sample(pool: asyncpg.Pool, size: int, rng: np.random.Generator) -> Sample:
    """A stratified sample of about ``size`` live URLs, in statements of bounded size; the
    whole live population, counted exactly, when the sample's estimate of it is no larger.

    The strata start at random keys, so a small or sparse population (after a large
    ``crawler remove``, say) is estimated from the few rows past each start, and the estimate,
    and with it the budget, jumped from round to round on a frontier that did not change."""
    bounds = await pool.fetchrow(QUERIES["planner_id_range"])
    rows = _SampleRows()
    if bounds is None or bounds["min_id"] is None:
        return rows.sample(0.0)
    strata = id_strata(
        bounds["min_id"], bounds["max_id"], max(1, size // URLS_PER_STRATUM), rng
    )
    n = strata.starts.size
    rows_read = np.zeros(n, dtype=np.int64)
    last_ids = strata.starts.copy()
    for first in range(0, n, STRATA_PER_STATEMENT):
        last = min(n, first + STRATA_PER_STATEMENT)
        statement_started = time.monotonic()
        for row in await pool.fetch(
            QUERIES["planner_sample"],
            strata.starts[first:last].tolist(),
            strata.ends[first:last].tolist(),
            URLS_PER_STRATUM,
        ):
            k = first + row["stratum"] - 1
            rows_read[k] += 1
            last_ids[k] = max(last_ids[k], row["id"])
            rows.add(row)
        await _rest(statement_started, SAMPLE_REST_PER_WORK)
    population = estimated_population(strata, rows_read, last_ids, URLS_PER_STRATUM)
    if population <= size:
        whole = await _read_whole(pool, bounds["min_id"], bounds["max_id"], size)
        if whole is not None:
            return whole
    return rows.sample(max(population, float(len(rows.host_ids))))


async def _read_whole(pool: asyncpg.Pool, min_id: int, max_id: int, size: int) -> Sample | None:
    """Every live URL in key order, in statements of bounded size (the sample statement over
    one stratum, resumed after the last key read); None once there are more than ``size``."""
    rows = _SampleRows()
    chunk = URLS_PER_STRATUM * STRATA_PER_STATEMENT
    start = min_id
    while True:
        statement_started = time.monotonic()
        got = await pool.fetch(QUERIES["planner_sample"], [start], [max_id + 1], chunk)
        for row in got:
            rows.add(row)
            start = max(start, row["id"] + 1)
        await _rest(statement_started, SAMPLE_REST_PER_WORK)
        if len(rows.host_ids) > size:
            return None
        if len(got) < chunk:
            return rows.sample(float(len(rows.host_ids)))


class _SampleRows:
    """The sampled URLs' columns, as they are read."""

    def __init__(self) -> None:
        self.host_ids: list[int] = []
        self.importance: list[float] = []
        self.change_rates: list[float] = []
        self.delays: list[float] = []
        self.histories: dict[str, list[ChangeHistory]] = defaultdict(list)
        self.url_histories: list[ChangeHistory | None] = []
        self.own_min: list[float] = []
        self.own_max: list[float] = []

    def add(self, row: asyncpg.Record) -> None:
        nan = float("nan")
        own_min, own_max = row["own_min_interval_seconds"], row["own_max_interval_seconds"]
        self.own_min.append(nan if own_min is None else own_min)
        self.own_max.append(nan if own_max is None else own_max)
        self.host_ids.append(row["host_id"])
        self.importance.append(row["importance"])
        rate = row["change_rate_per_day"]
        self.change_rates.append(nan if rate is None else rate)
        delay = row["crawl_delay_seconds"]
        self.delays.append(nan if delay is None else delay)
        history = None
        if row["intervals_observed"] > 0:
            history = ChangeHistory(
                tuple(row["changed_intervals_days"] or ()),
                row["unchanged_days"],
                row["intervals_observed"],
            )
            self.histories[str(row["host_id"])].append(history)
        self.url_histories.append(history)

    def sample(self, population: float) -> Sample:
        return Sample(
            np.array(self.host_ids, dtype=np.int64),
            np.array(self.importance, dtype=np.float64),
            np.array(self.change_rates, dtype=np.float64),
            np.array(self.delays, dtype=np.float64),
            dict(self.histories),
            population,
            self.url_histories,
            np.array(self.own_min, dtype=np.float64),
            np.array(self.own_max, dtype=np.float64),
        )


async def _rest(work_started: float, per_work: float) -> None:
    """Rest in proportion to the work just done, so the planner takes a bounded share."""
    await asyncio.sleep(per_work * (time.monotonic() - work_started))


async def fleet_budget(pool: asyncpg.Pool, inputs: PlannerInputs) -> float:
    """The derived budget: what politeness allows across the hosts the whole fleet can work."""
    fleet = await pool.fetchrow(
        QUERIES["fleet_concurrency"], HEARTBEATS_TO_LIVE * inputs.heartbeat_seconds
    )
    concurrency = max(inputs.concurrency, int(fleet["concurrency"]) if fleet else 0)
    rates = await pool.fetchrow(
        QUERIES["fleet_host_rates"], inputs.politeness_delay, concurrency
    )
    assert rates is not None
    return fleet_budget_per_day(rates["all_per_day"], rates["busiest_per_day"])


async def latest_plan(conn: asyncpg.Connection | asyncpg.Pool) -> Plan | None:
    """The newest stored plan, None before the first."""
    row = await conn.fetchrow(QUERIES["latest_plan"])
    return None if row is None else plan_from_row(row)


async def store_plan(pool: asyncpg.Pool, plan: Plan) -> Plan:
    """Store ``plan`` as the newest; returns it with its version. Old plans beyond
    PLANS_KEPT are pruned."""
    version = await pool.fetchval(QUERIES["store_plan"], plan_document(plan))
    await pool.execute(QUERIES["prune_plans"], PLANS_KEPT)
    return replace(plan, version=int(version))


async def solve_once(
    pool: asyncpg.Pool,
    policy: SchedulePolicy,
    inputs: PlannerInputs,
    *,
    window_seconds: float,
    round_seconds: float,
    owner: str = "",
    rng: np.random.Generator | None = None,
    on_solved: Callable[[SchedulePolicy, PlannerOutcome], None] | None = None,
    stale_hosts: set[int] | None = None,
    walked: SchedulePolicy | None = None,
    force: bool = False,
) -> tuple[SchedulePolicy, PlannerOutcome | None]:
    """One planning round. Returns the policy to use, and the outcome when this daemon solved.

    ``stale_hosts``: see ``reschedule``; the round first refreshes those left by the last one.
    ``walked``: the policy of this daemon's last walk over the population (None: none yet);
    the round walks when the settings, μ or the prior moved materially since
    (``policy_moved``). ``force``: solve even if another daemon solved this interval's round
    (this daemon's settings differ from those the stored plan was solved for).

    The plan is stored before the (long) walk that reschedules the population, so that every
    fetch process adopts it at once; ``on_solved`` hears it then.
    """
    if stale_hosts:
        await refresh_hosts(pool, stale_hosts)
    claimed = await pool.fetchval(
        QUERIES["planner_claim_round"], 0.0 if force else round_seconds
    )
    if claimed is None:
        return applied(policy, await latest_plan(pool)), None
    started = time.monotonic()
    sample = await read_sample(pool, inputs.sample_urls, rng or np.random.default_rng())
    prior, host_priors = await asyncio.to_thread(fit_priors, sample.histories)
    if sample.host_ids.size == 0:
        return replace(policy, prior=prior, host_priors=host_priors), None
    budget, budget_source = budget_in_force(
        inputs.budget_per_day,
        round(sample.population),
        inputs.default_interval_seconds,
        await fleet_budget(pool, inputs) if inputs.budget_per_day is None else 0.0,
    )
    if policy.mode == "optimal":
        solved = await asyncio.to_thread(
            _solve_sample, sample, prior, host_priors, budget, policy, inputs.politeness_delay
        )
        mu: float | None = solved.mu
        freshness, currency = solved.estimated_freshness, solved.estimated_beta_currency
    else:
        mu = None
        freshness, currency = _uniform_estimates(sample, prior, host_priors, policy)
    solve_seconds = time.monotonic() - started
    fetched = await pool.fetchval(QUERIES["fetches_since"], window_seconds)
    achieved = float(fetched) * SECONDS_PER_DAY / window_seconds
    plan = await store_plan(pool, Plan(
        solved_for=solved_for(policy, inputs.budget_per_day),
        budget_per_day=budget,
        budget_source=(
            BUDGET_FROM_SETTING if budget_source == BUDGET_CONFIGURED else BUDGET_FROM_DEFAULT
        ),
        mu=mu,
        prior=prior,
        host_priors=host_priors,
        estimated_freshness=freshness,
        estimated_beta_currency=currency,
        achieved_per_day=achieved,
        sampled=int(sample.host_ids.size),
        population=sample.population,
        solved_by=owner,
    ))
    new_policy = applied(policy, plan)
    outcome = PlannerOutcome(
        mu if mu is not None else math.nan, budget, achieved, freshness, currency,
        prior, 0, int(sample.host_ids.size), sample.population, solve_seconds,
        version=plan.version,
    )
    if on_solved is not None:
        on_solved(new_policy, outcome)
    if policy_moved(walked, new_policy):
        outcome = replace(
            outcome, rescheduled=await reschedule(pool, new_policy, stale_hosts), walked=True
        )
    # When the round ended (updated_at) and how long it took: figures for operators and tests.
    await pool.execute(
        QUERIES["store_planner_state"], ["round_seconds"], [time.monotonic() - started]
    )
    return new_policy, outcome


def _uniform_estimates(
    sample: Sample,
    prior: GammaPrior,
    host_priors: dict[int, GammaPrior],
    policy: SchedulePolicy,
) -> tuple[float, float]:
    """The uniform schedule's expected freshness and β-currency on the sample."""
    rates = _sample_rates(sample, prior, host_priors)
    shortest, longest = interval_bounds_days(
        policy, rates.size, sample.own_min_seconds, sample.own_max_seconds
    )
    uniform = 1.0 / np.clip(uniform_interval_seconds(policy) / SECONDS_PER_DAY, shortest, longest)
    return collection_estimates(
        rates, uniform, sample.importance, policy.beta_seconds / SECONDS_PER_DAY
    )


def _sample_rates(
    sample: Sample, prior: GammaPrior, host_priors: dict[int, GammaPrior]
) -> np.ndarray:
    """The sampled URLs' change rates as their next fetches will estimate them, under the
    priors just fitted (``crawler.core.replan.current_rates``)."""
    return current_rates(
        sample.url_histories, sample.change_rates, sample.host_ids.tolist(), prior, host_priors
    )


def fit_priors(
    histories: dict[str, list[ChangeHistory]],
) -> tuple[GammaPrior, dict[int, GammaPrior]]:
    """The global prior from every sampled history; host priors for the best-sampled hosts.

    Each fit is a small optimisation (about 0.1 s): bounding their number bounds the round.
    """
    everyone = [h for host in histories.values() for h in host]
    prior = fit_gamma_prior(everyone, max_histories=PRIOR_HISTORIES) or DEFAULT_PRIOR
    largest = heapq.nlargest(MAX_HOST_PRIORS, histories, key=lambda k: len(histories[k]))
    host_priors: dict[int, GammaPrior] = {}
    for host in largest:
        if len(histories[host]) >= MIN_URLS_FOR_HOST_PRIOR:
            fitted = fit_gamma_prior(histories[host], min_histories=MIN_URLS_FOR_HOST_PRIOR)
            if fitted is not None:
                host_priors[int(host)] = fitted
    return prior, host_priors


def _solve_sample(
    sample: Sample,
    prior: GammaPrior,
    host_priors: dict[int, GammaPrior],
    budget_per_day: float,
    policy: SchedulePolicy,
    politeness_delay: float,
) -> PopulationPlan:
    """μ for the sample: the budget and every host's cap shrink by the sampling fraction.

    Each sampled URL stands for 1/fraction URLs, so the sample's share of the budget is
    budget × fraction, and a host's cap of one request per delay becomes one per
    delay / fraction among its sampled URLs. μ itself does not depend on the scale.
    """
    fraction = min(1.0, sample.host_ids.size / max(sample.population, 1.0))
    rates = _sample_rates(sample, prior, host_priors)
    _, first, host_index = np.unique(sample.host_ids, return_index=True, return_inverse=True)
    crawl_delays = sample.crawl_delays[first]
    delays = np.where(
        np.isnan(crawl_delays), politeness_delay, np.maximum(crawl_delays, politeness_delay)
    )
    # Each URL's own bounds (crawler bound) are box constraints of the same solve: what they
    # force is spent first, the rest of the budget goes where it does most good.
    shortest, longest = interval_bounds_days(
        policy, rates.size, sample.own_min_seconds, sample.own_max_seconds
    )
    return plan_population(
        rates,
        sample.importance,
        budget_per_day * fraction,
        objective=policy.objective,
        beta_days=policy.beta_seconds / SECONDS_PER_DAY,
        min_interval_days=shortest,
        max_interval_days=longest,
        host_index=host_index,
        host_delays_seconds=delays / fraction,
        mu_hint=policy.mu,
    )


async def reschedule(
    pool: asyncpg.Pool, policy: SchedulePolicy, stale_hosts: set[int] | None = None
) -> int:
    """Walk the live population in chunks; reschedule URLs whose fetch rate moved materially.

    Each chunk is read, decided and written in statements of their own, each its own short
    transaction, and every write skips rows a fetcher holds locked instead of waiting: the
    fetch loop never waits for a lock the planner holds across two statements, and the
    planner is never in a deadlock with it. A URL whose host is leased, or fetched meanwhile,
    is left to its fetcher; a host skipped when its due time is refreshed is retried.
    ``stale_hosts`` holds the hosts whose URLs moved but whose due time is not refreshed yet:
    the caller keeps it across rounds, so that a walk cut short by a database error is caught
    up by the next.
    """
    after = 0
    moved_total = 0
    stale = set() if stale_hosts is None else stale_hosts
    while True:
        chunk_started = time.monotonic()
        rows = await pool.fetch(QUERIES["reschedule_scan"], after, RESCHEDULE_CHUNK)
        if not rows:
            break
        after = rows[-1]["id"]
        ids = np.array([r["id"] for r in rows], dtype=np.int64)
        host_ids = np.array([r["host_id"] for r in rows], dtype=np.int64)
        old = np.array(
            [r["fetch_rate_per_day"] or 0.0 for r in rows], dtype=np.float64
        )
        stored = np.array(
            [r["change_rate_per_day"] if r["change_rate_per_day"] is not None else np.nan
             for r in rows],
            dtype=np.float64,
        )
        histories = [
            ChangeHistory(tuple(r["changed_intervals_days"] or ()), r["unchanged_days"],
                          r["intervals_observed"]) if r["intervals_observed"] > 0 else None
            for r in rows
        ]
        # As the URLs' next fetches will estimate them under the policy's priors, so that a
        # refitted prior moves the URLs whose rate it moves.
        change = current_rates(
            histories, stored, host_ids.tolist(), policy.prior, policy.host_priors
        )
        weights = np.array([r["importance"] for r in rows], dtype=np.float64)
        own_min = np.array([np.nan if r["own_min_interval_seconds"] is None
                            else r["own_min_interval_seconds"] for r in rows], dtype=np.float64)
        own_max = np.array([np.nan if r["own_max_interval_seconds"] is None
                            else r["own_max_interval_seconds"] for r in rows], dtype=np.float64)
        moved = moved_urls(old, change, weights, policy, own_min, own_max)
        if moved.any():
            count, hosts = await _reschedule_ids(
                pool, ids[moved].tolist(), host_ids[moved].tolist(), policy
            )
            moved_total += count
            stale.update(hosts)
            await refresh_hosts(pool, stale)
        await _rest(chunk_started, WALK_REST_PER_WORK)
    deadline = time.monotonic() + HOST_REFRESH_PATIENCE_SECONDS
    while stale and time.monotonic() < deadline:
        await asyncio.sleep(HOST_REFRESH_RETRY_SECONDS)
        await refresh_hosts(pool, stale)
    if stale:  # held by fetchers all along: the next round tries them again
        log.info("planner: %d hosts stayed locked; the next round refreshes them", len(stale))
    return moved_total


async def _reschedule_ids(
    pool: asyncpg.Pool, ids: list[int], host_ids: list[int], policy: SchedulePolicy
) -> tuple[int, set[int]]:
    """Reschedule ``ids``; returns how many were written and the hosts they belong to."""
    now = time.time()
    records = [record_from_row(r) for r in await pool.fetch(QUERIES["reschedule_records"], ids,
                                                            host_ids)]
    due_ids: list[int] = []
    due_hosts: list[int] = []
    due_at: list[object] = []
    rates: list[float | None] = []
    last: list[object] = []
    change: list[float | None] = []
    for record in records:
        if record.last_fetched_at is None:
            continue
        schedule = replanned(record, policy, now)
        due_ids.append(record.url_id)
        due_hosts.append(record.host_id)
        due_at.append(to_datetime(schedule.next_fetch_at))
        rates.append(schedule.fetch_rate_per_day)
        last.append(to_datetime(record.last_fetched_at))
        change.append(schedule.change_rate_per_day)
    if not due_ids:
        return 0, set()
    touched = await pool.fetch(
        QUERIES["reschedule_urls"], due_ids, due_at, rates, last, change, due_hosts
    )
    return len(touched), {r["host_id"] for r in touched}


async def run_planner(
    pool: asyncpg.Pool,
    policy: SchedulePolicy,
    inputs: PlannerInputs,
    solved: Callable[[PlannerOutcome], None],
    interval_seconds: float,
    owner: str = "",
) -> None:
    """Plan now, then every ``interval_seconds`` (skipping rounds another daemon has solved).

    The first round solves even if another daemon solved this interval's, when this daemon's
    settings differ from those the newest plan was solved for: a new budget, objective, mode
    or interval bound takes effect at start, not a planner interval later.
    """
    # A round another daemon started less than this long ago counts as this interval's.
    round_seconds = 0.8 * interval_seconds
    stale_hosts: set[int] = set()  # URLs rescheduled, due time not yet refreshed
    walked: SchedulePolicy | None = None  # the policy of the last walk over the population
    wanted = solved_for(policy, inputs.budget_per_day)
    force: bool | None = None  # decided once, against the plan in force at start
    while True:
        started = time.monotonic()
        with retried_later("the planner round", log):
            if force is None:
                stored = await latest_plan(pool)
                force = settings_moved(stored, wanted)
                if force and stored is not None:
                    log.info("planner: settings differ from those plan %d was solved for "
                             "(%s); re-planning now", stored.version,
                             _settings_change(stored.solved_for, wanted))
            policy, outcome = await solve_once(
                pool, policy, inputs,
                window_seconds=max(2.0 * interval_seconds, 5.0), round_seconds=round_seconds,
                owner=owner, stale_hosts=stale_hosts, walked=walked, force=force,
            )
            force = False
            if outcome is not None:
                solved(outcome)
                if outcome.walked:
                    walked = policy
                log.info(
                    "planner: plan %d mu=%.4g budget=%.0f/day achieved=%.0f/day "
                    "freshness=%.3f sampled=%d of ~%.0f, solved in %.2fs; rescheduled=%d "
                    "prior=(%.3g, %.3g) round %.2fs",
                    outcome.version, outcome.mu, outcome.budget_per_day,
                    outcome.achieved_per_day, outcome.estimated_freshness, outcome.sampled,
                    outcome.population, outcome.solve_seconds, outcome.rescheduled,
                    outcome.prior.shape, outcome.prior.rate, time.monotonic() - started,
                )
        await asyncio.sleep(interval_seconds)


def _settings_change(old: SolvedFor, new: SolvedFor) -> str:
    """What moved between two SolvedFor, in words: "budget_setting_per_day 1000 -> 500"."""
    moved = [
        f"{name} {getattr(old, name)} -> {getattr(new, name)}"
        for name in SolvedFor.__dataclass_fields__
        if getattr(old, name) != getattr(new, name)
    ]
    return ", ".join(moved)


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """What the planner process needs, all picklable (it starts by ``spawn``)."""

    url: str
    policy: SchedulePolicy
    inputs: PlannerInputs
    interval_seconds: float
    log_level: str = "INFO"
    log_json: bool = False
    owner: str = ""  # the daemon it plans for, stored with each plan it solves


class PlannerProcess:
    """``run_planner`` in a process of its own, at a lower CPU priority than the daemon.

    A thread would share the interpreter lock with the fetch loop and, measured on a busy
    2-core machine, took a third of its fetch rate during a round. The plan it solves goes to
    the database, where every fetch process reads it; the process sends each outcome over a
    pipe for this daemon's metrics. It ends when told to, or when the pipe closes because the
    daemon is gone.
    """

    def __init__(self, config: PlannerConfig, events: Events) -> None:
        self._config = config
        self._events = events
        context = multiprocessing.get_context("spawn")
        self._conn, child_conn = context.Pipe()
        self._child_conn = child_conn
        self._process = context.Process(
            target=planner_process_main, args=(config, child_conn), name="crawler-planner",
            daemon=True,
        )

    def start(self) -> None:
        self._process.start()
        self._child_conn.close()
        asyncio.get_running_loop().add_reader(self._conn.fileno(), self._receive)

    def _receive(self) -> None:
        try:
            kind, value = self._conn.recv()
        except (EOFError, OSError):
            asyncio.get_running_loop().remove_reader(self._conn.fileno())
            return
        if kind == "outcome":
            report_outcome(self._events, value)

    @property
    def exitcode(self) -> int | None:
        """None while the process runs."""
        return self._process.exitcode

    async def stop(self, timeout: float = 10.0) -> None:
        """Tell the planner to stop, wait briefly, then terminate it."""
        with contextlib.suppress(ValueError, OSError):
            asyncio.get_running_loop().remove_reader(self._conn.fileno())
        with contextlib.suppress(OSError, ValueError):
            self._conn.send(("stop", None))
        await asyncio.to_thread(self._process.join, timeout)
        if self._process.is_alive():
            self._process.terminate()
            await asyncio.to_thread(self._process.join, timeout)
        self._conn.close()


async def supervised_planner(config: PlannerConfig, events: Events) -> None:
    """The planner process as a side task: it raises when the process dies unasked, so the
    daemon's supervisor logs it, reports not ready and starts a new one with backoff."""
    _test_failure_hook()
    process = PlannerProcess(config, events)
    process.start()
    try:
        while process.exitcode is None:
            await asyncio.sleep(PLANNER_WATCH_SECONDS)
        raise RuntimeError(f"the planner process exited with code {process.exitcode}")
    finally:
        await process.stop()


def report_outcome(events: Events, outcome: PlannerOutcome) -> None:
    events.plan_solved(
        mu=outcome.mu,
        budget_per_day=outcome.budget_per_day,
        achieved_fetch_rate_per_day=outcome.achieved_per_day,
        prior_shape=outcome.prior.shape,
        prior_mean_rate_per_day=outcome.prior.mean_rate_per_day,
    )
    events.collection_estimated(
        freshness=outcome.estimated_freshness,
        beta_currency=outcome.estimated_beta_currency,
    )


def planner_process_main(config: PlannerConfig, conn: Connection) -> None:
    """Entry point of the planner process."""
    from crawler.logs import configure

    configure(config.log_level, json_lines=config.log_json)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the daemon's to handle
    _die_with_daemon()
    with contextlib.suppress(OSError):
        os.nice(PLANNER_NICENESS)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_planner_process(config, conn))


def _die_with_daemon() -> None:
    """SIGTERM when the daemon dies, even by SIGKILL (Linux prctl). The pipe's end stops the
    planner too, but only between statements, not in the middle of a solve."""
    with contextlib.suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)


async def planner_pool(url: str) -> asyncpg.Pool:
    """The planner process's connections: two, each statement planned for its parameters
    (``crawler.db.connect.create_pool``'s ``custom_plans``: the walk's array statements)."""
    return await create_pool(url, min_size=1, max_size=2, custom_plans=True)


async def _planner_process(config: PlannerConfig, conn: Connection) -> None:
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None

    def on_message() -> None:
        try:
            kind, _ = conn.recv()
        except (EOFError, OSError):
            kind = "stop"  # the daemon is gone
        if kind == "stop":
            loop.remove_reader(conn.fileno())
            task.cancel()

    loop.add_reader(conn.fileno(), on_message)

    def solved(outcome: PlannerOutcome) -> None:
        with contextlib.suppress(OSError):
            conn.send(("outcome", outcome))

    pool: asyncpg.Pool | None = None
    try:
        while pool is None:
            try:
                pool = await planner_pool(config.url)
            except DB_ERRORS as exc:
                raise_if_cancelling()
                log.warning("planner: database unavailable (%s); retrying", exc)
                await asyncio.sleep(1.0)
        await run_planner(
            pool, config.policy, config.inputs, solved, config.interval_seconds, config.owner
        )
    except asyncio.CancelledError:
        pass
    finally:
        if pool is not None:
            with contextlib.suppress(*DB_ERRORS, asyncio.TimeoutError):
                await asyncio.wait_for(pool.close(), 5.0)
