"""The daemon's periodic line of figures, as Scrapy's LogStats prints one.

Read from the metrics registry the daemon already keeps (the aggregate over the children under
``--processes N``), so that the line and /metrics always agree and nothing new is counted:
pages fetched since the last line and their rate, changes, errors, and the frontier's backlog
as the sampler last measured it (``crawler.daemon.run.sample_frontier``).
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from dataclasses import dataclass

from prometheus_client import CollectorRegistry

log = logging.getLogger("crawler.stats")

# Outcomes counted as errors: the page did not answer with content or a redirect, nor was it
# skipped on purpose (robots.txt). A 404 counts: the watched page is not there.
ERROR_OUTCOMES = frozenset({"gone", "http_error", "network_error", "timeout", "blocked"})


@dataclass(frozen=True, slots=True)
class Figures:
    """Running totals and the last sampled gauges (NaN: not sampled yet)."""

    fetches: float = 0.0
    errors: float = 0.0
    changes: float = 0.0
    due: float = math.nan
    most_overdue_seconds: float = math.nan


def read_figures(registry: CollectorRegistry) -> Figures:
    fetches = errors = changes = 0.0
    due = overdue = math.nan
    for family in registry.collect():
        for sample in family.samples:
            if sample.name == "crawler_fetches_total":
                fetches += sample.value
                if sample.labels.get("outcome") in ERROR_OUTCOMES:
                    errors += sample.value
            elif sample.name == "crawler_changes_total":
                changes += sample.value
            elif sample.name == "crawler_urls_due":
                due = sample.value
            elif sample.name == "crawler_most_overdue_seconds":
                overdue = sample.value
    return Figures(fetches, errors, changes, due, overdue)


def _duration(seconds: float) -> str:
    if math.isnan(seconds):
        return "-"
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.1f} {unit}"
    return f"{seconds:.0f} s"


def _count(value: float, noun: str) -> str:
    return f"{value:.0f} {noun}" + ("" if round(value) == 1 else "s")


def stats_line(before: Figures, after: Figures, seconds: float) -> str:
    """'crawled 120 pages (240/min), 5 changes, 2 errors in the last 30 s; 30 URLs due, most
    overdue 12 s'."""
    pages = after.fetches - before.fetches
    per_minute = 60.0 * pages / seconds if seconds > 0 else 0.0
    due = "-" if math.isnan(after.due) else f"{after.due:.0f}"
    return (f"crawled {_count(pages, 'page')} ({per_minute:.0f}/min), "
            f"{_count(after.changes - before.changes, 'change')}, "
            f"{_count(after.errors - before.errors, 'error')} in the last "
            f"{_duration(seconds)}; {due} URLs due, most overdue "
            f"{_duration(after.most_overdue_seconds)}")


async def log_stats(registry: CollectorRegistry, interval: float) -> None:
    """Side task: one INFO line every ``interval`` seconds until cancelled."""
    before, at = read_figures(registry), time.monotonic()
    while True:
        await asyncio.sleep(interval)
        after, now = read_figures(registry), time.monotonic()
        log.info("%s", stats_line(before, after, now - at))
        before, at = after, now
