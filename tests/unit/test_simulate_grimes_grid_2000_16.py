"""Issue 10's grimes grid, the 2,000-page row, seeds 16-20 (the other half: see
test_simulate_grimes_grid_2000_11.py)."""

from __future__ import annotations

import pytest
from grimes_grid import timing_wins


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", range(16, 21))
def test_timing_clocked_pages_wins_at_2000_pages_after_15_and_30_day_warm_ups(
    seed: int,
) -> None:
    timing_wins(seed, 2000)
