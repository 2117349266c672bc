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
    started, cpu_started = time.perf_counter(), time.process_time()
    result = simulate(
        population, "optimal", days=days, budget_per_day=pages / mean_interval_days, seed=1
    )
    elapsed = time.perf_counter() - started
    cpu = time.process_time() - cpu_started
    print(
        f"optimal: {pages} pages, {days:g} days, {result.fetches} fetches, "
        f"freshness {result.freshness:.4f}: {elapsed:.1f} s wall, {cpu:.1f} s CPU, "
        f"{cpu / max(result.fetches, 1) * 1e6:.1f} us CPU per fetch"
    )


if __name__ == "__main__":
    main()
