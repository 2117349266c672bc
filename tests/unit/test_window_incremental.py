"""Incremental page windows equal the full BFS recompute, over random graphs and edits.

The full ``bfs_window`` (crawler.core.window) is the reference. A site is a dict graph with
gone pages and pages of another site (excluded, never written); its stored rows start as the
full recompute leaves them, then every random edit (a page's out-links replaced, a page gone,
a gone page back) goes through ``window_update`` answered from the dicts, and the stored rows
must equal a full recompute of the edited site after each one.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass, field

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from crawler.core.window import bfs_window, window_changes
from crawler.core.window_incremental import Facts, Need, Row, Update, window_update


@dataclass
class Site:
    """A site held in dicts, answering ``Need``s like crawler.db.windows does from tables."""

    pages: int  # ids 0..pages-1 are the site's; higher ids belong to another site
    links: dict[int, list[int]]
    gone: set[int]
    size: int
    root: int = 0
    depth: dict[int, int | None] = field(default_factory=dict)
    inside: dict[int, bool] = field(default_factory=dict)
    asked_rows: int = 0
    asked_links: int = 0  # pages whose out- or in-links were asked for
    changed: int = 0  # rows the last update wrote
    join_rows: bool = False  # answer links with the rows at their other end, as the database
    into: dict[int, set[int]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        for u, targets in self.links.items():
            for t in targets:
                self.into.setdefault(t, set()).add(u)

    def ours(self, page: int) -> bool:
        return 0 <= page < self.pages

    def full(self) -> dict[int, tuple[int | None, bool]]:
        """The reference: the full recompute's depth and membership of every page."""
        excluded = self.gone | {t for ts in self.links.values() for t in ts if not self.ours(t)}
        graph = {k: v for k, v in self.links.items() if self.ours(k)}
        members, depths = bfs_window(graph, self.root, self.size, excluded)
        inside = set(members)
        return {p: (depths.get(p), p in inside) for p in range(self.pages)}

    def store_full(self) -> None:
        for p, (d, i) in self.full().items():
            self.depth[p], self.inside[p] = d, i

    def answer(self, need: Need) -> Facts:
        self.asked_rows += len(need.rows)
        self.asked_links += len(need.out_links) + len(need.in_links)
        facts = Facts()
        for p in need.rows:
            if self.ours(p):
                facts.rows[p] = Row(self.depth[p], self.inside[p], p in self.gone)
        for p in need.out_links:
            facts.out_links[p] = list(self.links.get(p, ()))
        for p in need.in_links:
            facts.in_links[p] = sorted(self.into.get(p, ()))
        if self.join_rows:
            ends = {t for p in need.out_links for t in facts.out_links[p]}
            ends |= {u for p in need.in_links for u in facts.in_links[p]}
            for e in ends:
                facts.rows[e] = (Row(self.depth[e], self.inside[e], e in self.gone)
                                 if self.ours(e) else None)
        if need.summary:
            members = [p for p in range(self.pages) if self.inside[p]]
            facts.window_count = len(members)
            facts.window_depth = max((self.depth[p] or 0 for p in members), default=None)
        if need.members:
            facts.members = {p: self.depth[p] for p in range(self.pages) if self.inside[p]}
        return facts

    def run(self, update: Update) -> None:
        try:
            need = next(update)
            while True:
                need = update.send(self.answer(need))
        except StopIteration as stop:
            self.changed = len(stop.value)
            for change in stop.value:
                assert self.ours(change.url_id)
                self.depth[change.url_id] = change.depth
                self.inside[change.url_id] = change.in_window

    def edit(self, page: int, links: Sequence[int] | None, gone: bool) -> None:
        """Replace ``page``'s links (None: keep them) and gone state, then update the window."""
        was_gone = page in self.gone
        old = list(self.links.get(page, ()))
        new = [] if gone else (old if links is None else list(dict.fromkeys(links)))
        self.links[page] = new
        for t in old:
            self.into[t].discard(page)
        for t in new:
            self.into.setdefault(t, set()).add(page)
        (self.gone.add if gone else self.gone.discard)(page)
        self.run(window_update(self.root, self.size, page, old, new, page_was_gone=was_gone))

    def stored(self) -> dict[int, tuple[int | None, bool]]:
        return {p: (self.depth[p], self.inside[p]) for p in range(self.pages)}


def random_site(rng: random.Random, pages: int, foreign: int, size: int, degree: int) -> Site:
    ids = range(pages + foreign)
    links = {p: rng.sample(ids, rng.randint(0, min(degree, len(ids)))) for p in ids}
    gone = {p for p in range(1, pages) if rng.random() < 0.1}
    for p in gone:
        links[p] = []
    site = Site(pages, links, gone, size)
    site.store_full()
    return site


def random_edit(rng: random.Random, site: Site, degree: int) -> None:
    page = rng.randrange(site.pages)
    roll = rng.random()
    ids = range(site.pages + 3)  # ids past the site's are another site's pages
    degree = min(degree, len(ids))
    if roll < 0.1:
        site.edit(page, None, gone=True)
    elif roll < 0.2 and page in site.gone:
        site.edit(page, rng.sample(ids, rng.randint(0, degree)), gone=False)
    elif page not in site.gone:
        old = site.links.get(page, [])
        kind = rng.random()
        if kind < 0.3 and old:  # drop one link
            new = [t for t in old if t != rng.choice(old)]
        elif kind < 0.6:  # add one link somewhere
            new = list(old)
            new.insert(rng.randint(0, len(new)), rng.choice(ids))
        elif kind < 0.75:  # reorder
            new = rng.sample(old, len(old))
        else:
            new = rng.sample(ids, rng.randint(0, degree))
        site.edit(page, new, gone=False)


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    pages=st.integers(1, 30),
    foreign=st.integers(0, 3),
    size=st.integers(1, 35),
    degree=st.integers(0, 5),
    edits=st.integers(1, 25),
    join_rows=st.booleans(),
)
def test_incremental_equals_full_recompute(seed: int, pages: int, foreign: int, size: int,
                                           degree: int, edits: int, join_rows: bool) -> None:
    rng = random.Random(seed)
    site = random_site(rng, pages, foreign, size, degree)
    site.join_rows = join_rows
    for _ in range(edits):
        random_edit(rng, site, degree)
        assert site.stored() == site.full()


def test_chain_cut_near_root_moves_every_depth_below() -> None:
    site = Site(5, {0: [1], 1: [2], 2: [3], 3: [4], 4: []}, set(), size=3)
    site.store_full()
    site.edit(0, [2], gone=False)  # 1 unreachable, the rest one level up
    assert site.stored() == {0: (0, True), 1: (None, False), 2: (1, True), 3: (2, True),
                             4: (3, False)}
    site.edit(2, [], gone=True)  # everything below 2 leaves
    assert site.stored() == {0: (0, True), 1: (None, False), 2: (None, False),
                             3: (None, False), 4: (None, False)}


def test_full_window_takes_in_a_shallower_page_and_drops_its_last() -> None:
    # 0 → 1 → 2 → 3 with a window of 3; the root now links 4 first: 4 enters, 2 leaves.
    site = Site(5, {0: [1], 1: [2], 2: [3]}, set(), size=3)
    site.store_full()
    site.edit(0, [4, 1], gone=False)
    assert site.stored() == {0: (0, True), 1: (1, True), 2: (2, False), 3: (3, False),
                             4: (1, True)}
    # Reordering the root's links changes nothing at depth 1 (both inside).
    site.edit(0, [1, 4], gone=False)
    assert site.stored() == site.full()


def test_link_order_decides_the_last_level() -> None:
    site = Site(4, {0: [1, 2, 3]}, set(), size=3)
    site.store_full()
    assert [p for p in range(4) if site.inside[p]] == [0, 1, 2]
    site.edit(0, [3, 1, 2], gone=False)
    assert [p for p in range(4) if site.inside[p]] == [0, 1, 3]


def test_edit_below_a_full_window_reads_no_window() -> None:
    """An edit past the window's last level moves depths only: no BFS over the window."""
    n = 200
    links = {p: [2 * p + 1, 2 * p + 2] for p in range(n) if 2 * p + 2 < n}
    site = Site(n, links, set(), size=7)  # depths 0-2
    site.store_full()
    site.asked_rows = 0
    site.edit(50, [101], gone=False)  # drops 102, a leaf
    assert site.stored() == site.full()
    assert site.asked_rows <= 4


def test_updates_on_a_large_site_read_about_the_window_not_the_site() -> None:
    """An update reads in proportion to the window and the rows it moves, never the site.

    Cutting a tree link near the root moves the depth of the whole subtree below it: those
    rows must be read and written. Anything else is bounded by the window.
    """
    rng = random.Random(7)
    n, size = 20_000, 60
    links = {p: [c for c in range(5 * p + 1, 5 * p + 6) if c < n] + rng.sample(range(n), 3)
             for p in range(n)}
    site = Site(n, links, set(), size)
    site.store_full()
    reads = []
    for _ in range(40):
        site.asked_rows = site.asked_links = 0
        page = rng.choice([p for p in range(n) if site.inside[p]])
        old = site.links[page]
        site.edit(page, rng.sample(old, len(old)) if rng.random() < 0.5
                  else [*old[1:], rng.randrange(n)], gone=False)
        reads.append((site.asked_rows + site.asked_links, site.changed))
    assert site.stored() == site.full()
    assert all(read <= 30 * (size + changed) for read, changed in reads), reads
    assert any(changed > 0 for _, changed in reads)
    assert sorted(read for read, changed in reads if changed < size)[-1] < n // 20


def test_gone_root_empties_the_window_and_its_return_refills_it() -> None:
    site = Site(3, {0: [1], 1: [2]}, set(), size=2)
    site.store_full()
    site.edit(0, None, gone=True)
    assert site.stored() == {0: (None, False), 1: (None, False), 2: (None, False)}
    site.edit(0, [1, 2], gone=False)
    assert site.stored() == site.full() == {0: (0, True), 1: (1, True), 2: (1, False)}


def test_window_size_must_be_positive() -> None:
    with pytest.raises(ValueError):
        next(window_update(0, 0, 0, [], [], page_was_gone=False))


def test_window_changes_still_matches_full() -> None:
    # The full recompute's own diff stays the reference the incremental one is checked by.
    current = {0: (0, True), 1: (1, False)}
    assert [c.url_id for c in window_changes(current, [0, 1], {0: 0, 1: 1})] == [1]
