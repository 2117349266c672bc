"""The planner side task: re-solve μ and the prior so the fetch rate matches the budget.

Every ``planner_interval`` seconds one daemon (an advisory lock elects it) reads the
population's estimates, fits the empirical-Bayes prior (per host where a host has enough
URLs), solves μ under per-host politeness caps, stores μ and the prior in ``planner_state``
and moves each URL's next fetch to its new rate. Every daemon then adopts the stored state
for its own per-fetch rescheduling.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace

import asyncpg
import numpy as np

from crawler.core.budget import derived_budget_per_day, plan_population
from crawler.core.estimate import ChangeHistory, GammaPrior, fit_priors_by_host
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.schedule import SchedulePolicy
from crawler.db import frontier
from crawler.db.frontier import to_datetime, to_seconds
from crawler.db.queries import QUERIES
from crawler.metrics import Events

log = logging.getLogger(__name__)

PRIOR_SAMPLE = 20_000
# Rates that moved less than this keep their schedule (no churn of rows for nothing).
RESCHEDULE_RELATIVE_CHANGE = 0.1
RESCHEDULE_BATCH = 10_000


@dataclass(frozen=True, slots=True)
class PlannerInputs:
    budget_per_day: float | None
    concurrency: int
    politeness_delay: float


@dataclass(frozen=True, slots=True)
class PlannerOutcome:
    mu: float
    budget_per_day: float
    achieved_per_day: float
    estimated_freshness: float
    estimated_beta_currency: float
    prior: GammaPrior
    rescheduled: int


async def solve_once(
    pool: asyncpg.Pool,
    policy: SchedulePolicy,
    inputs: PlannerInputs,
    *,
    window_seconds: float,
) -> tuple[SchedulePolicy, PlannerOutcome | None]:
    """One planning round. Returns the policy to use, and the outcome when this daemon solved."""
    async with pool.acquire() as conn, conn.transaction():
        if not await conn.fetchval(QUERIES["planner_lock"]):
            return await _adopt_stored(conn, policy), None
        histories_rows = await conn.fetch(QUERIES["planner_histories"], PRIOR_SAMPLE)
        by_host: dict[str, list[ChangeHistory]] = defaultdict(list)
        for row in histories_rows:
            by_host[str(row["host_id"])].append(
                ChangeHistory(
                    tuple(row["changed_intervals_days"] or ()),
                    row["unchanged_days"],
                    row["intervals_observed"],
                )
            )
        prior, host_priors_by_name = fit_priors_by_host(by_host)
        host_priors = {int(k): v for k, v in host_priors_by_name.items()}

        rows = await conn.fetch(QUERIES["planner_population"])
        if not rows:
            return replace(policy, prior=prior, host_priors=host_priors), None
        ids = np.array([r["id"] for r in rows], dtype=np.int64)
        host_ids = np.array([r["host_id"] for r in rows], dtype=np.int64)
        unique_hosts, host_index = np.unique(host_ids, return_inverse=True)
        delay_by_host = {
            r["host_id"]: max(inputs.politeness_delay, r["crawl_delay_seconds"] or 0.0)
            for r in rows
        }
        host_delays = np.array([delay_by_host[h] for h in unique_hosts.tolist()])
        change_rates = np.array(
            [
                r["change_rate_per_day"]
                if r["change_rate_per_day"] is not None
                else host_priors.get(r["host_id"], prior).mean_rate_per_day
                for r in rows
            ]
        )
        weights = np.array([r["importance"] for r in rows])
        budget = inputs.budget_per_day or derived_budget_per_day(host_delays, inputs.concurrency)
        plan = plan_population(
            change_rates,
            weights,
            budget,
            objective=policy.objective,
            beta_days=policy.beta_seconds / SECONDS_PER_DAY,
            min_interval_days=policy.min_interval_seconds / SECONDS_PER_DAY,
            max_interval_days=policy.max_interval_seconds / SECONDS_PER_DAY,
            host_index=host_index,
            host_delays_seconds=host_delays,
            mu_hint=policy.mu,
        )
        rescheduled = await _reschedule(conn, rows, ids, plan.fetch_rates_per_day)
        fetched = await conn.fetchval(QUERIES["fetches_since"], window_seconds)
        achieved = float(fetched) * SECONDS_PER_DAY / window_seconds
        await conn.execute(
            QUERIES["store_planner_state"],
            ["mu", "prior_shape", "prior_rate", "budget_per_day", "achieved_per_day",
             "estimated_freshness", "estimated_beta_currency"],
            [plan.mu, prior.shape, prior.rate, budget, achieved, plan.estimated_freshness,
             plan.estimated_beta_currency],
        )
    outcome = PlannerOutcome(
        plan.mu, budget, achieved, plan.estimated_freshness, plan.estimated_beta_currency,
        prior, rescheduled,
    )
    return replace(policy, mu=plan.mu, prior=prior, host_priors=host_priors), outcome


async def _reschedule(
    conn: asyncpg.Connection,
    rows: list[asyncpg.Record],
    ids: np.ndarray,
    new_rates: np.ndarray,
) -> int:
    """Move each URL whose rate changed to last fetch + 1/f (now at the earliest)."""
    now = time.time()
    due_ids: list[int] = []
    due_at: list[object] = []
    due_rates: list[float] = []
    for i, row in enumerate(rows):
        new_rate = float(new_rates[i])
        old_rate = row["fetch_rate_per_day"]
        last = to_seconds(row["last_fetched_at"])
        if last is None or new_rate <= 0:
            continue  # never fetched: it is due already
        if old_rate and abs(new_rate - old_rate) <= RESCHEDULE_RELATIVE_CHANGE * old_rate:
            continue
        due_ids.append(int(ids[i]))
        due_at.append(to_datetime(max(now, last + SECONDS_PER_DAY / new_rate)))
        due_rates.append(new_rate)
    hosts: set[int] = set()
    for start in range(0, len(due_ids), RESCHEDULE_BATCH):
        end = start + RESCHEDULE_BATCH
        touched = await conn.fetch(
            QUERIES["reschedule_urls"], due_ids[start:end], due_at[start:end],
            due_rates[start:end],
        )
        hosts.update(r["host_id"] for r in touched)
    if hosts:
        await frontier.refresh_host_due(conn, sorted(hosts))
    return len(due_ids)


async def _adopt_stored(conn: asyncpg.Connection, policy: SchedulePolicy) -> SchedulePolicy:
    state = {r["key"]: r["value"] for r in await conn.fetch(QUERIES["load_planner_state"])}
    if "mu" not in state:
        return policy
    prior = policy.prior
    if state.get("prior_shape", 0) > 0 and state.get("prior_rate", 0) > 0:
        prior = GammaPrior(state["prior_shape"], state["prior_rate"])
    return replace(policy, mu=state["mu"], prior=prior)


async def run_planner(
    pool: asyncpg.Pool,
    get_policy: Callable[[], SchedulePolicy],
    set_policy: Callable[[SchedulePolicy], None],
    inputs: PlannerInputs,
    events: Events,
    interval_seconds: float,
) -> None:
    """Side task: plan now, then every ``interval_seconds``."""
    while True:
        started = time.monotonic()
        with contextlib.suppress(asyncpg.PostgresError, OSError, asyncpg.InterfaceError):
            policy, outcome = await solve_once(
                pool, get_policy(), inputs, window_seconds=max(2.0 * interval_seconds, 5.0)
            )
            set_policy(policy)
            if outcome is not None:
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
                log.info(
                    "planner: mu=%.4g budget=%.0f/day achieved=%.0f/day freshness=%.3f "
                    "rescheduled=%d prior=(%.3g, %.3g) in %.2fs",
                    outcome.mu, outcome.budget_per_day, outcome.achieved_per_day,
                    outcome.estimated_freshness, outcome.rescheduled, outcome.prior.shape,
                    outcome.prior.rate, time.monotonic() - started,
                )
        await asyncio.sleep(interval_seconds)
