"""The statements of ``crawler report`` and ``crawler plan`` (``report.sql``): what was
observed, per URL and per host, and what the planner chose, read as typed rows."""

from __future__ import annotations

from dataclasses import dataclass
from importlib import resources

import asyncpg

from crawler.core.model import SECONDS_PER_DAY
from crawler.db.queries import parse_queries

REPORT_QUERIES = parse_queries(resources.files("crawler.db").joinpath("report.sql").read_text())


@dataclass(frozen=True, slots=True)
class UrlHistory:
    """One URL's successful fetches: first and last (POSIX seconds) and estimated changes."""

    url_id: int
    first_seconds: float
    last_seconds: float
    change_count: int
    change_seconds: tuple[float, ...]

    @property
    def span_days(self) -> float:
        return (self.last_seconds - self.first_seconds) / SECONDS_PER_DAY


@dataclass(frozen=True, slots=True)
class HostSummary:
    """One host's row, every figure from its own observations; ``watched_days``: the spans
    of its URLs (first to last successful fetch), summed."""

    origin: str
    urls: int
    fetches: int
    changes: int
    watched_days: float

    @property
    def changes_per_day(self) -> float | None:
        """Detected changes per day watched; None when no URL was watched over a span. Not
        the estimator's working rate (urls.change_rate_per_day), which starts from the prior,
        may come from Last-Modified dates, and would contradict these counts."""
        return self.changes / self.watched_days if self.watched_days > 0 else None


async def url_histories(conn: asyncpg.Connection) -> list[UrlHistory]:
    return [
        UrlHistory(int(row["url_id"]), float(row["first_seconds"]), float(row["last_seconds"]),
                   int(row["change_count"]), tuple(float(s) for s in row["change_seconds"]))
        for row in await conn.fetch(REPORT_QUERIES["url_histories"])
    ]


@dataclass(frozen=True, slots=True)
class ReportRows:
    """What the report reads: URL histories, the planner's choices, listed hosts, totals."""

    histories: list[UrlHistory]
    change_rates_per_day: tuple[float, ...]
    revisit_intervals_days: tuple[float, ...]
    hosts: list[HostSummary]
    host_count: int
    url_count: int
    observation_count: int
    change_total: int


async def report_rows(conn: asyncpg.Connection, max_hosts: int) -> ReportRows:
    """All the report's reads in one repeatable-read snapshot, so the figures agree."""
    async with conn.transaction(isolation="repeatable_read", readonly=True):
        histories = await url_histories(conn)
        choices = await conn.fetchrow(REPORT_QUERIES["planner_choices"])
        host_rows = await conn.fetch(REPORT_QUERIES["host_summaries"], max_hosts)
        totals = await conn.fetchrow(REPORT_QUERIES["report_totals"])
    assert choices is not None and totals is not None
    return ReportRows(
        histories=histories,
        change_rates_per_day=tuple(float(r) for r in choices["change_rates_per_day"]),
        revisit_intervals_days=tuple(float(d) for d in choices["revisit_intervals_days"]),
        hosts=[
            HostSummary(row["origin"], int(row["urls"]), int(row["fetches"]), int(row["changes"]),
                        float(row["watched_days"]))
            for row in host_rows
        ],
        host_count=int(totals["hosts"]),
        url_count=int(totals["urls"]),
        observation_count=int(totals["observations"]),
        change_total=int(totals["changes"]),
    )
