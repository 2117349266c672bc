"""Issue 10's grimes grid, the 5,000-page row, seeds 16-20.

The grid and its scale: tests/grimes_grid.py.
"""

from __future__ import annotations

import pytest
from grimes_grid import timing_wins


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", range(16, 21))
def test_timing_clocked_pages_wins_at_5000_pages_after_15_and_30_day_warm_ups(
    seed: int,
) -> None:
    timing_wins(seed, 5000)
