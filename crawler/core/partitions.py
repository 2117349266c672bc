"""Which monthly partitions should exist, and which are past the retention (pure).

The per-fetch tables (observations, the WARC index, the change outbox) are partitioned by
``fetched_at`` into calendar months (UTC). ``crawler.db.partitions`` asks this module what to
create and what to drop for a given moment and retention, then does it.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

SECONDS_PER_DAY = 86400.0


@dataclass(frozen=True, slots=True, order=True)
class Month:
    """A calendar month in UTC: the range [start, end) of one partition."""

    year: int
    month: int

    @classmethod
    def of(cls, seconds: float) -> Month:
        at = dt.datetime.fromtimestamp(seconds, dt.UTC)
        return cls(at.year, at.month)

    def plus(self, months: int) -> Month:
        index = self.year * 12 + (self.month - 1) + months
        return Month(index // 12, index % 12 + 1)

    @property
    def start(self) -> dt.datetime:
        return dt.datetime(self.year, self.month, 1, tzinfo=dt.UTC)

    @property
    def end(self) -> dt.datetime:
        return self.plus(1).start

    def partition(self, table: str) -> str:
        """The partition's name: ``observations_p202611``."""
        return f"{table}_p{self.year:04d}{self.month:02d}"


@dataclass(frozen=True, slots=True)
class Bounds:
    """An existing partition's range; ``None`` ends are unbounded (MINVALUE, MAXVALUE), and a
    DEFAULT partition has both None with ``default`` set."""

    name: str
    start: dt.datetime | None
    end: dt.datetime | None
    default: bool = False

    def overlaps(self, month: Month) -> bool:
        if self.default:
            return False
        starts_before_end = self.start is None or self.start < month.end
        ends_after_start = self.end is None or self.end > month.start
        return starts_before_end and ends_after_start


def months_ahead(now: float, ahead: int) -> list[Month]:
    """The current month and the ``ahead`` next ones."""
    return [Month.of(now).plus(i) for i in range(ahead + 1)]


def to_create(now: float, ahead: int, existing: list[Bounds]) -> list[Month]:
    """Months from the current one to ``ahead`` months later that no partition covers yet."""
    return [m for m in months_ahead(now, ahead) if not any(b.overlaps(m) for b in existing)]


def retention_cutoff(now: float, retention_days: float) -> dt.datetime | None:
    """Rows fetched before this are past the retention; None when nothing is ever dropped
    (a retention of 0)."""
    if retention_days <= 0:
        return None
    return dt.datetime.fromtimestamp(now - retention_days * SECONDS_PER_DAY, dt.UTC)


def to_drop(now: float, retention_days: float, existing: list[Bounds]) -> list[str]:
    """Partitions whose whole range is older than the retention (their end is at or before the
    cutoff), oldest first. Never the DEFAULT partition, never an unbounded one, and never a
    partition that still holds a moment inside the retention."""
    cutoff = retention_cutoff(now, retention_days)
    if cutoff is None:
        return []
    old = [b for b in existing if not b.default and b.end is not None and b.end <= cutoff]
    return [b.name for b in sorted(old, key=lambda b: b.end or cutoff)]
