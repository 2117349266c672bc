"""The demo web's pure parts: change processes, page text, link graphs and the page window."""

from __future__ import annotations

import itertools
import math
import statistics

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.core.extract import text_features, visible_text
from crawler.core.fingerprint import hamming_distance, simhash64
from crawler.demo.content import RenderedLink, render_page, vocabulary
from crawler.demo.processes import PeriodicProcess, PoissonProcess, ScheduledProcess
from crawler.demo.sites import (
    Link,
    PageSpec,
    SiteSpec,
    bfs_window,
    demo_sites,
    evolving_site,
    poisson_site,
    resolve_href,
    static_site,
)


def fingerprint(html: str) -> int:
    return simhash64(text_features(visible_text(html)))


# -- processes ---------------------------------------------------------------------------


def test_poisson_count_matches_rate() -> None:
    rate_per_second = 1 / 3
    horizon_seconds = 30_000.0
    times = PoissonProcess(rate_per_second).event_times("page", horizon_seconds)
    expected = rate_per_second * horizon_seconds  # 10,000 events, sd 100
    assert abs(len(times) - expected) < 4 * math.sqrt(expected)
    assert times == sorted(times)
    assert times[0] > 0 and times[-1] <= horizon_seconds


def test_poisson_gaps_are_exponential_and_counts_poisson() -> None:
    rate_per_second = 0.5
    times = PoissonProcess(rate_per_second).event_times("gaps", 20_000.0)
    gaps = [b - a for a, b in itertools.pairwise(times)]
    mean_gap = statistics.fmean(gaps)
    assert mean_gap == pytest.approx(1 / rate_per_second, rel=0.05)
    # An exponential law has coefficient of variation 1; a periodic one would have 0.
    assert statistics.stdev(gaps) / mean_gap == pytest.approx(1.0, abs=0.05)
    # Counts per 10 s window: Poisson, so variance / mean (dispersion) is about 1.
    counts = [0] * 2000
    for t in times:
        counts[min(int(t // 10), 1999)] += 1
    dispersion = statistics.pvariance(counts) / statistics.fmean(counts)
    assert dispersion == pytest.approx(1.0, abs=0.15)


@settings(max_examples=50, deadline=None)
@given(
    rate_per_second=st.floats(0.01, 5.0),
    seed=st.text(max_size=8),
    early=st.floats(0.0, 500.0),
    extra=st.floats(0.0, 500.0),
)
def test_poisson_is_deterministic_and_prefix_consistent(
    rate_per_second: float, seed: str, early: float, extra: float
) -> None:
    process = PoissonProcess(rate_per_second)
    later = process.event_times(seed, early + extra)
    assert process.event_times(seed, early) == [t for t in later if t <= early]
    assert PoissonProcess(rate_per_second).event_times(seed, early + extra) == later


def test_poisson_seeds_differ() -> None:
    process = PoissonProcess(1.0)
    assert process.event_times("a", 100.0) != process.event_times("b", 100.0)


def test_periodic_without_jitter_is_exact() -> None:
    times = PeriodicProcess(period_seconds=10.0, phase_seconds=3.0).event_times("p", 45.0)
    assert times == [3.0, 13.0, 23.0, 33.0, 43.0]


@settings(max_examples=50, deadline=None)
@given(
    period=st.floats(0.5, 100.0),
    phase_fraction=st.floats(-2.0, 2.0),
    jitter_fraction=st.floats(0.0, 0.99),
    horizon=st.floats(0.0, 1000.0),
)
def test_periodic_events_fall_in_their_slots(
    period: float, phase_fraction: float, jitter_fraction: float, horizon: float
) -> None:
    process = PeriodicProcess(period, phase_fraction * period, jitter_fraction * period)
    times = process.event_times("seed", horizon)
    assert times == sorted(times)
    assert all(0 < t <= horizon for t in times)
    for t in times:
        slot = math.floor((t - process.phase_seconds) / period + 1e-9)  # float rounding
        offset = t - (process.phase_seconds + slot * period)
        assert -1e-9 <= offset <= process.jitter_seconds + 1e-9
    # One event per slot: consecutive events are more than period - jitter apart.
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(gap >= period - process.jitter_seconds - 1e-9 for gap in gaps)
    assert abs(len(times) - horizon / period) <= 2


def test_scheduled_process_filters_and_sorts() -> None:
    process = ScheduledProcess((30.0, 10.0, -5.0, 20.0))
    assert process.event_times("x", 25.0) == [10.0, 20.0]
    assert process.describe() == {"kind": "scheduled", "times": [-5.0, 10.0, 20.0, 30.0]}


def test_invalid_parameters_are_refused() -> None:
    with pytest.raises(ValueError):
        PoissonProcess(0.0)
    with pytest.raises(ValueError):
        PeriodicProcess(10.0, jitter_seconds=10.0)


# -- content -----------------------------------------------------------------------------

LINKS = [RenderedLink(f"/p{i}.html", f"Link {i}") for i in range(5)]


def test_vocabulary_has_a_few_thousand_distinct_words() -> None:
    assert len(set(vocabulary())) == len(vocabulary()) >= 2000


def test_content_is_deterministic_and_sized_like_a_page() -> None:
    sizes = []
    for k in range(30):
        html = render_page(
            page_seed=f"s:{k}", site_name="s", version=3, cosmetic_version=1, links=LINKS
        )
        assert html == render_page(
            page_seed=f"s:{k}", site_name="s", version=3, cosmetic_version=1, links=LINKS
        )
        sizes.append(len(html.encode()))
    assert min(sizes) >= 2_000 and max(sizes) <= 20_000


def test_script_and_style_words_are_not_visible() -> None:
    html = render_page(page_seed="s:1", site_name="s", version=0, cosmetic_version=0, links=LINKS)
    script = html.split("<script>")[1].split("</script>")[0]
    assert "pageState" in script and "pageState" not in visible_text(html)
    assert "font-family" in html and "font-family" not in visible_text(html)


def test_real_change_moves_simhash_well_over_six_bits() -> None:
    distances = []
    for k in range(40):
        previous = None
        for version in range(6):
            html = render_page(
                page_seed=f"site:{k}",
                site_name="s",
                version=version,
                cosmetic_version=0,
                links=LINKS,
            )
            current = fingerprint(html)
            if previous is not None:
                distances.append(hamming_distance(previous, current))
            previous = current
    assert min(distances) >= 8
    assert statistics.median(distances) >= 15


def test_cosmetic_change_moves_simhash_far_less_than_six_bits() -> None:
    build_distances = []
    per_request_distances = []
    for k in range(40):
        for version in (0, 3):

            def html(cosmetic: int, note: str | None, k: int = k, version: int = version) -> str:
                return render_page(
                    page_seed=f"site:{k}",
                    site_name="s",
                    version=version,
                    cosmetic_version=cosmetic,
                    links=LINKS,
                    per_request_note=note,
                )

            build_distances.append(
                hamming_distance(fingerprint(html(0, None)), fingerprint(html(7, None)))
            )
            first = fingerprint(html(0, f"Rendered at 1700000000 for visit {k}."))
            second = fingerprint(html(0, f"Rendered at 1700003655 for visit {k + 4711}."))
            per_request_distances.append(hamming_distance(first, second))
            # The bytes differ although the text barely moved: a cosmetic change.
            assert html(0, None) != html(7, None)
    for distances in (build_distances, per_request_distances):
        assert max(distances) < 6
        assert statistics.fmean(distances) < 2


# -- sites, graphs and the page window ---------------------------------------------------


def test_resolve_href_handles_relative_absolute_and_foreign_links() -> None:
    assert resolve_href("/a/b.html", "c.html") == "/a/c.html"
    assert resolve_href("/a/b.html", "../c.html#top") == "/c.html"
    assert resolve_href("/a/b/", "..") == "/a/"
    assert resolve_href("/a/b.html", "./") == "/a/"
    assert resolve_href("/a/b.html", "{origin}/x.html") == "/x.html"
    assert resolve_href("/a/b.html", "{site:1}/") is None
    assert resolve_href("/a/b.html", "mailto:x@localhost") is None
    assert resolve_href("/a/b.html", "http://127.0.0.9:80/") is None


def test_bfs_window_breaks_ties_by_link_order() -> None:
    graph = {
        "/": ["/b", "/a", "/"],
        "/a": ["/a2", "/a1"],
        "/b": ["/b1", "/a1", "/missing"],
        "/a1": [],
        "/a2": [],
        "/b1": ["/deep"],
        "/deep": [],
    }
    assert bfs_window(graph, "/", 100) == ["/", "/b", "/a", "/b1", "/a1", "/a2", "/deep"]
    assert bfs_window(graph, "/", 4) == ["/", "/b", "/a", "/b1"]
    assert bfs_window(graph, "/", 0) == []
    assert bfs_window(graph, "/nowhere", 5) == []


@settings(max_examples=100, deadline=None)
@given(
    edges=st.dictionaries(st.integers(0, 15), st.lists(st.integers(0, 20), max_size=5), min_size=1),
    n=st.integers(0, 20),
)
def test_bfs_window_is_a_prefix_of_every_larger_window(edges: dict[int, list[int]], n: int) -> None:
    graph = {str(k): [str(t) for t in targets] for k, targets in edges.items()}
    root = str(min(edges))
    window = bfs_window(graph, root, n)
    full = bfs_window(graph, root, len(graph))
    assert window == full[:n]
    assert len(set(full)) == len(full)
    assert all(page in graph for page in full)
    # Every page of the full window is linked from an earlier one (or is the root).
    for i, page in enumerate(full[1:], start=1):
        assert any(page in graph[earlier] for earlier in full[:i])


def test_static_site_is_realistic_and_fully_reachable() -> None:
    site = static_site(n_pages=300, seed=1)
    assert len(site.pages) == 300
    graph = site.graph_at(0.0)
    assert len(bfs_window(graph, "/", 1000)) == 300
    hrefs = [link.href for page in site.pages for link in page.links]
    assert any(h.startswith("../") for h in hrefs)
    assert any(h.startswith("./") for h in hrefs)
    assert any("#" in h for h in hrefs)
    assert any(h.startswith("/") for h in hrefs)
    assert any(h.startswith("{origin}/") for h in hrefs)
    assert any(h.startswith("{site:") for h in hrefs)
    assert any(h.startswith("mailto:") for h in hrefs)
    broken = [h for p in site.pages for h in (lk.href for lk in p.links) if "missing" in h]
    assert broken and all(site.page(resolve_href("/about.html", h) or "") is None for h in broken)
    assert all(site.version_at(page, 1e6) == 0 for page in site.pages)


def test_evolving_site_creates_deletes_and_moves_pages() -> None:
    site = evolving_site(n_initial=40, n_created=10, n_deleted=6, n_moved=6, seed=3)
    horizon = 120.0
    before, after = site.graph_at(0.0), site.graph_at(horizon)
    created = [p for p in site.pages if p.created_at_seconds > 0]
    deleted = [p for p in site.pages if p.deleted_at_seconds < math.inf]
    assert len(created) == 10 and len(deleted) == 6
    assert all(p.path not in before and p.path in after for p in created)
    assert all(p.path in before and p.path not in after for p in deleted)
    # No link points to a page that does not exist, and everything stays reachable.
    for graph in (before, site.graph_at(60.0), after):
        assert all(target in graph for targets in graph.values() for target in targets)
        assert set(bfs_window(graph, "/", 1000)) == set(graph)
    # A moved page has a different parent at the end.
    moved = {
        link.href for page in site.pages for link in page.links if link.until_seconds < math.inf
    }
    assert len(moved) == 6
    for path in moved:
        parents_before = {p for p, targets in before.items() if path in targets and p != "/"}
        parents_after = {p for p, targets in after.items() if path in targets and p != "/"}
        assert parents_before and parents_after and parents_before != parents_after


def test_link_changes_are_real_changes_of_the_linking_page() -> None:
    site = evolving_site(n_initial=20, n_created=3, n_deleted=2, n_moved=2, seed=5)
    for page in site.pages:
        if page.created_at_seconds <= 0:
            continue
        parent = next(p for p in site.pages if any(lk.href == page.path for lk in p.links))
        t = page.created_at_seconds
        assert t in site.real_change_times(parent, 1e9)
        assert site.version_at(parent, t) == site.version_at(parent, t - 1e-6) + 1


def test_site_state_follows_the_schedule() -> None:
    page = PageSpec(
        "/",
        (Link("gone.html"), Link("{site:1}/x")),
        real=ScheduledProcess((10.0, 20.0)),
        cosmetic=ScheduledProcess((15.0,)),
    )
    gone = PageSpec("/gone.html", deleted_at_seconds=12.0)
    site = SiteSpec("t", (page, gone))

    def state(t: float) -> tuple[int, int, float, str]:
        s = site.state_at("/", t, origin="http://h", other_origin=lambda k: f"http://o{k}")
        assert s is not None
        return s.version, s.cosmetic_version, s.last_modified_seconds, s.html

    assert state(5.0)[:3] == (0, 0, 0.0)
    assert 'href="gone.html"' in state(5.0)[3] and 'href="http://o1/x"' in state(5.0)[3]
    assert state(11.0)[:3] == (1, 0, 10.0)
    assert state(12.0)[:3] == (2, 0, 12.0)  # the link to the deleted page disappears
    assert 'href="gone.html"' not in state(12.0)[3]
    assert state(16.0)[:3] == (2, 1, 12.0)
    assert state(25.0)[:3] == (3, 1, 20.0)
    assert site.state_at("/gone.html", 12.0, origin="", other_origin=str) is None
    truth = {p["path"]: p for p in site.truth(25.0, time_origin=1000.0)}
    assert truth["/"]["real_change_times"] == [1010.0, 1012.0, 1020.0]
    assert truth["/"]["cosmetic_change_times"] == [1015.0]
    assert truth["/gone.html"]["deleted_at"] == 1012.0


def test_poisson_and_demo_sites_mix_rates() -> None:
    site = poisson_site("p", 50, seed=2, mean_change_seconds=30.0, periodic_fraction=0.2)
    kinds = [page.real.describe()["kind"] for page in site.pages]
    assert {"poisson", "periodic"} <= set(kinds)
    assert len(bfs_window(site.graph_at(0.0), "/", 100)) == 50
    sites = demo_sites(n_sites=3, pages_per_site=20, seed=0, mean_change_seconds=30.0)
    assert [s.name for s in sites] == ["site-0", "site-1", "site-2"]
    changed_within_a_minute = sum(
        site.version_at(page, 60.0) > 0 for site in sites for page in site.pages
    )
    assert changed_within_a_minute >= 30  # most of the 60 pages show a change in a minute
