"""The planner: the wall time of solving μ for 10 million URLs (target < 2 s), and with
``--beside-fetching N`` the real daemon's fetch rate during a planner round against its rate
just before and after it, over N runs (issue 13 asks at least 80%).

Run: .venv/bin/python bench/bench_planner.py [URLS]
     .venv/bin/python bench/bench_planner.py --beside-fetching 5 [--database-url postgresql://...]

``--beside-fetching`` runs the scenario of tests/acceptance/test_planner_beside_fetching.py in
a scratch database per run, and prints each run's rates with the load average, then the
smallest and the median ratio: the figures to quote, since one run on a shared machine moves
with whatever else runs beside it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid
from pathlib import Path

import asyncpg
import numpy as np
from scratch import add_database_url, server_url, with_database

from crawler.core.plan import solve_mu
from crawler.db import migrate

TESTS = Path(__file__).resolve().parents[1] / "tests"


def solve(urls: int) -> None:
    rng = np.random.default_rng(1)
    change_rates = 1.0 / (152.2 * rng.weibull(1.4, urls))
    weights = np.ones(urls)
    started = time.perf_counter()
    result = solve_mu(change_rates, weights, urls / 30.0)
    elapsed = time.perf_counter() - started
    print(
        f"solve_mu: {urls} URLs, mu {result.mu:.6g}, "
        f"sum of rates {result.total_per_day:.1f} for budget {urls / 30.0:.1f}: {elapsed:.2f} s"
    )


async def beside_fetching(url: str, runs: int) -> None:
    sys.path[:0] = [str(TESTS), str(TESTS / "acceptance")]
    from test_planner_beside_fetching import measure_round  # the test's own scenario

    ratios = []
    for run in range(runs):
        admin = await asyncpg.connect(url)
        name = f"crawler_bench_planner_{uuid.uuid4().hex[:8]}"
        await admin.execute(f'CREATE DATABASE "{name}"')
        db_url = with_database(url, name)
        try:
            await migrate.upgrade(db_url)
            load = os.getloadavg()[0]
            m = await measure_round(db_url)
            ratios.append(m.ratio)
            print(f"run {run + 1}: load {load:.1f}-{os.getloadavg()[0]:.1f}; fetches/s "
                  f"{m.before:.0f} before, {m.during:.0f} during a {m.round_seconds:.1f} s round "
                  f"({m.rescheduled} rescheduled), {m.after:.0f} after: {m.ratio:.0%}",
                  flush=True)
        finally:
            await admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await admin.close()
    print(f"during / without a round over {runs} runs: smallest {min(ratios):.0%}, "
          f"median {statistics.median(ratios):.0%}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("urls", nargs="?", type=int, default=10_000_000)
    parser.add_argument("--beside-fetching", type=int, metavar="RUNS", default=0)
    add_database_url(parser)
    args = parser.parse_args()
    if args.beside_fetching:
        with server_url(args.database_url) as url:
            asyncio.run(beside_fetching(url, args.beside_fetching))
    else:
        solve(args.urls)


if __name__ == "__main__":
    main()
