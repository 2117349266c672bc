"""Incremental page windows: one page's new out-links → the rows whose depth or membership move.

A site's window is the first N pages breadth first from its root (``crawler.core.window``).
Recomputing it after every fetch reads the site's whole link graph; here a fetch updates it
from the edges it changed, reading only the rows and links those edges reach.

Sans-I/O: ``window_update`` is a generator. It yields a ``Need`` (the rows and links it wants
next) and is sent back the ``Facts`` that answer it; it returns the changed rows. The database
driver (``crawler.db.windows``) answers from indexed lookups, a test from a dict.

Depths (dynamic BFS, after Ramalingam and Reps):

1. Pages whose depth may grow are those that lost a shortest-path parent: the targets of a
   removed link one level below the page, and the page itself when it became gone. Level by
   level, a candidate that still has a parent one level up outside the lost set keeps its
   depth; otherwise it is lost, and its children one level below it become candidates.
2. Lost pages get the best depth their remaining parents give, added links give their targets
   the page's depth + 1, and decreases propagate level by level (a bucket-queue Dijkstra).

Membership: the window is the first N pages in BFS order, so an edit can only move it when it
touches the levels the window covers. From the stored window's size and deepest level:

- an edit and depth moves all below that level leave it as it was;
- a window not full takes in exactly the pages now reachable while they fit;
- otherwise a BFS from the root truncated at N pages decides it: bounded by the window, not
  the site (the window's own links, never the site's whole graph).

Pages of another site (a link may reach a URL another window discovered first) and gone pages
are excluded: neither members nor passed through, exactly as the full recompute treats them.
"""

from __future__ import annotations

import heapq
from collections.abc import Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from crawler.core.window import Membership


@dataclass(frozen=True, slots=True)
class Row:
    """A page of the site as stored: depth and membership before this update, gone now."""

    depth: int | None
    in_window: bool
    gone: bool


@dataclass(frozen=True, slots=True)
class Need:
    """What the update reads next; every field answered in the ``Facts`` sent back."""

    rows: frozenset[int] = frozenset()  # those pages' rows (absent: not a page of the site)
    out_links: frozenset[int] = frozenset()  # their out-links now, in page order
    in_links: frozenset[int] = frozenset()  # the pages linking to them now (any site)
    summary: bool = False  # the stored window's size and deepest level
    members: bool = False  # the stored window's pages and their stored depths


@dataclass(slots=True)
class Facts:
    """An answer to a ``Need``. ``rows`` may hold more than was asked: a driver reading links
    can join the rows at their ends (None: not a page of the site) and save a round trip."""

    rows: dict[int, Row | None] = field(default_factory=dict)
    out_links: dict[int, Sequence[int]] = field(default_factory=dict)
    in_links: dict[int, Sequence[int]] = field(default_factory=dict)
    window_count: int = 0
    window_depth: int | None = None
    members: Mapping[int, int | None] = field(default_factory=dict)


Update = Generator[Need, Facts, list[Membership]]


class _Known:
    """Everything read so far; ``_ask`` asks for a thing once."""

    def __init__(self) -> None:
        self.rows: dict[int, Row | None] = {}
        self.out: dict[int, Sequence[int]] = {}
        self.into: dict[int, Sequence[int]] = {}

    def learn(self, need: Need, facts: Facts) -> None:
        for page, row in facts.rows.items():
            self.rows.setdefault(page, row)  # the first reading stands
        for page in need.rows:
            self.rows.setdefault(page, None)
        for page in need.out_links:
            self.out[page] = facts.out_links.get(page, ())
        for page in need.in_links:
            self.into[page] = facts.in_links.get(page, ())

    def excluded(self, page: int) -> bool:
        row = self.rows[page]
        return row is None or row.gone

    def depth(self, page: int) -> int | None:
        """The stored (old) depth; None for an excluded-before or foreign page."""
        row = self.rows[page]
        return None if row is None else row.depth


def _ask(known: _Known, rows: Iterable[int] = (), out_links: Iterable[int] = (),
         in_links: Iterable[int] = ()) -> Generator[Need, Facts, None]:
    need = Need(
        rows=frozenset(r for r in rows if r not in known.rows),
        out_links=frozenset(o for o in out_links if o not in known.out),
        in_links=frozenset(i for i in in_links if i not in known.into),
    )
    if need.rows or need.out_links or need.in_links:
        known.learn(need, (yield need))


def window_update(
    root: int,
    size: int,
    page: int,
    old_links: Sequence[int],
    new_links: Sequence[int],
    *,
    page_was_gone: bool,
) -> Update:
    """The rows to change after ``page``'s out-links went from ``old_links`` to ``new_links``.

    The facts answered are the site as it is now (links, gone states) with the depths and
    memberships stored before this update, which must be a BFS window of the site as it was
    (what this function and the full recompute leave behind). ``page_was_gone``: the page was
    gone before this fetch (its gone state now comes with its row).
    """
    if size <= 0:
        raise ValueError("a window holds at least one page")
    known = _Known()
    yield from _ask(known, rows=[root, page, *old_links, *new_links])
    known.out[page] = tuple(new_links)  # the page's links now: no need to read them back

    page_gone = known.excluded(page)
    lost_edges = set(old_links) if page_gone and not page_was_gone else (
        set(old_links) - set(new_links))
    added = [] if page_gone else [t for t in new_links
                                  if page_was_gone or t not in set(old_links)]

    # 1. Pages that lost every shortest-path parent.
    lost: set[int] = set()
    candidates: list[tuple[int, int]] = []
    queued: set[int] = set()

    def candidate(node: int) -> None:
        d = known.depth(node)
        if d is not None and node not in queued:
            queued.add(node)
            heapq.heappush(candidates, (d, node))

    page_depth = known.depth(page)
    if page_depth is not None:
        if page_gone:
            candidate(page)
        for t in lost_edges:
            if known.depth(t) == page_depth + 1:
                candidate(t)
    while candidates:
        level_depth = candidates[0][0]
        level = []
        while candidates and candidates[0][0] == level_depth:
            level.append(heapq.heappop(candidates)[1])
        yield from _ask(known, in_links=level)
        yield from _ask(known, rows=[u for v in level for u in known.into[v]])
        for v in level:
            if v == root and not known.excluded(v):
                continue
            if known.excluded(v) or not any(
                u not in lost and not known.excluded(u) and known.depth(u) == level_depth - 1
                for u in known.into[v]
            ):
                lost.add(v)
        expand = [v for v in level if v in lost and not known.excluded(v)]
        yield from _ask(known, out_links=expand)
        yield from _ask(known, rows=[w for v in expand for w in known.out[v]])
        for v in expand:
            for w in known.out[v]:
                if known.depth(w) == level_depth + 1:
                    candidate(w)

    # 2. New depths: lost pages from their remaining parents, added links, then decreases.
    new_depth: dict[int, int | None] = dict.fromkeys(lost)
    frontier: list[tuple[int, int]] = []

    def current(node: int) -> int | None:
        return new_depth[node] if node in new_depth else known.depth(node)

    def offer(node: int, depth: int) -> None:
        if known.excluded(node):
            return
        now = current(node)
        if now is None or depth < now:
            new_depth[node] = depth
            heapq.heappush(frontier, (depth, node))

    def offer_below(node: int, parents: Iterable[int]) -> None:
        depths = [known.depth(u) for u in parents if not known.excluded(u)]
        best = min((d for d in depths if d is not None), default=None)
        if best is not None:
            offer(node, best + 1)

    for v in lost:
        if not known.excluded(v):
            offer_below(v, [u for u in known.into[v] if u not in lost])
    if page_was_gone and not page_gone:
        if page == root:
            offer(page, 0)
        else:
            yield from _ask(known, in_links=[page])
            yield from _ask(known, rows=known.into[page])
            offer_below(page, known.into[page])
    elif page not in lost and page_depth is not None:
        for t in added:
            offer(t, page_depth + 1)
    while frontier:
        level_depth = frontier[0][0]
        settled: dict[int, None] = {}  # this level's pages, once each, in order
        while frontier and frontier[0][0] == level_depth:
            _, node = heapq.heappop(frontier)
            if current(node) == level_depth:
                settled[node] = None
        yield from _ask(known, out_links=settled)
        yield from _ask(known, rows=[w for v in settled for w in known.out[v]])
        for v in settled:
            for w in known.out[v]:
                offer(w, level_depth + 1)

    moved = {v: d for v, d in new_depth.items()
             if known.rows[v] is not None and d != known.depth(v)}
    edited = old_links != new_links or page_gone != page_was_gone
    if not moved and not edited:
        return []
    return (yield from _membership(known, root, size, page, moved))


def _membership(known: _Known, root: int, size: int, page: int,
                moved: Mapping[int, int | None]) -> Update:
    """The rows to write: depth moves, and entries and exits of the window (see the module)."""
    summary = yield Need(summary=True)
    count, deepest = summary.window_count, summary.window_depth
    # Levels a moved page left or reached, and the edited page's (its children are one below).
    levels = [d for d in (*moved.values(), *map(known.depth, moved)) if d is not None]
    page_levels = [d for d in (known.depth(page), moved.get(page)) if d is not None]

    def changes(inside: Mapping[int, bool]) -> list[Membership]:
        out = []
        for v in set(moved) | set(inside):
            row = known.rows[v]
            if row is None:
                continue
            depth = moved.get(v, row.depth)
            now_in = inside.get(v, row.in_window)
            if depth != row.depth or now_in != row.in_window:
                out.append(Membership(v, depth, now_in))
        return sorted(out, key=lambda m: m.url_id)

    if (count >= size and deepest is not None and all(d > deepest for d in levels)
            and all(d >= deepest for d in page_levels)):
        return changes({})  # all below the full window's last level
    if count < size:
        gained = [v for v, d in moved.items() if d is not None and known.depth(v) is None]
        dropped = [v for v, d in moved.items() if d is None and known.depth(v) is not None]
        if count + len(gained) - len(dropped) <= size:
            return changes({v: moved[v] is not None for v in gained + dropped})
    # A BFS from the root truncated at ``size`` pages, over the window's own links. A stored
    # member was not gone (only the edited page's state moved, and its row is known), so the
    # members' rows need no reading; the rest are read in growing chunks of the BFS queue.
    old_members = (yield Need(members=True)).members
    for v, d in old_members.items():
        known.rows.setdefault(v, Row(d, True, False))
    yield from _ask(known, rows=[root])
    order: list[int] = [] if known.excluded(root) else [root]
    seen = set(order)
    done, chunk = 0, 32
    while len(order) < size and done < len(order):
        batch = order[done:done + chunk]
        done += len(batch)
        chunk *= 2
        yield from _ask(known, out_links=batch)
        yield from _ask(known, rows=[w for v in batch for w in known.out[v]])
        for w in (w for v in batch for w in known.out[v]):
            if w not in seen and not known.excluded(w):
                seen.add(w)
                order.append(w)
                if len(order) >= size:
                    break
    inside = dict.fromkeys(old_members, False) | dict.fromkeys(order, True)
    return changes(inside)
