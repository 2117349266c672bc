"""Re-planning, shared by the daemon's planner and the simulator: when to walk the population,
which URLs to move, and that a URL parked at the maximum interval comes back."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from crawler.core.estimate import DEFAULT_PRIOR, GammaPrior
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.plan import fetch_rate_for
from crawler.core.replan import moved_urls, policy_moved, replanned
from crawler.core.schedule import SchedulePolicy
from crawler.sim.policies import Optimal
from crawler.sim.simulator import build_population, simulate_windows
from crawler.sim.step import first_record, sim_settings, simulated_fetch, simulated_result


def _policy(mu: float | None) -> SchedulePolicy:
    return SchedulePolicy(sim_settings(schedule="optimal", default_interval=SECONDS_PER_DAY),
                          prior=DEFAULT_PRIOR, mu=mu)


def test_a_walk_follows_drift_since_the_last_walk_not_since_the_last_round() -> None:
    walked = _policy(1.0)
    assert policy_moved(None, walked)
    assert not policy_moved(walked, replace(walked, mu=1.01))
    # Five rounds of 1% each: no single round moved 2%, but the walk's policy is 5% away.
    drifted = replace(walked, mu=1.01**5)
    assert policy_moved(walked, drifted)
    assert policy_moved(walked, replace(walked, prior=GammaPrior(0.6, 15.0)))


def test_moved_urls_are_those_whose_rate_moved_by_a_tenth() -> None:
    policy = _policy(0.5)
    change = np.array([0.1, 0.5, 2.0, 0.3])
    current = np.array(
        [fetch_rate_for(float(rate), 1.0, 0.5, "freshness", 60 / SECONDS_PER_DAY, 365.0)
         for rate in change]
    )
    stored = current * np.array([1.0, 1.05, 0.5, 1.0])
    stored[3] = 0.0  # never scheduled with a rate
    assert moved_urls(stored, change, np.ones(4), policy).tolist() == [False, False, True, True]


def test_a_page_parked_at_the_maximum_interval_comes_back_when_mu_drops() -> None:
    # A page that changed at each of 40 fetches 2.4 hours apart: under a high μ it is too fast
    # to chase and waits the maximum interval; under a lower μ it deserves fetches again. The
    # re-plan, through the worker's own next_fetch, brings it back to within hours.
    record = first_record(0)
    high, low = _policy(5.0), _policy(0.05)
    for fetch in range(1, 41):
        record, schedule = simulated_fetch(
            record, simulated_result(fetch / 10.0, fetch), high
        )
    now = record.last_fetched_at
    assert now is not None
    assert schedule.next_fetch_at - now == pytest.approx(high.settings.max_interval)
    parked = np.array([schedule.fetch_rate_per_day or 0.0])
    rate = np.array([schedule.change_rate_per_day or 0.0])
    assert moved_urls(parked, rate, np.ones(1), low).tolist() == [True]
    back = replanned(record, low, now)
    assert back.next_fetch_at - now < SECONDS_PER_DAY
    assert back.fetch_rate_per_day is not None and back.fetch_rate_per_day > 1.0


@pytest.mark.timeout(120)
def test_the_simulated_planner_keeps_the_budget_spent() -> None:
    # The simulator gives a slot to nobody when nothing is due (as the daemon idles): the
    # schedule itself must ask for about the budget. Without the re-plan, pages fetched while
    # μ was high waited out the year: the schedule asked for 71% of the budget at 2,000 pages.
    days, pages, per_page = 16.0, 500, 1.0
    population = build_population("grimes", pages, days, seed=15)
    spent = simulate_windows(
        population, "optimal", days=days, budget_per_day=pages * per_page,
        windows=((days - 1.0, days),), seed=15, work_conserving=False,
    )[0].fetches
    assert spent >= 0.85 * days * pages * per_page


def test_the_simulator_reschedules_what_the_policy_moved() -> None:
    population = build_population("grimes", 50, 3.0, seed=1)
    policy = Optimal(population, 50.0, np.random.default_rng(1))
    assert policy.walked is None
    moved = policy.on_day(1.0)
    assert policy.walked == policy.policy
    assert {page for page, _ in moved} <= set(range(50))
    assert all(when >= 1.0 for _, when in moved)
    # Nothing fetched since: μ and the prior are where the walk left them, so no walk.
    walked = policy.walked
    assert policy.on_day(1.5) == ()
    assert policy.walked is walked
