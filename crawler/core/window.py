"""The page window of a site: the first N pages reachable breadth first from its root.

Cho & Garcia-Molina's monitoring technique (MODEL.md section 7). Pure: the daemon calls it
with the link graph it last observed, after each fetch of one of the site's pages.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Container, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

Node = TypeVar("Node", bound=Hashable)


@dataclass(frozen=True, slots=True)
class Window:
    """The window's members in BFS order, and the BFS depth of every page reached."""

    members: list[int]
    depths: dict[int, int]


def bfs_window(
    out_links: Mapping[Node, Sequence[Node]],
    root: Node,
    size: int,
    excluded: Container[Node] = frozenset(),
) -> tuple[list[Node], dict[Node, int]]:
    """BFS from ``root``: the first ``size`` pages visited, and every reached page's depth.

    Ties are broken by link order: out-links are visited in the order they appear on the page,
    so among pages at one depth, those linked from an earlier-visited page come first.
    ``excluded`` pages (gone: 404/410) are neither members nor passed through. Depths cover
    the whole reachable graph, so a page pushed beyond the window still has its distance.
    """
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
