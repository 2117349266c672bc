"""What the change report and `crawler plan --from-db` read from the database, as plain data.

Every read is one named statement of ``queries.sql`` beside this file; everything after the
read (observations for the lifetime fit, the choice of model) is pure.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

import asyncpg

from crawler.core.lifetime_fit import (
    MISFIT_P_VALUE,
    LifetimeFit,
    PageObservation,
    fit_lifetimes,
    fits_observations,
)
from crawler.core.model import SECONDS_PER_DAY
from crawler.db.connect import connect
from crawler.db.report import HostSummary as HostSummary
from crawler.db.report import UrlHistory as UrlHistory
from crawler.db.report import report_rows, url_histories

# Brewington & Cybenko's lifetime fit (section 5): the model used until the crawler has
# observed enough of its own pages.
PAPER_SHAPE = 1.4
PAPER_SCALE_DAYS = 152.2
# Below these the fit is mostly prior noise (two parameters from a handful of pages).
MIN_FIT_PAGES = 10
MIN_FIT_CHANGED_PAGES = 3
MAX_HOSTS = 50


@dataclass(frozen=True, slots=True)
class ReportData:
    """Everything the report draws, read in one go."""

    histories: tuple[UrlHistory, ...]
    change_rates_per_day: tuple[float, ...]
    revisit_intervals_days: tuple[float, ...]
    hosts: tuple[HostSummary, ...]
    host_count: int
    url_count: int
    observation_count: int
    change_total: int
    generated_at: datetime

    @property
    def empty(self) -> bool:
        return self.observation_count == 0


def empty_report_data(generated_at: datetime | None = None) -> ReportData:
    """The data of a database with nothing in it (also handy in tests)."""
    return ReportData((), (), (), (), 0, 0, 0, 0, generated_at or datetime.now(UTC))


async def read_report_data(conn: asyncpg.Connection, generated_at: datetime) -> ReportData:
    """All the report's reads in one repeatable-read snapshot, so the figures agree."""
    rows = await report_rows(conn, MAX_HOSTS)
    return ReportData(
        histories=tuple(rows.histories),
        change_rates_per_day=rows.change_rates_per_day,
        revisit_intervals_days=rows.revisit_intervals_days,
        hosts=tuple(rows.hosts),
        host_count=rows.host_count,
        url_count=rows.url_count,
        observation_count=rows.observation_count,
        change_total=rows.change_total,
        generated_at=generated_at,
    )


async def load_report_data(database_url: str, generated_at: datetime) -> ReportData:
    conn = await connect(database_url)
    try:
        return await read_report_data(conn, generated_at)
    finally:
        await conn.close()


async def load_url_histories(database_url: str) -> list[UrlHistory]:
    conn = await connect(database_url)
    try:
        return await url_histories(conn)
    finally:
        await conn.close()


# --- pure: from histories to what the fits and figures take ---------------------------------


def page_observations(histories: Sequence[UrlHistory]) -> list[PageObservation]:
    """One PageObservation per URL: span from first to last fetch, changes detected.

    A fetch sees at most one change per interval between fetches, so a page that changes
    faster than it is fetched shows fewer changes than it made: the counts, and a fit of
    them, understate fast pages.
    """
    return [
        PageObservation(
            span_days=history.span_days,
            change_count=history.change_count,
            intervals_days=tuple(
                (later - earlier) / SECONDS_PER_DAY
                for earlier, later in zip(
                    history.change_seconds, history.change_seconds[1:], strict=False
                )
            ),
        )
        for history in histories
    ]


def change_times_seconds(histories: Sequence[UrlHistory]) -> list[float]:
    """Estimated times (POSIX seconds) of every detected change."""
    return [s for history in histories for s in history.change_seconds]


@dataclass(frozen=True, slots=True)
class LifetimeModel:
    """The Weibull of mean lifetimes the report uses, and where it came from."""

    shape: float
    scale_days: float
    fit: LifetimeFit | None  # None: the paper's parameters
    reason: str
    # Why the fit does not describe the observations, in words; None when it does (or when
    # the paper's parameters are used: nothing of ours was fitted to test).
    misfit: str | None = None


def choose_lifetime_model(observations: Sequence[PageObservation]) -> LifetimeModel:
    """The fit to the crawler's observations when there are enough, else the paper's."""
    watched = [o for o in observations if o.span_days > 0]
    changed = sum(1 for o in watched if o.change_count > 0)

    def paper(why: str) -> LifetimeModel:
        return LifetimeModel(
            PAPER_SHAPE, PAPER_SCALE_DAYS, None, f"{why}: using Brewington & Cybenko's fit "
            f"(shape {PAPER_SHAPE}, scale {PAPER_SCALE_DAYS} d)",
        )

    if len(watched) < MIN_FIT_PAGES or changed < MIN_FIT_CHANGED_PAGES:
        return paper(
            f"too little data to fit ({len(watched)} pages watched over a span, {changed} "
            f"with a change; need {MIN_FIT_PAGES} and {MIN_FIT_CHANGED_PAGES})"
        )
    try:
        fit = fit_lifetimes(watched)
    except ValueError as error:
        return paper(f"the fit failed ({error})")
    if not (math.isfinite(fit.shape) and math.isfinite(fit.scale_days) and fit.scale_days > 0):
        return paper("the fit did not converge")
    return LifetimeModel(
        fit.shape, fit.scale_days, fit,
        f"fitted to this crawler's observations of {fit.pages_used} pages "
        f"({changed} with a detected change)",
        misfit=misfit_words(fit),
    )


def misfit_words(fit: LifetimeFit) -> str | None:
    """The verdict of the fit's goodness-of-fit test in words, when it rejects the fit."""
    if fits_observations(fit):
        return None
    return (
        f"The fitted Weibull does not describe these lifetimes: the pages' change counts "
        f"reject it (χ² = {fit.chi_square:.1f} on {fit.chi_square_dof} df, "
        f"p = {fit.chi_square_p_value:.2g}, below {MISFIT_P_VALUE:g}). Its lifetime curve, "
        "and the capacity figures drawn from it, do not describe this crawl"
    )
