"""True time-averaged freshness and age of a crawled page, from its real change instants and
the instants a crawler fetched it (docs/MODEL.md section 4's definitions, measured rather
than modelled).

The copy is fresh at t when the last successful fetch at or before t came after the last
change at or before t; otherwise its age is t minus the first change after that fetch.
Before a page's first fetch there is no copy: it is not fresh, and its age counts from
``origin`` (when the crawl began). Any time unit, the same for every argument. Pure: no I/O,
no clock.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Measured:
    """Time averages over a window: the share of it the copy was fresh, and its mean age."""

    freshness: float
    age: float


def _clip(low: float, high: float, start: float, end: float) -> tuple[float, float]:
    return max(low, start), min(high, end)


def _age_integral(since: float, low: float, high: float) -> float:
    """∫ (t − since) dt over [low, high] (0 when the span is empty)."""
    if high <= low:
        return 0.0
    return ((high - since) ** 2 - (low - since) ** 2) / 2.0


def page_metrics(
    change_times: Sequence[float],
    fetch_times: Sequence[float],
    start: float,
    end: float,
    *,
    origin: float,
) -> Measured:
    """One page's freshness and mean age over [start, end]. ``change_times`` and
    ``fetch_times`` (successful fetches only) are sorted; a change at the very instant of a
    fetch is one the fetch saw."""
    if not start < end:
        raise ValueError("the window must have positive length")
    fresh = 0.0
    age = 0.0
    # Before the first fetch: no copy, stale since the origin.
    first_fetch = fetch_times[0] if fetch_times else end
    low, high = _clip(origin, first_fetch, start, end)
    age += _age_integral(origin, low, high)
    for k, fetched in enumerate(fetch_times):
        if fetched >= end:
            break
        until = fetch_times[k + 1] if k + 1 < len(fetch_times) else end
        index = bisect_right(change_times, fetched)
        stale_from = change_times[index] if index < len(change_times) else until
        stale_from = min(stale_from, until)
        low, high = _clip(fetched, stale_from, start, end)
        fresh += max(0.0, high - low)
        low, high = _clip(stale_from, until, start, end)
        age += _age_integral(stale_from, low, high)
    length = end - start
    return Measured(fresh / length, age / length)


def collection_metrics(per_page: Sequence[Measured]) -> Measured:
    """The collection's time averages: every page weighs the same."""
    if not per_page:
        raise ValueError("no pages")
    count = len(per_page)
    return Measured(
        sum(m.freshness for m in per_page) / count, sum(m.age for m in per_page) / count
    )
