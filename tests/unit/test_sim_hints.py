"""Change hints in the simulator (crawler.sim.hints, crawler.sim.hint_policies): each of the
four policies on a short brewington run, the orderings of issue 38 at a coarse level (the
full-scale table is bench/bench_hints.py's, in docs/SIMULATOR.md)."""

from __future__ import annotations

import argparse

import pytest

from crawler.commands import simulate as simulate_command
from crawler.sim.hints import HintSpec, build_hint_world, changefreq_for, parse_hint_spec
from crawler.sim.simulator import build_population, simulate

PAGES, DAYS, WARMUP, SEED = 300, 200.0, 100.0, 3
BUDGET = PAGES / 30.0  # a fetch per page per 30 days


def _run(policy: str, hints: str) -> float:
    population = build_population("brewington", PAGES, DAYS, SEED)
    return simulate(
        population, policy, days=DAYS, budget_per_day=BUDGET, warmup_days=WARMUP, seed=SEED,
        hints=[parse_hint_spec(hints)],
    ).freshness


@pytest.fixture(scope="module")
def accurate() -> dict[str, float]:
    return {policy: _run(policy, "accurate:0.3")
            for policy in ("no-hints", "nutch-sitemaps", "trust-all", "optimal")}


def test_accurate_hints_pay(accurate: dict[str, float]) -> None:
    assert accurate["optimal"] > accurate["no-hints"] + 0.02
    assert accurate["optimal"] > accurate["trust-all"]
    assert accurate["optimal"] > accurate["nutch-sitemaps"]
    # Fetching after every announcement beats ignoring them, planned or not.
    assert accurate["trust-all"] > accurate["no-hints"]


@pytest.mark.parametrize("lie", ["lying-now:1", "random:1"])
def test_lying_hints_cost_nothing(lie: str, accurate: dict[str, float]) -> None:
    baseline = accurate["no-hints"]  # deaf to hints: the same run whatever they say
    optimal = _run("optimal", lie)
    trust_all = _run("trust-all", lie)
    assert abs(optimal - baseline) < 0.005
    assert optimal > trust_all - 0.005


def test_optimal_without_hints_is_the_daemons_policy() -> None:
    population = build_population("brewington", 200, 60.0, 5)
    heard = simulate(population, "optimal", days=60.0, budget_per_day=10.0, warmup_days=20.0,
                     seed=5, hints=[HintSpec("accurate", 0.0)])
    plain = simulate(population, "optimal", days=60.0, budget_per_day=10.0, warmup_days=20.0,
                     seed=5)
    assert heard.freshness == plain.freshness
    assert heard.fetches == plain.fetches


def test_hint_world() -> None:
    population = build_population("brewington", 1000, 100.0, 2)
    world = build_hint_world(
        population, [parse_hint_spec("accurate:0.3,delay=600,miss=0.5"),
                     parse_hint_spec("lying-now:0.2")], 100.0, seed=2,
    )
    covered = [source for source in world.source_of_page if source >= 0]
    assert 0.25 < covered.count(0) / 1000 < 0.35
    assert 0.15 < covered.count(1) / 1000 < 0.25
    assert len(set(world.site_of_page)) == 10
    # Accurate announcements come a delay after the change they date, half of them missed.
    changes = sum(
        int(population.offsets[page + 1] - population.offsets[page])
        for page, source in enumerate(world.source_of_page) if source == 0
    )
    assert all(event.at_days - event.claimed_days == pytest.approx(600 / 86400)
               for event in world.events)
    assert 0.4 * changes < len(world.events) < 0.6 * changes
    # A lying-now page announces "changed now" at its next read after every fetch.
    page = world.source_of_page.index(1)
    announcement = world.after_fetch(page, 10.0)
    assert announcement is not None
    assert announcement.claimed_days == announcement.at_days > 10.0
    assert world.after_fetch(world.source_of_page.index(0), 10.0) is None
    assert changefreq_for(1.0 / 6.0) == "weekly"
    assert changefreq_for(20.0) == "hourly"


def test_hint_spec_parsing() -> None:
    spec = parse_hint_spec("accurate:0.3,delay=60,fp=0.2,miss=0.1")
    assert spec == HintSpec("accurate", 0.3, 60 / 86400, 0.2, 0.1)
    for bad in ("accurate", "sometimes:0.3", "accurate:x", "accurate:0.3,speed=2",
                "accurate:1.5"):
        with pytest.raises(ValueError):
            parse_hint_spec(bad)


def test_simulate_command_takes_hints() -> None:
    parser = argparse.ArgumentParser()
    simulate_command.register(parser.add_subparsers())
    args = parser.parse_args(["simulate", "--hints", "accurate:0.3", "--hints", "lying-now:0.5",
                              "--policy", "nutch-sitemaps"])
    assert [spec.mode for spec in args.hint_sources] == ["accurate", "lying-now"]
    with pytest.raises(SystemExit):
        parser.parse_args(["simulate", "--hints", "sometimes:0.3"])
