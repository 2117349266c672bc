"""The report's plots: plain data in, one PNG out (matplotlib, Agg canvas, no pyplot).

Each function returns the path it wrote, or None when its data are empty (the page then
says why the plot is missing). Figures are built on their own Figure objects, so nothing
here touches matplotlib's global state or needs a display.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from matplotlib.text import Text
from matplotlib.ticker import NullFormatter
from matplotlib.transforms import Bbox

from crawler.core import capacity
from crawler.core.lifetime_fit import PageObservation, observed_lifetime_cdf
from crawler.core.model import SECONDS_PER_DAY

FloatArray = npt.NDArray[np.float64]

HOURS_PER_WEEK = 168
_SIZE_INCHES = (7.0, 4.2)
_DPI = 100
_CDF_POINTS = 200
_LEVEL_SET_POINTS = 25
_OPTIMAL_POINTS = 8  # the optimal schedule costs ~0.2 s a point
_WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")


@dataclass(frozen=True, slots=True)
class TimeUnit:
    """A unit to show durations in, chosen so that typical values read as small numbers."""

    name: str
    days: float

    def of(self, values_days: FloatArray | float) -> FloatArray:
        return np.asarray(values_days, dtype=np.float64) / self.days


def time_unit_for(typical_days: float) -> TimeUnit:
    """Seconds below 2 minutes, minutes below 2 hours, hours below 2 days, else days."""
    seconds = typical_days * SECONDS_PER_DAY
    if not math.isfinite(seconds) or seconds >= 2 * SECONDS_PER_DAY:
        return TimeUnit("days", 1.0)
    if seconds >= 7200:
        return TimeUnit("hours", 1.0 / 24.0)
    if seconds >= 120:
        return TimeUnit("minutes", 1.0 / 1440.0)
    return TimeUnit("seconds", 1.0 / SECONDS_PER_DAY)


def _new_axes() -> tuple[Figure, Axes]:
    figure = Figure(figsize=_SIZE_INCHES, dpi=_DPI, layout="constrained")
    FigureCanvasAgg(figure)
    return figure, figure.add_subplot()


def _label(
    axes: Any, x: str, y: str, title: str, *, grid: str | None = "major", legend: str | None = None
) -> None:
    """Every figure's finish: axis labels, title, the faint grid and the legend if any."""
    axes.set_xlabel(x)
    axes.set_ylabel(y)
    axes.set_title(title)
    if grid is not None:
        axes.grid(True, which=grid, alpha=0.3)
    if legend is not None:
        axes.legend(loc=legend)


def _save_figure(figure: Figure, path: Path) -> Path:
    """Write the PNG; when its tick labels clash, thin them out and write it again.

    The check reads the label boxes of the drawing just saved, so a figure without clashes
    costs no extra layout."""
    path.parent.mkdir(parents=True, exist_ok=True)
    figure.savefig(path, format="png", dpi=_DPI)
    if overlapping_tick_labels(figure, drawn=True):
        declutter_ticks(figure)
        figure.savefig(path, format="png", dpi=_DPI)
    return path


def _save(figure: Figure | None, path: Path) -> Path | None:
    return None if figure is None else _save_figure(figure, path)


# Estimates closer than this (relative) are "all equal": an axis spanning 3.33328e-2 to
# 3.33333e-2 shows rounding noise, not a distribution.
EQUAL_RELATIVE_SPREAD = 1e-3


def equal_value(values: FloatArray) -> float | None:
    """The common value when every (positive) value is the same up to rounding, else None."""
    if values.size == 0:
        return None
    low, high = float(values.min()), float(values.max())
    if low > 0 and high <= low * (1.0 + EQUAL_RELATIVE_SPREAD):
        return float(np.median(values))
    return None


def _log_histogram(axes: Axes, values: FloatArray, color: str, unit: str) -> None:
    """A histogram on a log x axis; when every value is the same, one bar, a decade wide
    axis around it, and a note saying so (not an axis spanning rounding noise)."""
    value = equal_value(values)
    if value is not None:
        values = np.full_like(values, value)
    axes.hist(values, bins=_log_bins(values), color=color, edgecolor="white")
    axes.set_xscale("log")
    if value is None or values.size < 2:
        return
    axes.set_ylim(0.0, values.size * 1.25)
    axes.text(
        0.5, 0.95, f"all {values.size} estimates are equal: {value:.3g} {unit}",
        transform=axes.transAxes, ha="center", va="top",
        bbox={"boxstyle": "round", "facecolor": "#fff4d6", "edgecolor": "#e0a800"},
    )


def _log_bins(values: FloatArray, count: int = 30) -> list[float]:
    """Log-spaced histogram edges covering positive values (a decade when all are equal)."""
    low, high = float(values.min()), float(values.max())
    if equal_value(values) is not None:
        middle = float(np.median(values))
        low, high = middle / math.sqrt(10.0), middle * math.sqrt(10.0)
    return [float(edge) for edge in np.geomspace(low, high, count + 1)]


def _visible_tick_labels(axis: Any, renderer: Any) -> list[tuple[Text, Bbox]]:
    """The tick labels ``axis`` draws (in view, with text, visible), with their boxes."""
    low, high = sorted(axis.get_view_interval())
    span = high - low
    shown = []
    for minor in (False, True):
        locations = axis.get_minorticklocs() if minor else axis.get_majorticklocs()
        labels = axis.get_ticklabels(minor=minor)
        for location, label in zip(locations, labels, strict=False):
            if not (low - 1e-9 * span <= location <= high + 1e-9 * span):
                continue
            if label.get_visible() and label.get_text():
                shown.append((label, label.get_window_extent(renderer)))
    return shown


def _axis_clashes(axis: Any, renderer: Any) -> list[tuple[str, str]]:
    shown = _visible_tick_labels(axis, renderer)
    return [
        (a.get_text(), b.get_text())
        for i, (a, box_a) in enumerate(shown)
        for b, box_b in shown[i + 1:]
        if box_a.overlaps(box_b)
    ]


def _axes_of(figure: Figure) -> list[Any]:
    return [axis for axes in figure.axes for axis in (axes.xaxis, axes.yaxis)]


def overlapping_tick_labels(figure: Figure, *, drawn: bool = False) -> list[tuple[str, str]]:
    """Pairs of drawn tick labels whose boxes overlap (on any axis of ``figure``); ``drawn``:
    the figure has just been drawn at its own dpi, so its layout is read as it is."""
    if not drawn:
        figure.draw_without_rendering()  # lays out the ticks and labels, draws no pixels
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    return [clash for axis in _axes_of(figure) for clash in _axis_clashes(axis, renderer)]


def declutter_ticks(figure: Figure) -> None:
    """Make colliding tick labels readable, on the axes where they collide only: drop the
    minor labels, then rotate x labels, then show every k-th label, until none overlap."""
    figure.draw_without_rendering()
    renderer = figure.canvas.get_renderer()  # type: ignore[attr-defined]
    clashing = [axis for axis in _axes_of(figure) if _axis_clashes(axis, renderer)]
    if not clashing:
        return
    for axis in clashing:
        axis.set_minor_formatter(NullFormatter())
    figure.draw_without_rendering()
    clashing = [axis for axis in clashing if _axis_clashes(axis, renderer)]
    for axis in clashing:
        if axis.axis_name == "x":
            axis.axes.tick_params(axis="x", which="both", labelrotation=30)
            for label in axis.get_ticklabels(which="both"):
                label.set_horizontalalignment("right")
                label.set_rotation_mode("anchor")
    step = 2
    while step <= 64:
        figure.draw_without_rendering()
        clashing = [axis for axis in clashing if _axis_clashes(axis, renderer)]
        if not clashing:
            return
        for axis in clashing:
            shown = _visible_tick_labels(axis, renderer)
            for index, (label, _) in enumerate(shown):
                label.set_visible(index % step == 0)
        step *= 2


def lifetime_cdf_figure(
    observations: Sequence[PageObservation],
    path: Path,
    *,
    shape: float | None = None,
    scale_days: float | None = None,
) -> Path | None:
    return _save(draw_lifetime_cdf(observations, shape=shape, scale_days=scale_days), path)


def draw_lifetime_cdf(
    observations: Sequence[PageObservation],
    *,
    shape: float | None = None,
    scale_days: float | None = None,
) -> Figure | None:
    """Observed CDF of intervals between detected changes, with the model's (B&C Fig. 13).

    The fitted curve is the span-corrected CDF of the intervals pages watched over these
    spans would show (observed_lifetime_cdf); the dashed one ignores the spans (eq. 15).
    """
    intervals = np.array(
        [d for o in observations for d in o.intervals_days if d > 0], dtype=np.float64
    )
    if intervals.size == 0:
        return None
    spans = np.array([o.span_days for o in observations if o.span_days > 0], dtype=np.float64)
    unit = time_unit_for(float(np.median(intervals)))
    ordered = np.sort(intervals)
    figure, axes = _new_axes()
    axes.step(
        unit.of(ordered), np.arange(1, ordered.size + 1) / ordered.size, where="post",
        label=f"observed ({ordered.size} intervals)", color="black",
    )
    if shape is not None and scale_days is not None and spans.size > 0:
        grid = np.geomspace(float(ordered[0]) / 2.0, float(spans.max()), _CDF_POINTS)
        fitted = observed_lifetime_cdf(grid, spans, shape, scale_days)
        naive = observed_lifetime_cdf(grid, spans, shape, scale_days, span_correction=False)
        axes.plot(unit.of(grid), fitted, label="model, corrected for span", color="tab:blue")
        axes.plot(
            unit.of(grid), naive, label="model, spans ignored (eq. 15)", color="tab:orange",
            linestyle="--",
        )
    axes.set_xscale("log")
    axes.set_ylim(0.0, 1.02)
    _label(
        axes, f"interval between detected changes ({unit.name})", "fraction of intervals ≤ x",
        "Lifetime CDF: observed and fitted", grid="both", legend="lower right",
    )
    return figure


def mean_lifetime_figure(
    shape: float,
    scale_days: float,
    path: Path,
    *,
    per_page_estimates_days: Sequence[float] = (),
) -> Path:
    return _save_figure(
        draw_mean_lifetime(shape, scale_days, per_page_estimates_days=per_page_estimates_days),
        path,
    )


def draw_mean_lifetime(
    shape: float,
    scale_days: float,
    *,
    per_page_estimates_days: Sequence[float] = (),
) -> Figure:
    """Density w(t) of mean lifetimes (B&C eq. 23), over the naive per-page estimates."""
    upper_days = float(capacity.weibull_quantiles(np.array([0.99]), shape, scale_days)[0])
    unit = time_unit_for(scale_days)
    grid = np.linspace(upper_days / 2000.0, upper_days, 400)
    figure, axes = _new_axes()
    estimates = np.array([e for e in per_page_estimates_days if 0 < e <= upper_days])
    if estimates.size > 0:
        axes.hist(
            unit.of(estimates), bins=30, density=True, color="0.8", edgecolor="0.5",
            label=f"span / changes of {estimates.size} pages that changed",
        )
    density = capacity.weibull_pdf(grid, shape, scale_days) * unit.days  # per display unit
    axes.plot(
        unit.of(grid), density, color="tab:blue",
        label=f"Weibull(shape {shape:.3g}, scale {unit.of(scale_days):.3g} {unit.name})",
    )
    _label(
        axes, f"mean lifetime t = 1/λ ({unit.name})", f"density (per {unit.name.rstrip('s')})",
        "Distribution of mean lifetimes", legend="upper right",
    )
    return figure


def level_set_figure(
    shape: float,
    scale_days: float,
    path: Path,
    *,
    alpha: float = 0.95,
    beta_max_days: float | None = None,
    include_optimal: bool = True,
) -> Path:
    return _save_figure(
        draw_level_set(shape, scale_days, alpha=alpha, beta_max_days=beta_max_days,
                       include_optimal=include_optimal),
        path,
    )


def _required_period_or_nan(alpha: float, beta_days: float, shape: float, scale: float) -> float:
    """A point of the level set, or NaN (not drawn) where alpha is out of reach: with no
    grace period and lifetimes fitted to a few seconds, no fetch period reaches it."""
    try:
        return capacity.required_period(alpha, beta_days, shape, scale)
    except ValueError:
        return math.nan


def draw_level_set(
    shape: float,
    scale_days: float,
    *,
    alpha: float = 0.95,
    beta_max_days: float | None = None,
    include_optimal: bool = True,
) -> Figure:
    """Re-fetch period T against grace period β at which the collection is exactly
    α-current: Brewington & Cybenko's Fig. 19 (α = 0.95), from eq. (24).

    The optimal curve is the mean period of the Lagrange-optimal per-page schedule that
    reaches the same α: how much longer the average page may wait when fast pages are
    fetched more often than slow ones.
    """
    beta_max = beta_max_days if beta_max_days is not None else scale_days / 5.0
    unit = time_unit_for(beta_max)
    betas = np.linspace(0.0, beta_max, _LEVEL_SET_POINTS)
    periods = np.array([_required_period_or_nan(alpha, float(b), shape, scale_days) for b in betas])
    figure, axes = _new_axes()
    axes.plot(unit.of(betas), unit.of(periods), color="tab:blue", label="uniform schedule")
    if include_optimal:
        optimal_betas = np.linspace(0.0, beta_max, _OPTIMAL_POINTS)
        optimal = np.array([capacity.optimal_required_period(alpha, float(b), shape, scale_days)
                            for b in optimal_betas])
        axes.plot(
            unit.of(optimal_betas), unit.of(optimal), color="tab:green", linestyle="--",
            marker="o", markersize=3, label="optimal schedule (mean period)",
        )
    axes.plot(unit.of(betas), unit.of(betas), color="0.6", linestyle=":", label="T = β")
    axes.set_xlim(0.0, float(unit.of(beta_max)))
    axes.set_ylim(bottom=0.0)
    _label(
        axes, f"grace period β ({unit.name})", f"re-fetch period T ({unit.name})",
        f"({alpha:g}, β)-currency: re-fetch period against grace period", legend="upper left",
    )
    return figure


def hour_of_week(times_seconds: Sequence[float]) -> npt.NDArray[np.int64]:
    """Counts per UTC hour of the week, Monday 00:00 first (168 bins)."""
    counts = np.zeros(HOURS_PER_WEEK, dtype=np.int64)
    for seconds in times_seconds:
        moment = datetime.fromtimestamp(seconds, UTC)
        counts[moment.weekday() * 24 + moment.hour] += 1
    return counts


def change_arrivals_figure(times_seconds: Sequence[float], path: Path) -> Path | None:
    return _save(draw_change_arrivals(times_seconds), path)


def draw_change_arrivals(times_seconds: Sequence[float]) -> Figure | None:
    """Detected changes by hour of the week (B&C Fig. 1's question: when do pages change?)."""
    if len(times_seconds) == 0:
        return None
    counts = hour_of_week(times_seconds)
    figure, axes = _new_axes()
    axes.bar(np.arange(HOURS_PER_WEEK) + 0.5, counts, width=1.0, color="tab:blue")
    axes.set_xticks(np.arange(0, HOURS_PER_WEEK, 24) + 12, _WEEKDAYS)
    for day_start in range(24, HOURS_PER_WEEK, 24):
        axes.axvline(day_start, color="0.7", linewidth=0.8)
    axes.set_xlim(0, HOURS_PER_WEEK)
    _label(
        axes, "hour of the week (UTC)", "changes detected",
        f"Change arrivals by hour of week ({len(times_seconds)} changes)", grid=None,
    )
    return figure


def change_rate_figure(change_rates_per_day: Sequence[float], path: Path) -> Path | None:
    return _save(draw_change_rates(change_rates_per_day), path)


def positive_finite(values: Sequence[float]) -> FloatArray:
    return np.array([v for v in values if v > 0 and math.isfinite(v)], dtype=np.float64)


def draw_change_rates(change_rates_per_day: Sequence[float]) -> Figure | None:
    """Histogram of the estimator's change rates (log axis: they span decades)."""
    rates = positive_finite(change_rates_per_day)
    if rates.size == 0:
        return None
    figure, axes = _new_axes()
    _log_histogram(axes, rates, "tab:blue", "per day")
    _label(
        axes, "estimated change rate λ (changes per day)", "URLs",
        f"Estimated change rates ({rates.size} URLs)",
    )
    return figure


def revisit_interval_figure(intervals_days: Sequence[float], path: Path) -> Path | None:
    return _save(draw_revisit_intervals(intervals_days), path)


def draw_revisit_intervals(intervals_days: Sequence[float]) -> Figure | None:
    """Histogram of the revisit intervals 1/f the planner chose."""
    intervals = positive_finite(intervals_days)
    if intervals.size == 0:
        return None
    unit = time_unit_for(float(np.median(intervals)))
    figure, axes = _new_axes()
    _log_histogram(axes, unit.of(intervals), "tab:green", unit.name)
    _label(
        axes, f"revisit interval 1/f chosen by the planner ({unit.name})", "URLs",
        f"Planned revisit intervals ({intervals.size} URLs)",
    )
    return figure
