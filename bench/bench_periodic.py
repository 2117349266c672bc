"""Periodic pages win robustly: `optimal` against `optimal-poisson` on grimes over a grid.

The grid of issue 10: seeds 11-20, 2,000 and 5,000 pages, warm-ups of 15 and 30 days (each
run measures 30 days after its warm-up), one fetch per page per 6 hours (--mean-interval 0.25).
Prints one row per (pages, warm-up, seed) with both freshness scores and the margin, then
whether `optimal` won every row. Runs in a small process pool (--processes, default 2).

    .venv/bin/python bench/bench_periodic.py                       # the whole grid (hours)
    .venv/bin/python bench/bench_periodic.py --pages 2000 --warmups 15
"""

from __future__ import annotations

import argparse
import itertools
import time
from concurrent.futures import ProcessPoolExecutor

from crawler.sim.simulator import build_population, simulate

MEASURED_DAYS = 30.0


def run_cell(pages: int, warmup_days: float, seed: int, mean_interval_days: float) -> str:
    """Both policies on one population; a printable row."""
    days = warmup_days + MEASURED_DAYS
    population = build_population("grimes", pages, days, seed)
    started = time.perf_counter()
    scores = {
        name: simulate(
            population,
            name,
            days=days,
            budget_per_day=pages / mean_interval_days,
            warmup_days=warmup_days,
            seed=seed,
        ).freshness
        for name in ("optimal", "optimal-poisson")
    }
    margin = scores["optimal"] - scores["optimal-poisson"]
    return (
        f"{pages:>6} {warmup_days:>7g} {seed:>5} {scores['optimal']:>9.4f} "
        f"{scores['optimal-poisson']:>9.4f} {margin:>+8.4f} {time.perf_counter() - started:>7.0f}s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, nargs="+", default=[2000, 5000])
    parser.add_argument("--warmups", type=float, nargs="+", default=[15.0, 30.0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(range(11, 21)))
    parser.add_argument("--mean-interval", type=float, default=0.25)
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    cells = list(itertools.product(args.pages, args.warmups, args.seeds))
    print(f"{'pages':>6} {'warm-up':>7} {'seed':>5} {'optimal':>9} {'poisson':>9} {'margin':>8}")
    wins = 0
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        futures = [pool.submit(run_cell, *cell, args.mean_interval) for cell in cells]
        for future in futures:
            row = future.result()
            wins += "+" in row.split()[5]
            print(row, flush=True)
    print(f"optimal won {wins} of {len(cells)}")


if __name__ == "__main__":
    main()
