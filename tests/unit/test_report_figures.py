"""The report's figures and page from plain data (no database)."""

from __future__ import annotations

import html
import math
import re
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from crawler.core.lifetime_fit import PageObservation, simulate_observations
from crawler.report import figures
from crawler.report.data import (
    PAPER_SCALE_DAYS,
    PAPER_SHAPE,
    HostSummary,
    ReportData,
    UrlHistory,
    change_times_seconds,
    choose_lifetime_model,
    empty_report_data,
    page_observations,
)
from crawler.report.html import EMPTY_DATABASE_MESSAGE, write_report

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def assert_png(path: Path | None) -> None:
    assert path is not None and path.exists()
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000


def synthetic_observations(pages: int = 150, seed: int = 3) -> list[PageObservation]:
    rng = np.random.default_rng(seed)
    return simulate_observations(rng.uniform(100.0, 700.0, pages), 1.4, 152.2, rng)


def test_figures_from_synthetic_data_are_pngs(tmp_path: Path) -> None:
    rng = np.random.default_rng(1)
    observations = synthetic_observations()
    assert_png(figures.lifetime_cdf_figure(observations, tmp_path / "a.png",
                                           shape=1.4, scale_days=152.2))
    assert_png(figures.lifetime_cdf_figure(observations, tmp_path / "a2.png"))
    assert_png(figures.mean_lifetime_figure(1.4, 152.2, tmp_path / "b.png",
                                            per_page_estimates_days=[10.0, 50.0, 120.0]))
    assert_png(figures.level_set_figure(1.4, 152.2, tmp_path / "c.png", include_optimal=False))
    times = 1.7e9 + rng.uniform(0.0, 30 * 86_400.0, 500)
    assert_png(figures.change_arrivals_figure(list(times), tmp_path / "d.png"))
    assert_png(figures.change_rate_figure(list(rng.lognormal(-3.0, 1.5, 300)), tmp_path / "e.png"))
    assert_png(figures.revisit_interval_figure(list(rng.uniform(1e-4, 3e-4, 50)),
                                               tmp_path / "f.png"))
    # All equal values still give a drawable histogram.
    assert_png(figures.change_rate_figure([0.5] * 10, tmp_path / "g.png"))


def test_figures_without_data_draw_nothing(tmp_path: Path) -> None:
    assert figures.lifetime_cdf_figure([PageObservation(10.0, 1)], tmp_path / "a.png") is None
    assert figures.change_arrivals_figure([], tmp_path / "b.png") is None
    assert figures.change_rate_figure([0.0, -1.0, math.nan], tmp_path / "c.png") is None
    assert figures.revisit_interval_figure([], tmp_path / "d.png") is None
    assert list(tmp_path.iterdir()) == []


@given(st.lists(st.floats(0.0, 4e9, allow_nan=False), max_size=50))
def test_hour_of_week_bins_follow_the_calendar(times: list[float]) -> None:
    counts = figures.hour_of_week(times)
    assert counts.shape == (168,) and int(counts.sum()) == len(times)
    expected = np.zeros(168, dtype=np.int64)
    for seconds in times:
        day, second_of_day = divmod(math.floor(seconds), 86_400)
        expected[((day + 3) % 7) * 24 + second_of_day // 3600] += 1  # 1970-01-01: Thursday
    assert np.array_equal(counts, expected)


def test_hour_of_week_known_moments() -> None:
    monday = datetime(2024, 1, 1, 0, 30, tzinfo=UTC).timestamp()
    sunday = datetime(2024, 1, 7, 23, 59, tzinfo=UTC).timestamp()
    counts = figures.hour_of_week([monday, sunday, sunday])
    assert counts[0] == 1 and counts[167] == 2


@pytest.mark.parametrize(
    ("days", "unit"),
    [(30 / 86_400, "seconds"), (10 / 1440, "minutes"), (5 / 24, "hours"), (3.0, "days"),
     (math.inf, "days")],
)
def test_time_unit_reads_as_small_numbers(days: float, unit: str) -> None:
    assert figures.time_unit_for(days).name == unit


def test_page_observations_from_histories() -> None:
    history = UrlHistory(1, 0.0, 3 * 86_400.0, 3, (86_400.0, 1.5 * 86_400.0, 2.5 * 86_400.0))
    (page,) = page_observations([history])
    assert page.span_days == 3.0 and page.change_count == 3
    assert page.intervals_days == pytest.approx((0.5, 1.0))
    assert change_times_seconds([history, history]) == list(history.change_seconds) * 2


def test_model_is_the_paper_until_there_is_enough_data() -> None:
    few = choose_lifetime_model([PageObservation(10.0, 2), PageObservation(5.0, 0)])
    assert few.fit is None and (few.shape, few.scale_days) == (PAPER_SHAPE, PAPER_SCALE_DAYS)
    assert "too little data" in few.reason
    enough = choose_lifetime_model(synthetic_observations(300, seed=5))
    assert enough.fit is not None and "fitted" in enough.reason
    assert enough.shape == pytest.approx(1.4, rel=0.3)
    assert enough.scale_days == pytest.approx(152.2, rel=0.3)


def test_empty_data_renders_the_message_and_valid_images(tmp_path: Path) -> None:
    report = write_report(empty_report_data(), tmp_path)
    page = report.index.read_text(encoding="utf-8")
    assert EMPTY_DATABASE_MESSAGE in html.unescape(page)
    assert "No change has been detected yet." in page
    assert "No hosts with URLs yet." in page
    sources = re.findall(r'<img src="data:image/png;base64,[^"]+" data-file="([^"]+)"', page)
    assert sorted(sources) == sorted(p.name for p in report.images) != []
    for image in report.images:
        assert_png(image)
    # The capacity figures come from the paper's model: T ≈ 8.5 days at (0.95, 1 day).
    assert report.headline.uniform_period_days == pytest.approx(8.5, abs=0.2)


def test_host_table_rows(tmp_path: Path) -> None:
    data = ReportData(
        histories=(), change_rates_per_day=(), revisit_intervals_days=(),
        hosts=(HostSummary("http://127.0.0.2:8700", 3, 40, 7, 28.0),
               HostSummary("http://127.0.0.3:8700", 1, 0, 0, 0.0)),
        host_count=4, url_count=4, observation_count=40, change_total=7,
        generated_at=datetime(2024, 1, 1, tzinfo=UTC),
    )
    page = write_report(data, tmp_path).index.read_text(encoding="utf-8")
    assert 'id="empty"' not in page
    assert ("<tr><td>http://127.0.0.2:8700</td><td>3</td><td>40</td><td>7</td><td>28</td>"
            "<td>0.25</td></tr>") in page
    # Never fetched successfully twice: no span to divide by.
    assert "<tr><td>http://127.0.0.3:8700</td><td>1</td><td>0</td><td>0</td><td>0</td>" \
        "<td>–</td></tr>" in page
    assert "The 2 busiest of 4 hosts." in page
