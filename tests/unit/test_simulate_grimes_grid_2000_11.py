"""Issue 10's grimes grid, the 2,000-page row, seeds 11-15 (the grid and its scale:
tests/grimes_grid.py). The row is two files so that two test workers share it: the suite runs
a file on one worker (``--dist loadfile``), and the whole row is about 11 minutes of CPU."""

from __future__ import annotations

import pytest
from grimes_grid import timing_wins


@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", range(11, 16))
def test_timing_clocked_pages_wins_at_2000_pages_after_15_and_30_day_warm_ups(
    seed: int,
) -> None:
    timing_wins(seed, 2000)
