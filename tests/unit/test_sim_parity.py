"""The simulator's per-fetch decision is the daemon's: same record, same result, same time.

The daemon side is what the worker computes for a real fetched page: the transition of an
HTML body (parsed, simhash compared, record updated, next fetch scheduled); the simulator side
is `sim.step`, which answers with a text body naming the page's version. Over randomized
histories of clocked and Poisson pages, with failed fetches and pages that send a truthful
Last-Modified, both must leave the same record estimate, update clock and next fetch time
after every fetch. tests/integration/test_sim_parity_worker.py checks the same through the
real worker, its HTTP fetch and what it commits to PostgreSQL.
"""

from __future__ import annotations

import random
from dataclasses import replace

import pytest

from crawler.core.backoff import HostHealth
from crawler.core.estimate import GammaPrior
from crawler.core.model import (
    HTTP_ERROR,
    NETWORK_ERROR,
    OK,
    SECONDS_PER_DAY,
    TIMEOUT,
    FetchResult,
    Schedule,
    UrlRecord,
)
from crawler.core.observe import observe, parse_result, updated_record
from crawler.core.patterns import EVERY_URL
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, transition
from crawler.sim import step
from crawler.sim.step import first_record, simulated_fetch, simulated_result

HOUR = 1.0 / 24.0
THRESHOLD_BITS = 6
WORDS = [f"w{index}" for index in range(5000)]


def html_version(version: int) -> bytes:
    """A page whose text at each version shares nothing with the others: a real change."""
    words = random.Random(version).sample(WORDS, 120)
    return f"<html><body><p>{' '.join(words)}</p></body></html>".encode()


def daemon_fetch(
    record: UrlRecord, result: FetchResult, policy: SchedulePolicy
) -> tuple[UrlRecord, Schedule]:
    """What the worker computes for a fetch (crawler/daemon/worker.py) and the frontier
    stores: the transition of the real page, the estimate kept with the row."""
    settings = policy.settings.model_copy(
        update={"simhash_threshold": THRESHOLD_BITS, "max_outlinks": 100, "max_depth": 3})
    host = HostContext(HostHealth(), 1.0, result.fetched_at - 10.0)
    change = transition(record, result, host, replace(policy, settings=settings),
                        url_filter=EVERY_URL, now=result.fetched_at, rng_value=0.3)
    after = replace(change.record, change_rate_per_day=change.schedule.change_rate_per_day)
    return after, change.schedule


def change_instants(rng: random.Random, kind: str, days: float) -> list[float]:
    if kind == "hourly":
        phase = rng.random() * HOUR
        return [phase + k * HOUR + rng.gauss(0.0, 0.0007) for k in range(int(days * 24))]
    if kind == "daily":
        phase = rng.random()
        return [phase + k + rng.gauss(0.0, 0.004) for k in range(int(days))]
    rate = 10 ** rng.uniform(-1.0, 1.5)
    instants, now = [], 0.0
    while True:
        now += rng.expovariate(rate)
        if now > days:
            return instants
        instants.append(now)


@pytest.mark.parametrize("seed", range(12))
def test_simulator_step_decides_like_the_worker(seed: int) -> None:
    rng = random.Random(seed)
    kind = ["hourly", "daily", "poisson"][seed % 3]
    days = 6.0 if kind == "hourly" else 40.0
    dated = seed % 2 == 1  # odd seeds send a truthful Last-Modified
    instants = sorted(change_instants(rng, kind, days))
    policy = SchedulePolicy(
        step.sim_settings(schedule="optimal", max_interval=7 * SECONDS_PER_DAY),
        mu=rng.uniform(0.01, 2.0),
        prior=GammaPrior(rng.uniform(0.3, 2.0), rng.uniform(2.0, 40.0)),
    )
    sim_record = first_record(0)
    daemon_record = replace(sim_record, url="http://127.0.0.1/page")
    # Version 0 in HTML for the daemon, as the simulator's first record holds version 0.
    start = FetchResult(0.0, 0.0, OK, 200, html_version(0), "text/html")
    daemon_record = updated_record(
        UrlRecord(url_id=0, url="http://127.0.0.1/page"),
        start,
        observe(UrlRecord(url_id=0, url=""), start, THRESHOLD_BITS, parse_result(start)),
    )
    mean_gap = HOUR / 3 if kind == "hourly" else rng.uniform(0.1, 0.4)
    now, fetches, periodic_seen = 0.0, 0, False
    while now < days:
        now += rng.uniform(0.3, 1.7) * mean_gap
        version = sum(1 for t in instants if t <= now)
        last_change = max((t for t in instants if t <= now), default=None)
        draw = rng.random()
        outcome = OK if draw < 0.85 else rng.choice([NETWORK_ERROR, TIMEOUT, HTTP_ERROR])
        modified = last_change if dated else None
        sim_result = simulated_result(now, version, modified, outcome)
        real_result = (
            FetchResult(
                now * SECONDS_PER_DAY,
                0.2,
                OK,
                200,
                html_version(version),
                "text/html",
                last_modified=None if modified is None else modified * SECONDS_PER_DAY,
            )
            if outcome == OK
            else FetchResult(
                now * SECONDS_PER_DAY,
                0.2,
                outcome,
                500 if outcome == HTTP_ERROR else None,
                error_kind=outcome,
            )
        )
        sim_record, sim_schedule = simulated_fetch(sim_record, sim_result, policy)
        daemon_record, daemon_schedule = daemon_fetch(daemon_record, real_result, policy)
        assert sim_schedule == daemon_schedule, (fetches, outcome)
        assert sim_record.history == daemon_record.history
        assert sim_record.periodic == daemon_record.periodic
        assert sim_record.change_count == daemon_record.change_count
        assert sim_record.consecutive_failures == daemon_record.consecutive_failures
        periodic_seen |= daemon_record.periodic is not None
        fetches += 1
    assert fetches > 80
    if kind != "poisson":
        # The histories exercise the clock-timed path, not only the Poisson one.
        assert periodic_seen
