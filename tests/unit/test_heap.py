"""The fetch processes' collector settings (crawler.daemon.heap)."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import gc
from crawler.daemon import heap
kept = [[i] for i in range(1000)]  # start-up's objects
assert gc.get_freeze_count() == 0 and gc.get_threshold()[0] == 700
heap.settle()
assert gc.get_freeze_count() >= 1000, gc.get_freeze_count()
assert gc.get_threshold()[0] == heap.YOUNG_THRESHOLD
gc.collect()  # a full collection no longer scans them
assert gc.get_freeze_count() >= 1000
cycle = []; cycle.append(cycle); del cycle  # made after: still collected
assert gc.collect() >= 1
"""


def test_settle_freezes_what_exists_and_spaces_young_collections() -> None:
    """Run in a fresh interpreter: freezing is for the whole process, and this one's tests
    must keep the defaults."""
    done = subprocess.run([sys.executable, "-c", CHECK], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.returncode == 0, done.stderr[-2000:]

