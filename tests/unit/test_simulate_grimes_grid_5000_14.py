"""Issue 10's grimes grid at 5,000 pages, in the suite: seed 14, the cell that used to lose
(0.5791 against 0.5802 at 4 fetches a day). The other nine seeds of the row are a soak
(``make soak``, tests/unit/test_simulate_grimes_grid_5000_soak_*.py).

The grid and its scale: tests/grimes_grid.py.
"""

from __future__ import annotations

import pytest
from grimes_grid import timing_wins


@pytest.mark.timeout(900)
def test_timing_clocked_pages_wins_at_5000_pages_after_15_and_30_day_warm_ups() -> None:
    timing_wins(14, 5000)
