"""Change hints at equal budget: the four policies of issue 38 on grimes and brewington.

Cells: accurate hints on 30% of each site's pages (announced 5 minutes after each change), and
lying hints on every page, "lastmod = now" on every read and random dates. Policies: no-hints,
nutch-sitemaps, trust-all, optimal (docs/SIMULATOR.md). Seeds 1-5, fixed before any run; the
table gives each cell's median freshness over them, then every seed's row. `no-hints` does not
hear hints, so one run per population and seed serves all three cells.

    .venv/bin/python bench/bench_hints.py                     # both populations (about an hour)
    .venv/bin/python bench/bench_hints.py --populations grimes --seeds 1 2
"""

from __future__ import annotations

import argparse
import statistics
import time
from concurrent.futures import ProcessPoolExecutor

from crawler.sim.hints import parse_hint_spec
from crawler.sim.simulator import build_population, simulate

# (pages, days, warm-up days, mean days between fetches of a page)
SHAPES = {
    "brewington": (5000, 720.0, 360.0, 30.0),
    "grimes": (2000, 20.0, 10.0, 0.25),
}
CELLS = ("accurate:0.3", "lying-now:1", "random:1")
POLICIES = ("no-hints", "nutch-sitemaps", "trust-all", "optimal")


def run(population_name: str, seed: int, policy: str, cell: str) -> tuple[str, int, str, str,
                                                                          float, float]:
    pages, days, warmup, mean_interval = SHAPES[population_name]
    population = build_population(population_name, pages, days, seed)
    started = time.process_time()
    result = simulate(
        population, policy, days=days, budget_per_day=pages / mean_interval,
        warmup_days=warmup, seed=seed, hints=[parse_hint_spec(cell)],
    )
    return population_name, seed, policy, cell, result.freshness, time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--populations", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    parser.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3, 4, 5])
    parser.add_argument("--processes", type=int, default=2)
    args = parser.parse_args()
    jobs = []
    for name in args.populations:
        for seed in args.seeds:
            jobs.append((name, seed, "no-hints", CELLS[0]))
            jobs.extend((name, seed, policy, cell) for cell in CELLS for policy in POLICIES[1:])
    scores: dict[tuple[str, int, str, str], float] = {}
    with ProcessPoolExecutor(max_workers=args.processes) as pool:
        for name, seed, policy, cell, freshness, cpu in pool.map(run, *zip(*jobs, strict=True)):
            print(f"# {name} seed {seed} {cell:<13} {policy:<15} {freshness:.4f} ({cpu:.0f} s CPU)",
                  flush=True)
            if policy == "no-hints":
                for each in CELLS:
                    scores[name, seed, policy, each] = freshness
            else:
                scores[name, seed, policy, cell] = freshness
    for name in args.populations:
        pages, days, warmup, mean_interval = SHAPES[name]
        print(f"\n{name}: {pages} pages, {days:g} days ({warmup:g} warm-up), a fetch per page "
              f"per {mean_interval:g} days; median freshness over seeds "
              f"{', '.join(map(str, args.seeds))}\n")
        print("| hints | " + " | ".join(POLICIES)
              + " | optimal − no-hints | optimal − best of the other two |")
        print("|---" * (len(POLICIES) + 3) + "|")
        for cell in CELLS:
            medians = {policy: statistics.median(scores[name, seed, policy, cell]
                                                 for seed in args.seeds) for policy in POLICIES}
            others = max(medians[policy] for policy in POLICIES[1:-1])
            print(f"| {cell} | " + " | ".join(f"{medians[p]:.4f}" for p in POLICIES)
                  + f" | {medians['optimal'] - medians['no-hints']:+.4f}"
                  + f" | {medians['optimal'] - others:+.4f} |")
        print("\nper seed (optimal − no-hints, − nutch-sitemaps, − trust-all):")
        for cell in CELLS:
            for seed in args.seeds:
                best = scores[name, seed, "optimal", cell]
                print(f"  {cell:<13} seed {seed}: " + ", ".join(
                    f"{best - scores[name, seed, policy, cell]:+.4f}" for policy in POLICIES[:-1]
                ))


if __name__ == "__main__":
    main()
