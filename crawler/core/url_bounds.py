"""A watcher's own schedule for a URL: interval bounds and the times fetching is allowed.

``crawler bound`` gives a URL (or every URL of a pattern or host) a shortest and a longest
revisit interval, and optionally weekly time windows (UTC) outside which it is not fetched.
The bounds are box constraints on the URL's fetch rate in the Lagrange solve (docs/MODEL.md
section 5, docs/SCHEDULING.md): 1/max ≤ f_i ≤ 1/min. The optimum spends the rest of the budget
on the other URLs with the same μ, as Kolobov et al. handle a host at its politeness cap.

A URL's own bound replaces the crawler-wide one on its side, and wins over the other side's
setting when the two cross: "at least every 30 s" holds under CRAWLER_MIN_INTERVAL=60, since
the watcher asked for that URL by name.

Times are POSIX seconds.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]

SECONDS_PER_WEEK = 7 * 86400.0
DAYS = ("mon", "tue", "wed", "thu", "fri", "sat", "sun")
# POSIX day 0 (1970-01-01) was a Thursday: index 3 in DAYS.
_EPOCH_WEEKDAY = 3
_UNITS = {"s": 1.0, "m": 60.0, "h": 3600.0, "d": 86400.0, "w": SECONDS_PER_WEEK}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhdw]?)\s*$", re.IGNORECASE)
_WINDOW = re.compile(
    r"^\s*(?:(?P<days>[a-z]{3}(?:\s*-\s*[a-z]{3})?(?:\s*,\s*[a-z]{3}(?:\s*-\s*[a-z]{3})?)*)\s+)?"
    r"(?P<start>\d{1,2}:\d{2})\s*-\s*(?P<end>\d{1,2}:\d{2})\s*$",
    re.IGNORECASE,
)


class BoundError(ValueError):
    """A duration or window that cannot be read, or bounds that contradict each other."""


def parse_duration(text: str) -> float:
    """Seconds in ``30s``, ``10m``, ``2h``, ``1d``, ``1w`` (a bare number is seconds)."""
    match = _DURATION.match(text)
    if match is None or float(match.group(1)) <= 0.0:
        raise BoundError(f"{text!r} is not a positive duration (30s, 10m, 2h, 1d, 1w)")
    return float(match.group(1)) * _UNITS[(match.group(2) or "s").lower()]


def duration_shown(seconds: float) -> str:
    """``seconds`` in the largest unit that divides it: 30s, 10m, 1.5h."""
    for unit, size in (("w", SECONDS_PER_WEEK), ("d", 86400.0), ("h", 3600.0), ("m", 60.0)):
        if seconds >= size and (seconds / size * 10).is_integer():
            return f"{seconds / size:g}{unit}"
    return f"{seconds:g}s"


@dataclass(frozen=True, slots=True)
class WeeklyWindows:
    """Allowed spans of the week, as sorted, merged [start, end) offsets from Monday 00:00 UTC."""

    spans: tuple[tuple[float, float], ...]
    text: str


def _minutes(clock: str, source: str) -> float:
    hours, minutes = (int(part) for part in clock.split(":"))
    if hours > 24 or minutes > 59 or (hours == 24 and minutes):
        raise BoundError(f"{source!r}: {clock} is not a time of day (00:00 to 24:00)")
    return hours * 3600.0 + minutes * 60.0


def _day_index(name: str, source: str) -> int:
    try:
        return DAYS.index(name.lower())
    except ValueError:
        raise BoundError(f"{source!r}: {name!r} is not a day (Mon, Tue, ..., Sun)") from None


def _days(text: str | None, source: str) -> list[int]:
    if not text:
        return list(range(7))
    days: list[int] = []
    for part in text.split(","):
        ends = [p.strip() for p in part.split("-")]
        first = _day_index(ends[0], source)
        last = _day_index(ends[-1], source)
        days.extend((first + k) % 7 for k in range((last - first) % 7 + 1))
    return days


def parse_window(text: str) -> list[tuple[float, float]]:
    """The week spans of one window: ``Mon-Fri 08:00-18:00``, ``Sat,Sun 10:00-12:00``, or
    ``22:00-06:00`` (every day; an end before the start runs past midnight)."""
    match = _WINDOW.match(text)
    if match is None:
        raise BoundError(f"{text!r} is not a time window (e.g. 'Mon-Fri 08:00-18:00', UTC)")
    start = _minutes(match.group("start"), text)
    end = _minutes(match.group("end"), text)
    if start == end:
        raise BoundError(f"{text!r}: the window is empty")
    length = end - start if end > start else end + 86400.0 - start
    days = _days(match.group("days"), text)
    return [(day * 86400.0 + start, day * 86400.0 + start + length) for day in days]


def _merged(spans: list[tuple[float, float]]) -> tuple[tuple[float, float], ...]:
    """Spans within one week, wrapped past Sunday midnight and merged where they touch."""
    cut: list[tuple[float, float]] = []
    for begin, end in spans:
        if end > SECONDS_PER_WEEK:
            cut.append((begin, SECONDS_PER_WEEK))
            cut.append((0.0, end - SECONDS_PER_WEEK))
        else:
            cut.append((begin, end))
    cut.sort()
    merged: list[tuple[float, float]] = []
    for begin, end in cut:
        if merged and begin <= merged[-1][1]:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((begin, end))
    return tuple(merged)


@lru_cache(maxsize=256)
def parse_windows(text: str) -> WeeklyWindows | None:
    """Windows joined by ``;`` as stored on a URL (``urls.fetch_windows``); None for none."""
    parts = [p for p in (text or "").split(";") if p.strip()]
    if not parts:
        return None
    spans = [span for part in parts for span in parse_window(part)]
    return WeeklyWindows(_merged(spans), "; ".join(p.strip() for p in parts))


def next_allowed(windows: WeeklyWindows | None, at: float) -> float:
    """The first time ≥ ``at`` inside a window: ``at`` itself when it is inside one (or there
    are no windows), else the start of the next window."""
    if windows is None or not windows.spans:
        return at
    # Offset of ``at`` from the Monday 00:00 UTC that starts its week.
    week_offset = (at + _EPOCH_WEEKDAY * 86400.0) % SECONDS_PER_WEEK
    week_start = at - week_offset
    for begin, end in windows.spans:
        if week_offset < end:
            return at if week_offset >= begin else week_start + begin
    return week_start + SECONDS_PER_WEEK + windows.spans[0][0]


def interval_bounds(
    own_min_seconds: float | None, own_max_seconds: float | None, policy_min_seconds: float,
    policy_max_seconds: float,
) -> tuple[float, float]:
    """The URL's (shortest, longest) revisit interval in seconds: its own bound where it has
    one, the crawler's otherwise; where the crawler's and its own cross, its own wins."""
    shortest = policy_min_seconds if own_min_seconds is None else own_min_seconds
    longest = policy_max_seconds if own_max_seconds is None else own_max_seconds
    if own_max_seconds is not None:
        shortest = min(shortest, own_max_seconds)
    if own_min_seconds is not None:
        longest = max(longest, own_min_seconds)
    return shortest, longest


def interval_bound_arrays(
    own_min_seconds: FloatArray, own_max_seconds: FloatArray, policy_min_seconds: float,
    policy_max_seconds: float,
) -> tuple[FloatArray, FloatArray]:
    """``interval_bounds`` over arrays, NaN where a URL has no bound of its own; in seconds."""
    has_min = ~np.isnan(own_min_seconds)
    has_max = ~np.isnan(own_max_seconds)
    shortest = np.where(has_min, own_min_seconds, policy_min_seconds)
    longest = np.where(has_max, own_max_seconds, policy_max_seconds)
    shortest = np.where(has_max, np.minimum(shortest, own_max_seconds), shortest)
    longest = np.where(has_min, np.maximum(longest, own_min_seconds), longest)
    return np.asarray(shortest, dtype=np.float64), np.asarray(longest, dtype=np.float64)


def check_bounds(min_seconds: float | None, max_seconds: float | None) -> None:
    """Refuse a shortest interval above the longest (contradictory bounds)."""
    if min_seconds is not None and max_seconds is not None and min_seconds > max_seconds:
        raise BoundError(
            f"never more often than every {duration_shown(min_seconds)} contradicts at least "
            f"every {duration_shown(max_seconds)}"
        )


def binding_bound(
    optimal_rate_per_day: float, own_min_seconds: float | None, own_max_seconds: float | None
) -> str:
    """Which of the URL's own bounds decides its rate against the optimum without them:
    ``at-least-every``, ``at-most-every`` or ``none`` (the optimum lies inside them)."""
    optimal_interval = 86400.0 / optimal_rate_per_day if optimal_rate_per_day > 0 else math.inf
    if own_max_seconds is not None and optimal_interval > own_max_seconds:
        return "at-least-every"
    if own_min_seconds is not None and optimal_interval < own_min_seconds:
        return "at-most-every"
    return "none"
