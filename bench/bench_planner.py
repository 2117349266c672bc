"""Wall time of solving μ for 10 million URLs (target < 2 s)."""

from __future__ import annotations

import sys
import time

import numpy as np

from crawler.core.plan import solve_mu


def main() -> None:
    urls = int(sys.argv[1]) if len(sys.argv) > 1 else 10_000_000
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


if __name__ == "__main__":
    main()
