"""The report reads well: tick labels never overlap (measured with matplotlib's renderer),
equal estimates are said to be equal rather than spread over an axis of rounding noise, and
index.html embeds its plots (it references no file)."""

from __future__ import annotations

import math
import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest

from crawler.report import figures
from crawler.report.data import ReportData
from crawler.report.html import write_report

NEAR_EQUAL = [0.0333328, 0.0333333, 0.033333, 0.0333331] * 5  # rounding noise around 1/30


def test_the_overlap_check_sees_clashing_labels_and_declutter_removes_them() -> None:
    figure, axes = figures._new_axes()
    x = np.arange(60)
    axes.plot(x, x)
    axes.set_xticks(x, [f"label {i}" for i in x])
    assert len(figures.overlapping_tick_labels(figure)) > 10  # the check can fail
    y_labels = [t.get_text() for t in axes.get_yticklabels() if t.get_visible()]
    figures.declutter_ticks(figure)
    assert figures.overlapping_tick_labels(figure) == []
    shown = [t for t in axes.get_xticklabels() if t.get_visible() and t.get_text()]
    assert 3 <= len(shown) < 60  # thinned, not emptied
    # The y axis had no clash: its labels are left alone.
    assert [t.get_text() for t in axes.get_yticklabels() if t.get_visible()] == y_labels


def test_no_report_figure_has_overlapping_tick_labels() -> None:
    rng = np.random.default_rng(4)
    wide = list(rng.lognormal(-3.0, 3.0, 300))  # a dozen decades
    narrow = list(rng.uniform(0.02, 0.09, 50))  # inside one decade: minor labels
    drawn = [
        figures.draw_change_rates(wide), figures.draw_change_rates(narrow),
        figures.draw_change_rates(NEAR_EQUAL),
        figures.draw_revisit_intervals(narrow), figures.draw_revisit_intervals(NEAR_EQUAL),
        figures.draw_change_arrivals([1.7e9 + 3600.0 * i for i in range(200)]),
        figures.draw_mean_lifetime(1.4, 152.2),
    ]
    for figure in drawn:
        assert figure is not None
        figures.declutter_ticks(figure)
        clashes = figures.overlapping_tick_labels(figure)
        assert clashes == [], (figure.axes[0].get_title(), clashes)


def test_equal_estimates_are_one_bar_on_a_readable_axis_and_said_to_be_equal() -> None:
    for draw in (figures.draw_change_rates, figures.draw_revisit_intervals):
        figure = draw(NEAR_EQUAL)
        assert figure is not None
        axes = figure.axes[0]
        low, high = axes.get_xlim()
        assert high / low > 5.0, (low, high)  # a decade around the value, not 3.33328e-2..
        notes = [t.get_text() for t in axes.texts]
        assert any(n.startswith(f"all {len(NEAR_EQUAL)} estimates are equal") for n in notes)
        assert sum(p.get_height() > 0 for p in axes.patches) == 1  # one bar
    # Different estimates get no such note.
    spread = figures.draw_change_rates([0.01, 0.02, 0.5])
    assert spread is not None and len(spread.axes[0].texts) == 0
    assert figures.equal_value(np.array([1.0, 1.0005])) == pytest.approx(1.00025)
    assert figures.equal_value(np.array([1.0, 1.01])) is None


def test_the_page_embeds_its_plots_and_says_when_estimates_are_equal(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Fewer points on the level set's optimal curve (0.2 s each): the same figure, sooner.
    monkeypatch.setattr(figures, "_OPTIMAL_POINTS", 2)
    monkeypatch.setattr(figures, "_LEVEL_SET_POINTS", 5)
    data = ReportData(
        histories=(), change_rates_per_day=tuple(NEAR_EQUAL),
        revisit_intervals_days=tuple(1.0 / r for r in NEAR_EQUAL), hosts=(),
        host_count=1, url_count=20, observation_count=40, change_total=0,
        generated_at=datetime(2024, 1, 1, tzinfo=UTC),
    )
    report = write_report(data, tmp_path / "out")
    page = report.index.read_text(encoding="utf-8")
    sources = re.findall(r'\b(?:src|href)="([^"]*)"', page)
    assert sources and all(s.startswith("data:image/png;base64,") for s in sources)
    assert not re.search(r"\.png\"(?! alt)|file:|https?://", page.replace('data-file="', ""))
    assert len(sources) == len(report.images) == 4
    assert "All 20 estimates are equal: 0.0333 changes per day." in page
    assert "All 20 estimates are equal: 30 days." in page
    # index.html alone is the report: moved away from its PNGs, it still holds every plot.
    alone = tmp_path / "alone.html"
    report.index.rename(alone)
    for image in report.images:
        image.unlink()
    assert len(re.findall(r'src="data:image/png;base64,', alone.read_text("utf-8"))) == 4
    assert math.isclose(figures.equal_value(np.array(NEAR_EQUAL)) or 0, 1 / 30, rel_tol=1e-4)
