"""The page window of a site: the first N pages reachable breadth first from its root.

Cho & Garcia-Molina's monitoring technique (docs/MODEL.md section 7). Pure: the daemon calls it
with the link graph it last observed, after each fetch of one of the site's pages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

Node = TypeVar("Node", bound=Hashable)


def bfs_window(
    out_links: Mapping[Node, Sequence[Node]],
    root: Node,
    size: int,
    excluded: Container[Node] = frozenset(),
) -> tuple[list[Node], dict[Node, int]]:
    """BFS from ``root``: the first ``size`` pages visited, and every reached page's depth
    (beyond the window too). Out-links are visited in page order, which breaks ties.
    ``excluded`` pages (gone: 404/410) are neither members nor passed through."""
    if size <= 0 or root in excluded:
        return [], {}
    depths = {root: 0}
    order = [root]
    queue = deque([root])
    while queue:
        page = queue.popleft()
        for target in out_links.get(page, ()):
            if target in depths or target in excluded:
                continue
            depths[target] = depths[page] + 1
            order.append(target)
            queue.append(target)
    return order[:size], depths


@dataclass(frozen=True, slots=True)
class Membership:
    url_id: int
    depth: int | None
    in_window: bool


def window_changes(
    current: Mapping[int, tuple[int | None, bool]],
    members: Sequence[int],
    depths: Mapping[int, int],
) -> list[Membership]:
    """The rows whose depth or membership differ from ``current`` (url_id → (depth, in))."""
    inside = set(members)
    changes = []
    for url_id, (old_depth, was_in) in current.items():
        depth = depths.get(url_id)
        now_in = url_id in inside
        if depth != old_depth or now_in != was_in:
            changes.append(Membership(url_id, depth, now_in))
    return changes


# Cho & Garcia-Molina's lifespan classes (Fig. 4): up to a week, a month, four months, longer.
LIFESPAN_BUCKETS_DAYS: tuple[tuple[str, float], ...] = (
    ("<=1w", 7.0), ("1w-1m", 30.0), ("1m-4m", 120.0), (">4m", float("inf")),
)


@dataclass(frozen=True, slots=True)
class Lifespan:
    """A page's visible lifespan in the window, by both of the paper's methods: method 1 takes
    the observed span; method 2 doubles it for a page whose lifespan began before observation
    started or had not ended when it stopped (censored: anywhere from the span to infinity)."""

    method1_days: float
    method2_days: float
    censored: bool


def visible_lifespan(
    entered_at: float, left_at: float | None, observed_until: float, *, existed_before: bool
) -> Lifespan:
    """The visible lifespan of a page from its window entry and exit (POSIX seconds)."""
    end = observed_until if left_at is None else left_at
    days = max(0.0, end - entered_at) / 86400.0
    censored = existed_before or left_at is None
    return Lifespan(days, 2.0 * days if censored else days, censored)


def lifespan_histogram(lifespans_days: Sequence[float]) -> dict[str, float]:
    """Fraction of pages in each of the paper's lifespan classes."""
    counts = dict.fromkeys((name for name, _ in LIFESPAN_BUCKETS_DAYS), 0)
    for days in lifespans_days:
        for name, limit in LIFESPAN_BUCKETS_DAYS:
            if days <= limit:
                counts[name] += 1
                break
    total = max(len(lifespans_days), 1)
    return {name: n / total for name, n in counts.items()}
