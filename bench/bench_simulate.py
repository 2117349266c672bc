"""CPU time of the `optimal` policy: 100,000 brewington pages for 365 days (target <= 60 s).

Also prints what the simulator's speed rests on: the fast posterior (`fast_posterior_rate`,
what the daemon and the simulator schedule with) against the exact quadrature
(`posterior_rate`), its error and its cost per call.
"""

from __future__ import annotations

import math
import random
import sys
import time

import numpy as np

from crawler.core.estimate import ChangeHistory, GammaPrior, fast_posterior_rate, posterior_rate
from crawler.sim.simulator import build_population, simulate


def estimator_figures(samples: int = 300) -> str:
    """Relative error of the fast posterior against the exact one, and both costs."""
    rng = random.Random(5)
    cases = []
    for _ in range(samples):
        rate = 10 ** rng.uniform(-2.5, 1.5)
        history = ChangeHistory()
        for _ in range(rng.randint(1, 120)):
            interval = rng.uniform(0.05, 3.0) / rate
            history = history.observe(interval, rng.random() < 1 - math.exp(-rate * interval))
        cases.append((history, GammaPrior(rng.uniform(0.1, 5.0), rng.uniform(0.5, 200.0))))
    started = time.process_time()
    exact = [posterior_rate(history, prior) for history, prior in cases]
    exact_cpu = time.process_time() - started
    started = time.process_time()
    fast = [fast_posterior_rate(history, prior) for history, prior in cases]
    fast_cpu = time.process_time() - started
    errors = np.abs(np.asarray(fast) / np.asarray(exact) - 1.0)
    return (
        f"fast posterior vs exact over {samples} histories: max error {errors.max():.2%}, "
        f"median {float(np.median(errors)):.3%}; {fast_cpu / samples * 1e6:.0f} us per call "
        f"against {exact_cpu / samples * 1e6:.0f} us"
    )


def main() -> None:
    pages = int(sys.argv[1]) if len(sys.argv) > 1 else 100_000
    days = float(sys.argv[2]) if len(sys.argv) > 2 else 365.0
    mean_interval_days = float(sys.argv[3]) if len(sys.argv) > 3 else 30.0
    print(estimator_figures())
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
