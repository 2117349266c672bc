"""The virtual-time simulator: populations, exact metrics, policies, and the issue-3 claims
at a small, fast scale (the full-scale figures are in docs/SIMULATOR.md)."""

from __future__ import annotations

import argparse
import json
import math

import numpy as np
import pytest

from crawler.commands import simulate as simulate_command
from crawler.core.estimate import known_times_posterior_rate
from crawler.core.last_modified import dated_history
from crawler.sim.policies import POLICIES, Optimal
from crawler.sim.populations import Population, grimes, wolf
from crawler.sim.simulator import build_population, simulate


def _constant_rate_population(pages: int, rate: float, days: float, seed: int) -> Population:
    rng = np.random.default_rng(seed)
    per_page = [np.sort(rng.random(rng.poisson(rate * days)) * days) for _ in range(pages)]
    offsets = np.zeros(pages + 1, dtype=np.int64)
    np.cumsum([times.size for times in per_page], out=offsets[1:])
    return Population(
        "constant", np.full(pages, rate), np.concatenate(per_page), offsets, ("poisson",) * pages
    )


def test_metrics_match_closed_forms_for_evenly_spaced_fetches() -> None:
    # λ = 0.2 per day fetched every 5 days: r = 1 (docs/MODEL.md section 4).
    population = _constant_rate_population(400, 0.2, 400.0, seed=4)
    result = simulate(population, "uniform", days=400.0, budget_per_day=80.0, warmup_days=50.0)
    r, interval, beta = 1.0, 5.0, 1.0
    assert result.freshness == pytest.approx((1 - math.exp(-r)) / r, abs=0.01)
    age = interval * (0.5 - 1 / r + (1 - math.exp(-r)) / r**2)
    assert result.age_days == pytest.approx(age, rel=0.05)
    # Brewington & Cybenko eq. (22).
    current = beta / interval + (1 - math.exp(-0.2 * (interval - beta))) / (0.2 * interval)
    assert result.beta_currency == pytest.approx(current, abs=0.01)


@pytest.fixture(scope="module")
def brewington_small() -> dict[str, float]:
    population = build_population("brewington", 3000, 480.0, seed=7)
    return {
        name: simulate(
            population, name, days=480.0, budget_per_day=100.0, warmup_days=240.0, seed=7
        ).freshness
        for name in POLICIES
    }


def test_reference_table_at_small_scale(brewington_small: dict[str, float]) -> None:
    # docs/MODEL.md section 5, 30-day mean interval: uniform 0.828, Lagrange-optimal 0.842.
    assert brewington_small["uniform"] == pytest.approx(0.828, abs=0.01)
    assert brewington_small["oracle"] == pytest.approx(0.842, abs=0.01)
    assert brewington_small["oracle"] > brewington_small["uniform"]


def test_optimal_learns_close_to_oracle_and_beats_baselines(
    brewington_small: dict[str, float],
) -> None:
    optimal = brewington_small["optimal"]
    assert optimal >= 0.99 * brewington_small["oracle"]
    for baseline in ("uniform", "proportional", "nutch-adaptive", "stormcrawler-adaptive"):
        assert optimal > brewington_small[baseline], baseline


def test_every_policy_spends_the_same_fetches() -> None:
    population = build_population("wolf", 200, 10.0, seed=2)
    fetches = {
        simulate(population, name, days=10.0, budget_per_day=300.0, seed=2).fetches
        for name in POLICIES
    }
    assert fetches == {3000}


def test_wolf_population_shape() -> None:
    population = wolf(5000, 30.0, np.random.default_rng(1))
    assert population.change_rates_per_day.mean() == pytest.approx(1.5)
    counts = np.diff(population.offsets)
    kinds = np.array(population.kinds)
    poisson = kinds == "poisson"
    realised = counts[poisson].sum() / (population.change_rates_per_day[poisson].sum() * 30.0)
    assert realised == pytest.approx(1.0, rel=0.03)
    # Pareto (a = 1.5) renewals have an infinite-mean residual life: short windows run hot.
    assert counts.sum() / (5000 * 30.0) == pytest.approx(1.5, rel=0.1)
    assert np.mean(kinds == "poisson") == pytest.approx(0.6, abs=0.03)
    assert np.mean(kinds == "quasi") == pytest.approx(0.1, abs=0.02)


def test_grimes_population_clocks_and_working_hours() -> None:
    population = grimes(600, 28.0, np.random.default_rng(3))
    kinds = np.array(population.kinds)
    daily = int(np.flatnonzero(kinds == "daily")[0])
    times = population.change_times_days[population.offsets[daily] : population.offsets[daily + 1]]
    spread_minutes = np.std((times - times[0] + 0.5) % 1.0) * 1440
    assert spread_minutes < 10.0
    workhours = np.flatnonzero(kinds == "poisson-workhours")
    instants = np.concatenate(
        [
            population.change_times_days[population.offsets[i] : population.offsets[i + 1]]
            for i in workhours
        ]
    )
    hour = (instants % 1.0) * 24
    in_work = (hour >= 8) & (hour < 20) & (np.floor(instants % 7) < 5)
    # Intensity 3× in 60 of 168 weekly hours: 180 / (180 + 108) of the changes.
    assert np.mean(in_work) == pytest.approx(180 / 288, abs=0.03)


def test_command_prints_one_json_object_per_policy(capsys: pytest.CaptureFixture[str]) -> None:
    parser = argparse.ArgumentParser()
    simulate_command.register(parser.add_subparsers())
    args = parser.parse_args(
        [
            "simulate",
            "--population",
            "brewington",
            "--policy",
            "all",
            "--pages",
            "100",
            "--days",
            "20",
            "--warmup-days",
            "5",
            "--mean-interval",
            "5",
            "--json",
        ]
    )
    assert args.func(args) == 0
    lines = capsys.readouterr().out.strip().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [row["policy"] for row in rows] == list(POLICIES)
    assert set(rows[0]) == {
        "population",
        "policy",
        "pages",
        "days",
        "fetches",
        "freshness",
        "age_days",
        "beta_currency",
    }
    assert all(row["fetches"] == 400 for row in rows)


@pytest.fixture(scope="module")
def periodic_runs() -> dict[str, float]:
    """uniform and optimal on clocked pages only, at a generous budget (a fetch per page per
    hour: 120 pages, 8 days, 4 warm-up), also with half the pages sending a truthful
    Last-Modified, and at a tight one (a fetch per page per day: 300 pages, 30 days, 15
    warm-up, long enough for the daily pages to be learnt from fetches a day apart)."""
    runs = {
        "generous": (120, 8.0, 24.0, ("uniform", "optimal", "optimal+lm")),
        "tight": (300, 30.0, 1.0, ("uniform", "optimal")),
    }
    scores: dict[str, float] = {}
    for budget_name, (pages, days, per_page_per_day, names) in runs.items():
        population = build_population("periodic", pages, days, seed=3)
        for name in names:
            scores[f"{budget_name}:{name}"] = simulate(
                population,
                name.removesuffix("+lm"),
                days=days,
                budget_per_day=pages * per_page_per_day,
                warmup_days=days / 2.0,
                seed=3,
                last_modified_share=0.5 if name.endswith("+lm") else 0.0,
            ).freshness
    return scores


@pytest.mark.timeout(600)
@pytest.mark.parametrize("budget", ["generous", "tight"])
def test_optimal_is_at_least_uniform_on_clocked_pages(
    periodic_runs: dict[str, float], budget: str
) -> None:
    assert periodic_runs[f"{budget}:optimal"] >= periodic_runs[f"{budget}:uniform"]


@pytest.mark.timeout(600)
def test_truthful_last_modified_raises_optimals_freshness(periodic_runs: dict[str, float]) -> None:
    # Dated changes reveal the hourly clocks that fetches an hour apart cannot: the pages are
    # then fetched just after their updates (without the dates they look like pages changing
    # faster than they are fetched, and are left to their fate).
    assert periodic_runs["generous:optimal+lm"] >= periodic_runs["generous:optimal"]


def test_periodic_population_is_clocked_pages_only() -> None:
    population = build_population("periodic", 400, 10.0, seed=3)
    kinds = np.array(population.kinds)
    assert set(kinds.tolist()) == {"hourly", "daily"}
    assert np.mean(kinds == "hourly") == pytest.approx(0.5, abs=0.08)
    daily = int(np.flatnonzero(kinds == "daily")[0])
    times = population.change_times_days[population.offsets[daily] : population.offsets[daily + 1]]
    assert times.size == pytest.approx(0.95 * 10, abs=3)
    assert np.std((times - times[0] + 0.5) % 1.0) * 1440 < 60.0  # within the hour, every day


def test_last_modified_share_must_be_a_share() -> None:
    population = build_population("brewington", 10, 5.0, seed=1)
    with pytest.raises(ValueError, match="last_modified_share"):
        simulate(population, "optimal", days=5.0, budget_per_day=10.0, last_modified_share=1.5)


def test_the_simulator_hands_its_dates_to_the_daemons_estimate() -> None:
    # One page fetched daily that changes every day, 0.05 days before the fetch: with the
    # dates the rate is the known-change-time posterior (it stayed unchanged only 0.05 days
    # before each fetch); without them, 12 intervals that all changed say much less.
    population = build_population("brewington", 2, 20.0, seed=1)
    dated = Optimal(population, 2.0, np.random.default_rng(1))
    undated = Optimal(population, 2.0, np.random.default_rng(1))
    for day in range(1, 13):
        dated.after_fetch(0, float(day), True, day - 0.05)
        undated.after_fetch(0, float(day), True, None)
    history = dated_history(dated.records[0])
    assert history is not None and history.changes == 12
    assert dated.rates[0] == pytest.approx(known_times_posterior_rate(history, dated.policy.prior))
    assert dated_history(undated.records[0]) is None
    assert dated.rates[0] > 1.2 * undated.rates[0]
