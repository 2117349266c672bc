"""The live harness's pure parts: the ground-truth web, the exact freshness and age of a
crawled page, the population built from known pages, and the evaluation's analytic rows."""

from __future__ import annotations

import math
import random
from collections import Counter

import numpy as np
import pytest

from crawler.core import freshness as analytic
from crawler.demo.live import HINT_SITEMAPS, live_web, observable_change_times
from crawler.demo.processes import PoissonProcess, ScheduledProcess
from crawler.demo.sites import Link, PageSpec, SiteSpec
from crawler.sim.groundtruth import collection_metrics, page_metrics
from crawler.sim.live import (
    RunShape,
    TruePage,
    analytic_figures,
    evaluate_hints,
    format_hint_table,
    live_row,
)
from crawler.sim.populations import from_pages
from crawler.sim.simulator import simulate

SHAPE = RunShape(
    seconds=100.0, warmup_seconds=20.0, budget_per_day=86400.0,
    min_interval_seconds=1.0, max_interval_seconds=3600.0, planner_interval_seconds=10.0,
)


def test_fresh_until_the_first_change_after_each_fetch() -> None:
    measured = page_metrics([5.0, 15.0], [0.0, 10.0, 20.0], 0.0, 30.0, origin=0.0)
    assert measured.freshness == pytest.approx(20.0 / 30.0)
    # Stale on [5, 10) and [15, 20): ages 0..5 twice, 12.5 s² each.
    assert measured.age == pytest.approx(25.0 / 30.0)


def test_no_copy_before_the_first_fetch_and_a_change_at_a_fetch_is_seen() -> None:
    never = page_metrics([5.0], [], 0.0, 10.0, origin=0.0)
    assert never.freshness == 0.0 and never.age == pytest.approx(5.0)
    seen = page_metrics([4.0], [4.0], 2.0, 10.0, origin=0.0)
    # Stale (no copy) on [2, 4), ages 2..4 from the origin; fresh after the fetch.
    assert seen.freshness == pytest.approx(6.0 / 8.0)
    assert seen.age == pytest.approx((16.0 - 4.0) / 2.0 / 8.0)


def test_window_clips_the_integrals() -> None:
    whole = page_metrics([3.0, 7.0], [1.0, 5.0, 9.0], 0.0, 10.0, origin=0.0)
    halves = [page_metrics([3.0, 7.0], [1.0, 5.0, 9.0], a, b, origin=0.0)
              for a, b in ((0.0, 4.0), (4.0, 10.0))]
    assert whole.freshness * 10 == pytest.approx(halves[0].freshness * 4 + halves[1].freshness * 6)
    assert whole.age * 10 == pytest.approx(halves[0].age * 4 + halves[1].age * 6)


def test_periodic_fetching_of_a_poisson_page_matches_the_closed_forms() -> None:
    rate, interval, horizon = 0.05, 30.0, 2_000_000.0
    changes = PoissonProcess(rate).event_times("closed-form", horizon)
    fetches = list(np.arange(0.0, horizon, interval))
    measured = page_metrics(changes, fetches, 1000.0, horizon, origin=0.0)
    per_day = 86400.0
    assert measured.freshness == pytest.approx(
        float(analytic.freshness(rate * per_day, per_day / interval)), abs=0.005
    )
    assert measured.age == pytest.approx(
        float(analytic.age_days(rate * per_day, per_day / interval)) * per_day, rel=0.03
    )


def test_collection_metrics_weigh_pages_alike() -> None:
    a = page_metrics([], [0.0], 0.0, 1.0, origin=0.0)
    b = page_metrics([0.5], [0.0], 0.0, 1.0, origin=0.0)
    both = collection_metrics([a, b])
    assert both.freshness == pytest.approx(0.75)
    assert both.age == pytest.approx(0.0625)


def test_live_web_mixes_kinds_on_every_host() -> None:
    web = live_web(120, 12, horizon_seconds=600.0, seed=3)
    kinds = Counter(page.kind for page in web.pages)
    assert kinds == {"poisson": 90, "periodic": 18, "outage": 12}
    assert len(web.sites) == 12
    assert all(len(site.pages) == 10 for site in web.sites)
    rates = [page.change_rate_per_second for page in web.pages if page.kind == "poisson"]
    assert max(rates) / min(rates) > 100.0  # at least two orders of magnitude
    again = live_web(120, 12, horizon_seconds=600.0, seed=3)
    assert again == web


def test_outage_page_is_absent_then_back_and_its_changes_show() -> None:
    page = PageSpec(
        "/p", real=ScheduledProcess((5.0, 12.0, 25.0)), outages=((10.0, 20.0), (30.0, 40.0))
    )
    site = SiteSpec("s", (page,))
    assert page.exists_at(9.9) and not page.exists_at(10.0) and not page.exists_at(19.9)
    assert page.exists_at(20.0) and not page.exists_at(35.0) and page.exists_at(40.0)
    # The change at 12 happened while away: it shows at the return at 20.
    assert observable_change_times(site, page, 45.0) == [5.0, 10.0, 20.0, 25.0, 30.0, 40.0]
    assert observable_change_times(site, page, 26.0) == [5.0, 10.0, 20.0, 25.0]
    assert site.version_at(page, 21.0) == 2
    with pytest.raises(ValueError, match="disjoint"):
        PageSpec("/q", outages=((5.0, 10.0), (8.0, 12.0)))


def test_a_link_to_a_page_in_outage_is_hidden_meanwhile() -> None:
    site = SiteSpec(
        "s", (PageSpec("/", (Link("a.html"),)), PageSpec("/a.html", outages=((10.0, 20.0),)))
    )
    root = site.page("/")
    assert root is not None
    assert [link.href for link in site.rendered_links(root, 15.0)] == []
    assert [link.href for link in site.rendered_links(root, 25.0)] == ["a.html"]
    assert site.real_change_times(root, 30.0) == [10.0, 20.0]
    truth = site.truth(15.0)
    assert truth[1]["outages"] == [[10.0, None]] and truth[1]["exists"] is False


def test_population_from_pages_simulates_like_its_change_times() -> None:
    rng = random.Random(1)
    days = 20.0
    rates = [rng.uniform(0.5, 5.0) for _ in range(50)]
    times = [PoissonProcess(r / 86400.0).event_times(f"p{i}", days * 86400.0)
             for i, r in enumerate(rates)]
    population = from_pages("known", rates, [[t / 86400.0 for t in ts] for ts in times],
                            ["poisson"] * 50)
    assert population.pages == 50
    assert population.offsets[-1] == sum(len(ts) for ts in times)
    result = simulate(population, "uniform", days=days, budget_per_day=100.0, warmup_days=2.0)
    expected = float(np.mean(analytic.freshness(np.array(rates), 2.0)))
    assert result.freshness == pytest.approx(expected, abs=0.03)
    with pytest.raises(ValueError, match="one rate"):
        from_pages("bad", [1.0], [], ["poisson"])


def test_live_row_counts_attempts_and_observations_apart() -> None:
    pages = [TruePage("poisson", 0.1, (50.0,)), TruePage("periodic", 0.1, ())]
    fetches = [
        [(10.0, "ok"), (30.0, "network_error"), (60.0, "not_modified")],
        [(25.0, "ok"), (90.0, "gone")],
    ]
    row = live_row("live", pages, fetches, SHAPE)
    # Window [20, 100): attempts at 30, 60 (page 0) and 25, 90 (page 1).
    assert row.everything.fetches_per_second == pytest.approx(4 / 80.0)
    assert row.poisson.fetches_per_second == pytest.approx(2 / 80.0)
    # Page 0 fresh on [20, 50) and [60, 100); the failed fetch at 30 changed nothing.
    assert row.poisson.freshness == pytest.approx(70.0 / 80.0)
    assert row.everything.freshness == pytest.approx((70.0 / 80.0 + 75.0 / 80.0) / 2.0)


def test_oracle_beats_uniform_at_the_same_rate_within_bounds() -> None:
    rates = list(np.geomspace(1 / 5.0, 1 / 5000.0, 60))
    oracle = analytic_figures(rates, 1.0, SHAPE, optimal=True)
    uniform = analytic_figures(rates, 1.0, SHAPE, optimal=False)
    assert oracle.fetches_per_second == pytest.approx(1.0, rel=1e-4)
    assert uniform.fetches_per_second == pytest.approx(1.0)
    assert oracle.freshness is not None and uniform.freshness is not None
    assert oracle.freshness > uniform.freshness + 0.02
    assert uniform.freshness == pytest.approx(
        float(np.mean(analytic.freshness(np.array(rates) * 86400.0, 86400.0 / 60.0)))
    )
    assert math.isfinite(oracle.age_seconds or math.nan)


def test_hint_sitemaps_date_a_third_truthfully_a_third_falsely() -> None:
    web = live_web(60, 6, horizon_seconds=1000.0, seed=3, fastest_seconds=5.0,
                   slowest_seconds=50.0, sitemaps=HINT_SITEMAPS)
    assert Counter(p.lastmod for p in web.pages) == {"truthful": 20, "absent": 20,
                                                     "random": 10, "now": 10}
    at = 400.0
    for page in web.pages:
        site = web.sites[page.site]
        spec = site.page(page.path)
        assert spec is not None and site.sitemap is not None
        claimed = dict(site.sitemap_dates(at))[page.path]
        changes = observable_change_times(site, spec, at)
        if page.lastmod == "truthful":
            assert claimed == (changes[-1] if changes else 0.0)
        elif page.lastmod == "now":
            assert claimed == at
        elif page.lastmod == "absent":
            assert claimed is None
        else:  # dates as frequent as the changes, at other moments
            assert claimed is not None and claimed not in changes
    # A sitemap's truthful date moves with the page's changes only.
    site = next(s for s in web.sites if s.sitemap and s.sitemap.lastmod == "truthful")
    spec = site.pages[0]
    changes = observable_change_times(site, spec, at)
    assert dict(site.sitemap_dates(changes[-1] - 1e-6))[spec.path] == (
        changes[-2] if len(changes) > 1 else 0.0)


def test_hint_evaluation_groups_pages_by_their_dates() -> None:
    pages = [TruePage("poisson", 0.1, (50.0,), lastmod)
             for lastmod in ("truthful", "random", "now", "absent")]
    fetched = [[(30.0, "ok"), (60.0, "ok")]] * 4
    late = [[(30.0, "ok"), (90.0, "ok")]] * 4
    evaluation = evaluate_hints(pages, {"hints-on": fetched, "hints-off": late}, SHAPE)
    assert [name for name, _ in evaluation.groups] == [
        "all", "truthful dates", "false dates", "no dates"]
    assert [count for _, count in evaluation.groups] == [4, 1, 2, 1]
    # No copy before 30 s, then stale on [50, 60) against [50, 90), in the window [20, 100).
    assert evaluation.freshness("hints-on") == pytest.approx(60.0 / 80.0)
    assert evaluation.freshness("hints-off", "false dates") == pytest.approx(30.0 / 80.0)
    assert evaluation.fetches_per_second("hints-on") == pytest.approx(8 / 80.0)
    table = format_hint_table(evaluation)
    assert "hints-on - hints-off" in table and "+0.375" in table
