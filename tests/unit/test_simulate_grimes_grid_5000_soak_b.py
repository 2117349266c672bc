"""Issue 10's grimes grid at 5,000 pages, seeds 16, 17, 18, 19, 20: a soak (``make soak``; about
80 s of CPU a seed, too long for the suite, which runs seed 14 of this row and the whole
2,000-page row).

The grid and its scale: tests/grimes_grid.py.
"""

from __future__ import annotations

import pytest
from grimes_grid import timing_wins


@pytest.mark.soak
@pytest.mark.timeout(900)
@pytest.mark.parametrize("seed", [16, 17, 18, 19, 20])
def test_timing_clocked_pages_wins_at_5000_pages_after_15_and_30_day_warm_ups(seed: int) -> None:
    timing_wins(seed, 5000)
