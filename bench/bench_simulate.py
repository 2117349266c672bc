"""Wall time of the `optimal` policy: 100,000 brewington pages for 365 days (target < 60 s)."""

from __future__ import annotations

import sys
import time

from crawler.sim.simulator import build_population, simulate


def main() -> None:
    pages = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    days = float(sys.argv[2]) if len(sys.argv) > 2 else 365.0
    mean_interval_days = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    population = build_population("brewington", pages, days, seed=1)
    started = time.perf_counter()
    result = simulate(
        population, "optimal", days=days, budget_per_day=pages / mean_interval_days, seed=1
    )
    elapsed = time.perf_counter() - started
    print(
        f"optimal: {pages} pages, {days:g} days, {result.fetches} fetches, "
        f"freshness {result.freshness:.4f}: {elapsed:.1f} s"
    )


if __name__ == "__main__":
    main()
