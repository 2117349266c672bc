"""The planner: re-solve μ and the prior so the fleet's fetch rate matches the budget.

It runs in a process of its own (``PlannerProcess``, niced) with its own connections, so the
fetch loop never waits for it. One daemon per fleet solves in a round (``claim_round``:
whoever finds the last round older than most of an interval); the others adopt the stored
state.

A round reads a sample of the live population (``crawler.db.planning.read_sample``), fits the
empirical-Bayes prior on it and solves μ for the budget scaled to the sample
(``crawler.core.planning``), stores the plan, and then walks the population to reschedule
the URLs whose fetch rate moved materially (``crawler.db.planning.reschedule``). No lock is
held across the solve.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import multiprocessing
import os
import signal
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing.connection import Connection

import asyncpg
import numpy as np

from crawler.core.budget import BUDGET_CONFIGURED, budget_in_force
from crawler.core.planning import (
    PlannerOutcome,
    fit_priors,
    sample_rates,
    settings_change,
    solve_sample,
    uniform_estimates,
)
from crawler.core.replan import policy_moved
from crawler.core.schedule import SchedulePolicy
from crawler.core.stored_plan import (
    BUDGET_FROM_DEFAULT,
    BUDGET_FROM_SETTING,
    Plan,
    applied,
    settings_moved,
    solved_for,
)
from crawler.daemon.signals import die_with_parent
from crawler.db.errors import DB_ERRORS, raise_if_cancelling, retried_later
from crawler.db.frontier import refresh_hosts
from crawler.db.hints import observed_mu
from crawler.db.planning import (
    achieved_per_day,
    claim_round,
    fleet_budget,
    latest_plan,
    planner_pool,
    read_sample,
    reschedule,
    round_ended,
    store_plan,
)
from crawler.logs import configure
from crawler.metrics import Events

log = logging.getLogger(__name__)

# The planner process yields the CPU to the fetch loop when both want it.
PLANNER_NICENESS = 10
# How often the daemon checks that its planner process is still alive.
PLANNER_WATCH_SECONDS = 1.0


async def solve_once(
    pool: asyncpg.Pool,
    policy: SchedulePolicy,
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
    if not await claim_round(pool, 0.0 if force else round_seconds):
        return applied(policy, await latest_plan(pool)), None
    started = time.monotonic()
    settings = policy.settings
    sample = await read_sample(pool, settings.planner_sample_urls, rng or np.random.default_rng())
    prior, host_priors = await asyncio.to_thread(fit_priors, sample.histories)
    if sample.host_ids.size == 0:
        return replace(policy, prior=prior, host_priors=host_priors), None
    budget, budget_source = budget_in_force(
        settings.budget_per_day, round(sample.population), settings.default_interval,
        await fleet_budget(pool, settings) if settings.budget_per_day is None else 0.0,
    )
    complete_sampled = 0
    if settings.schedule == "optimal":
        solved = await asyncio.to_thread(
            solve_sample, sample, prior, host_priors, budget, policy, settings.politeness_delay
        )
        mu: float | None = solved.mu
        freshness, currency = solved.estimated_freshness, solved.estimated_beta_currency
        # The sampled pages whose changes are announced are planned as such, under
        # the same μ (crawler.db.hints.observed_mu); the estimates stay the blind ones'.
        observed = await observed_mu(
            pool, sample, sample_rates(sample, prior, host_priors), budget,
            replace(policy, prior=prior, host_priors=host_priors), settings.politeness_delay,
        )
        if observed is not None:
            mu, complete_sampled = observed
    else:
        mu = None
        freshness, currency = uniform_estimates(sample, prior, host_priors, policy)
    solve_seconds = time.monotonic() - started
    achieved = await achieved_per_day(pool, window_seconds)
    sampled = int(sample.host_ids.size)
    plan = await store_plan(pool, Plan(
        solved_for=solved_for(policy, settings.budget_per_day),
        budget_per_day=budget,
        budget_source=(
            BUDGET_FROM_SETTING if budget_source == BUDGET_CONFIGURED else BUDGET_FROM_DEFAULT
        ),
        mu=mu, prior=prior, host_priors=host_priors,
        estimated_freshness=freshness, estimated_beta_currency=currency,
        achieved_per_day=achieved, sampled=sampled, population=sample.population,
        solved_by=owner, complete_sampled=complete_sampled,
    ))
    new_policy = applied(policy, plan)
    outcome = PlannerOutcome(
        mu if mu is not None else math.nan, budget, achieved, freshness, currency, prior, 0,
        sampled, sample.population, solve_seconds, version=plan.version,
    )
    if on_solved is not None:
        on_solved(new_policy, outcome)
    if policy_moved(walked, new_policy):
        outcome = replace(
            outcome, rescheduled=await reschedule(pool, new_policy, stale_hosts), walked=True
        )
    await round_ended(pool, time.monotonic() - started)
    return new_policy, outcome


async def run_planner(pool: asyncpg.Pool, policy: SchedulePolicy,
                      solved: Callable[[PlannerOutcome], None], interval_seconds: float,
                      owner: str = "") -> None:
    """Plan now, then every ``interval_seconds`` (skipping rounds another daemon has solved).

    The first round solves even if another daemon solved this interval's, when this daemon's
    settings differ from those the newest plan was solved for: a new budget, objective, mode
    or interval bound takes effect at start, not a planner interval later.
    """
    # A round another daemon started less than this long ago counts as this interval's.
    round_seconds = 0.8 * interval_seconds
    stale_hosts: set[int] = set()  # URLs rescheduled, due time not yet refreshed
    walked: SchedulePolicy | None = None  # the policy of the last walk over the population
    wanted = solved_for(policy, policy.settings.budget_per_day)
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
                             settings_change(stored.solved_for, wanted))
            policy, outcome = await solve_once(
                pool, policy,
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


@dataclass(frozen=True, slots=True)
class PlannerConfig:
    """What the planner process needs, all picklable (it starts by ``spawn``)."""

    url: str
    policy: SchedulePolicy  # the settings' policy: the settings a round reads, no plan yet
    interval_seconds: float
    log_level: str = "INFO"
    log_json: bool = False
    owner: str = ""  # the daemon it plans for, stored with each plan it solves


class PlannerProcess:
    """``run_planner`` in a process of its own, at a lower CPU priority than the daemon (a
    thread would share the interpreter lock with the fetch loop). The plan goes to the
    database; each outcome comes back over a pipe for this daemon's metrics. It ends when told
    to, or when the pipe closes because the daemon is gone."""

    def __init__(self, config: PlannerConfig, events: Events) -> None:
        self._events = events
        context = multiprocessing.get_context("spawn")
        self._conn, self._child_conn = context.Pipe()
        self._process = context.Process(
            target=planner_process_main, args=(config, self._child_conn), name="crawler-planner",
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
        mu=outcome.mu, budget_per_day=outcome.budget_per_day,
        achieved_fetch_rate_per_day=outcome.achieved_per_day,
        prior_shape=outcome.prior.shape, prior_mean_rate_per_day=outcome.prior.mean_rate_per_day,
    )
    events.collection_estimated(freshness=outcome.estimated_freshness,
                                beta_currency=outcome.estimated_beta_currency)


def planner_process_main(config: PlannerConfig, conn: Connection) -> None:
    configure(config.log_level, json_lines=config.log_json)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the daemon's to handle
    # The pipe's end stops the planner too, but only between statements, not mid-solve.
    die_with_parent()
    with contextlib.suppress(OSError):
        os.nice(PLANNER_NICENESS)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(_planner_process(config, conn))


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
        await run_planner(pool, config.policy, solved, config.interval_seconds, config.owner)
    except asyncio.CancelledError:
        pass
    finally:
        if pool is not None:
            with contextlib.suppress(*DB_ERRORS, asyncio.TimeoutError):
                await asyncio.wait_for(pool.close(), 5.0)
