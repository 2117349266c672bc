"""The fetch processes' garbage-collector settings.

The cyclic collector's default thresholds are made for short scripts. A fetch process
allocates records, tasks and futures by the thousand a second, and every full scan also walks
what start-up left behind: the imported modules, the settings, the pools (measured on the
claim + record path: ``bench/bench_frontier.py``). Reference counting still frees every
acyclic object at once; only cycles wait longer.
"""

from __future__ import annotations

import gc

# Container allocations (net) between young collections: the default is 700.
YOUNG_THRESHOLD = 20_000


def settle() -> None:
    """Collect once, then exempt every object alive now from the collector's scans
    (``gc.freeze``) and space the young collections out. Called once start-up is done, and
    before ``--processes`` forks: a frozen object's header is never written by a scan, so its
    page stays shared with the parent."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG_THRESHOLD, middle, old)
