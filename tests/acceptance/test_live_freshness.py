"""Live freshness against ground truth, short: the real daemon as deployed (``crawler run``,
default --processes) crawls a loopback web whose changes are known, once optimal and once
uniform at the same budget, side by side (``crawler.demo.harness``; ``bench/bench_live.py``
is the long run).

The measurement is checked first (a uniform daemon's live freshness is what theory gives at
its fetch rate, and it spends its budget), then the optimal daemon against it: its budget,
the simulator's prediction for the same pages, and no loss against uniform at its own rate.
The noise of a minute's measurement bounds what a short run can show; the share of the
oracle's gain is the long bench's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from crawler.demo.harness import LiveConfig, LiveRun, run_live
from crawler.sim.live import format_table

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

CONFIG = LiveConfig(
    seconds=90.0,
    warmup_seconds=30.0,
    pages=150,
    hosts=15,
    budget_per_day=5.0 * 86400.0,  # a uniform interval of 30 s
)
# The uniform daemon's live freshness against the closed form at its own fetch rate: a
# minute of 110-odd Poisson pages fetched twice each leaves a standard error near 0.02.
NOISE_TOLERANCE = 0.06
# A minute's window holds about 300 fetches, and the first planner rounds fall inside it:
# seen at +10.0% in CI. The bench's 10-minute runs hold the 10% of issue 33 (+0%, +2%); this
# guard catches the overspends it was written against (+55%, +209%).
BUDGET_TOLERANCE = 0.15


@pytest.fixture(scope="module")
def live(pg_server_url: str) -> Iterator[LiveRun]:
    run = asyncio.run(run_live(CONFIG, pg_server_url))
    print(format_table(run.evaluation))  # shown with -s, and on failure
    yield run


def test_both_daemons_fetch_every_page(live: LiveRun) -> None:
    assert live.evaluation.pages == CONFIG.pages
    assert live.never_fetched == {"optimal": 0, "uniform": 0}


def test_uniform_daemon_spends_its_budget(live: LiveRun) -> None:
    rate = live.evaluation.live_uniform.everything.fetches_per_second
    assert rate is not None
    budget = live.evaluation.budget_per_second
    assert abs(rate / budget - 1.0) <= BUDGET_TOLERANCE, format_table(live.evaluation)


def test_uniform_daemon_matches_theory(live: LiveRun) -> None:
    measured = live.evaluation.live_uniform.poisson.freshness
    computed = live.evaluation.uniform_at_uniform.freshness
    assert measured is not None and computed is not None
    assert abs(measured - computed) <= NOISE_TOLERANCE, format_table(live.evaluation)


def test_optimal_daemon_spends_its_budget(live: LiveRun) -> None:
    rate = live.evaluation.live_optimal.everything.fetches_per_second
    assert rate is not None
    budget = live.evaluation.budget_per_second
    assert abs(rate / budget - 1.0) <= BUDGET_TOLERANCE, format_table(live.evaluation)


def test_optimal_daemon_does_no_worse_than_uniform_at_its_own_rate(live: LiveRun) -> None:
    # In a minute and a half the planner has only begun to learn the rates: the simulator,
    # on the same pages and budget, predicts no gain yet. So the bar here is not falling
    # below uniform beyond the measurement's noise; issue 33's 70% share of the oracle's
    # gain is the five-minute bench's (bench/bench_live.py).
    live_freshness = live.evaluation.live_optimal.poisson.freshness
    uniform = live.evaluation.uniform_at_optimal.freshness
    assert live_freshness is not None and uniform is not None
    assert live_freshness >= uniform - NOISE_TOLERANCE, format_table(live.evaluation)


def test_optimal_daemon_matches_the_simulator(live: LiveRun) -> None:
    live_freshness = live.evaluation.live_optimal.everything.freshness
    simulated = live.evaluation.simulated_optimal.everything.freshness
    assert live_freshness is not None and simulated is not None
    assert abs(live_freshness - simulated) <= NOISE_TOLERANCE, format_table(live.evaluation)
