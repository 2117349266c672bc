"""The BFS page window (docs/MODEL.md section 7) against the demo's ground-truth implementation."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from crawler.core.window import bfs_window, window_changes
from crawler.demo.sites import bfs_window as truth_window


def test_tie_breaking_follows_link_order() -> None:
    graph = {0: [2, 1], 1: [3], 2: [4, 3], 3: [], 4: []}
    members, depths = bfs_window(graph, 0, 4)
    assert members == [0, 2, 1, 4]
    assert depths == {0: 0, 2: 1, 1: 1, 4: 2, 3: 2}


def test_excluded_pages_are_not_passed_through() -> None:
    graph = {0: [1], 1: [2], 2: []}
    members, depths = bfs_window(graph, 0, 10, excluded={1})
    assert members == [0] and 2 not in depths


def test_changes_report_entries_exits_and_depth_moves() -> None:
    current = {0: (0, True), 1: (1, True), 2: (2, False), 3: (None, False)}
    changes = window_changes(current, members=[0, 2, 3], depths={0: 0, 2: 1, 3: 2, 1: 3})
    assert {(c.url_id, c.depth, c.in_window) for c in changes} == {
        (1, 3, False), (2, 1, True), (3, 2, True)}


@given(
    st.dictionaries(
        st.integers(0, 30), st.lists(st.integers(0, 30), max_size=6), min_size=1, max_size=31
    ),
    st.integers(1, 40),
)
def test_same_window_as_ground_truth(graph: dict[int, list[int]], size: int) -> None:
    root = next(iter(graph))
    # The demo's graph only lists existing pages; give every target a node of its own.
    closed = {k: list(v) for k, v in graph.items()}
    for targets in graph.values():
        for t in targets:
            closed.setdefault(t, [])
    as_paths = {f"/{k}": [f"/{t}" for t in v] for k, v in closed.items()}
    expected = [int(p[1:]) for p in truth_window(as_paths, f"/{root}", size)]
    assert bfs_window(closed, root, size)[0] == expected


def test_lifespans_by_both_methods() -> None:
    from crawler.core.window import lifespan_histogram, visible_lifespan

    day = 86400.0
    # Born and died during observation: both methods agree.
    inside = visible_lifespan(10 * day, 15 * day, 100 * day, existed_before=False)
    assert (inside.method1_days, inside.method2_days, inside.censored) == (5.0, 5.0, False)
    # Existed before observation began: method 2 doubles the observed span.
    early = visible_lifespan(0.0, 20 * day, 100 * day, existed_before=True)
    assert (early.method1_days, early.method2_days, early.censored) == (20.0, 40.0, True)
    # Still alive at the end: censored too.
    alive = visible_lifespan(40 * day, None, 100 * day, existed_before=False)
    assert (alive.method1_days, alive.method2_days) == (60.0, 120.0)
    histogram = lifespan_histogram([inside.method1_days, early.method1_days, alive.method1_days,
                                    200.0])
    assert histogram == {"<=1w": 0.25, "1w-1m": 0.25, "1m-4m": 0.25, ">4m": 0.25}
