"""Sites of the demo web: pages, their links and change processes, as pure data.

All times are seconds since the demo web's start. A site's state at time t (which pages
exist, what links they show, which version of their text they serve) is a pure function of
its ``SiteSpec`` and t, so tests can compute the ground truth a crawler should have seen.

Link hrefs are templates: ``{origin}`` stands for this site's origin and ``{site:K}`` for
the origin of the site K places after this one in the web (wrapping around); anything else
is an ordinary (possibly relative) href, resolved against the page's path.

A page's *real* changes are its change process's events plus the instants at which its
rendered link list changes (a link appears or disappears, or its target is created or
deleted): those rewrite the text like any real change, so the ETag, Last-Modified and
the truth all agree on one version count.
"""

from __future__ import annotations

import math
import random
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from urllib.parse import urljoin, urlsplit

from crawler.demo.content import RenderedLink, content_etag, page_title, render_page, sentence_text
from crawler.demo.processes import NEVER, ChangeProcess, PeriodicProcess, PoissonProcess

ALLOW_ALL_ROBOTS = "User-agent: *\nAllow: /\n"
_SELF_HOST = "self.invalid"
_SELF_ORIGIN = f"http://{_SELF_HOST}"


@dataclass(frozen=True)
class Link:
    """An out-link shown on a page while ``since_seconds <= t < until_seconds``."""

    href: str
    since_seconds: float = 0.0
    until_seconds: float = math.inf
    text: str | None = None

    def active_at(self, t_seconds: float) -> bool:
        return self.since_seconds <= t_seconds < self.until_seconds


@dataclass(frozen=True)
class PageSpec:
    """One page: where it lives, what it links to, and when it changes.

    ``cosmetic`` changes bump a build number in the footer; ``cosmetic_per_request`` adds a
    "rendered at" time and a visit counter that differ on every request. ``outages`` are
    sorted, disjoint ``(start, end)`` spans in its lifetime during which the page answers 404
    and then comes back (a page taken down for a while, an article unpublished and restored).
    """

    path: str
    links: tuple[Link, ...] = ()
    real: ChangeProcess = NEVER
    cosmetic: ChangeProcess = NEVER
    cosmetic_per_request: bool = False
    created_at_seconds: float = 0.0
    deleted_at_seconds: float = math.inf
    seed: str = ""
    outages: tuple[tuple[float, float], ...] = ()

    def __post_init__(self) -> None:
        previous_end = -math.inf
        for start, end in self.outages:
            if not previous_end <= start < end:
                raise ValueError(f"page {self.path}: outages must be sorted, disjoint spans")
            previous_end = end

    def exists_at(self, t_seconds: float) -> bool:
        if not self.created_at_seconds <= t_seconds < self.deleted_at_seconds:
            return False
        return not any(start <= t_seconds < end for start, end in self.outages)

    def presence_change_times(self) -> tuple[float, ...]:
        """The instants at which the page appears or disappears (creation, deletion and
        both ends of every outage), finite ones only."""
        bounds = [self.created_at_seconds, self.deleted_at_seconds]
        bounds += [t for span in self.outages for t in span]
        return tuple(sorted(t for t in bounds if math.isfinite(t)))


@dataclass(frozen=True)
class PageState:
    """What the server serves for a page at one instant."""

    html: str
    version: int
    cosmetic_version: int
    etag: str
    last_modified_seconds: float


def resolve_href(page_path: str, href: str) -> str | None:
    """The same-site path an href points to (fragment and query dropped), or None when it
    points to another host or is not an http link (``mailto:``)."""
    if href.startswith("{origin}"):
        absolute = _SELF_ORIGIN + href.removeprefix("{origin}")
    elif href.startswith("{site:"):
        return None
    else:
        absolute = urljoin(_SELF_ORIGIN + page_path, href)
    parts = urlsplit(absolute)
    if parts.scheme != "http" or parts.netloc != _SELF_HOST:
        return None
    return parts.path or "/"


def expand_href(href: str, origin: str, other_origin: Callable[[int], str]) -> str:
    """Replace the ``{origin}`` / ``{site:K}`` template of an href by real origins."""
    if href.startswith("{origin}"):
        return origin + href.removeprefix("{origin}")
    if href.startswith("{site:"):
        offset_text, _, rest = href.removeprefix("{site:").partition("}")
        return other_origin(int(offset_text)) + rest
    return href


LASTMOD_MODES = ("truthful", "random", "now", "absent")


@dataclass(frozen=True)
class SitemapSpec:
    """A sitemap at ``path``, named by a ``Sitemap:`` line of robots.txt, listing every page
    of the site (one in an outage too: a generator lists what the site publishes), with a
    ``<lastmod>`` that is:

    - ``truthful``: the page's last visible change (its text rewritten, its disappearance
      or its return);
    - ``random``: the last event of a Poisson process of the page's own mean change rate,
      independent of its changes: dates as frequent as the changes, never telling when;
    - ``now``: the moment of the read, on every read;
    - ``absent``: no ``<lastmod>``.
    """

    lastmod: str = "truthful"
    path: str = "/sitemap.xml"

    def __post_init__(self) -> None:
        if self.lastmod not in LASTMOD_MODES:
            raise ValueError(f"lastmod must be one of {', '.join(LASTMOD_MODES)}")


def mean_rate_per_second(process: ChangeProcess) -> float:
    """A change process's long-run rate (0 for one that never changes on its own)."""
    if isinstance(process, PoissonProcess):
        return process.rate_per_second
    if isinstance(process, PeriodicProcess):
        return 1.0 / process.period_seconds
    return 0.0


@dataclass(frozen=True)
class SiteSpec:
    """A site: its pages (paths unique), its robots.txt and, optionally, its sitemap."""

    name: str
    pages: tuple[PageSpec, ...]
    root_path: str = "/"
    robots_txt: str = ALLOW_ALL_ROBOTS
    sitemap: SitemapSpec | None = None

    def __post_init__(self) -> None:
        paths = [page.path for page in self.pages]
        if len(set(paths)) != len(paths):
            raise ValueError(f"site {self.name}: duplicate page paths")

    @cached_property
    def _by_path(self) -> dict[str, PageSpec]:
        return {page.path: page for page in self.pages}

    def page(self, path: str) -> PageSpec | None:
        return self._by_path.get(path)

    def page_seed(self, page: PageSpec) -> str:
        return f"{self.name}:{page.seed or page.path}"

    def _target(self, page: PageSpec, link: Link) -> PageSpec | None:
        """The page of this site a link of ``page`` points to, if it is one."""
        target = resolve_href(page.path, link.href)
        return self._by_path.get(target) if target is not None else None

    def exists(self, path: str, t_seconds: float) -> bool:
        page = self._by_path.get(path)
        return page is not None and page.exists_at(t_seconds)

    def rendered_links(self, page: PageSpec, t_seconds: float) -> list[Link]:
        """The links the page shows at t, in document order. A link to a page of this site
        that does not exist at t is hidden; a link to a path that is never a page (a broken
        link) is shown."""
        shown = []
        for link in page.links:
            if not link.active_at(t_seconds):
                continue
            target_page = self._target(page, link)
            if target_page is None or target_page.exists_at(t_seconds):
                shown.append(link)
        return shown

    @cached_property
    def _structure_change_times(self) -> dict[str, tuple[float, ...]]:
        """Per page, the instants in its lifetime at which its rendered link list changes."""
        result: dict[str, tuple[float, ...]] = {}
        for page in self.pages:
            candidates: set[float] = set()
            for link in page.links:
                candidates.update((link.since_seconds, link.until_seconds))
                target_page = self._target(page, link)
                if target_page is not None:
                    candidates.update(target_page.presence_change_times())
            # The link list is constant between candidates: compare it at each candidate.
            previous = tuple(self.rendered_links(page, page.created_at_seconds))
            changes = []
            for t in sorted(candidates):
                if not (max(page.created_at_seconds, 0.0) < t < page.deleted_at_seconds):
                    continue
                current = tuple(self.rendered_links(page, t))
                if current != previous:
                    changes.append(t)
                previous = current
            result[page.path] = tuple(changes)
        return result

    def real_change_times(self, page: PageSpec, until_seconds: float) -> list[float]:
        """Sorted instants in (creation, min(until, deletion)) at which the page's text was
        rewritten: its process's events and its link-list changes."""
        end = min(until_seconds, page.deleted_at_seconds)
        times = {t for t in page.real.event_times(self.page_seed(page), end)
                 if page.created_at_seconds < t and t < page.deleted_at_seconds}
        times.update(t for t in self._structure_change_times[page.path] if t <= end)
        return sorted(times)

    def cosmetic_change_times(self, page: PageSpec, until_seconds: float) -> list[float]:
        end = min(until_seconds, page.deleted_at_seconds)
        return [
            t
            for t in page.cosmetic.event_times(f"cosmetic:{self.page_seed(page)}", end)
            if page.created_at_seconds < t < page.deleted_at_seconds
        ]

    def version_at(self, page: PageSpec, t_seconds: float) -> int:
        """Number of real changes at or before t."""
        return len(self.real_change_times(page, t_seconds))

    def state_at(
        self,
        path: str,
        t_seconds: float,
        *,
        origin: str,
        other_origin: Callable[[int], str],
        per_request_note: str | None = None,
    ) -> PageState | None:
        """The page served at ``path`` at t, or None when there is no such page then."""
        page = self._by_path.get(path)
        if page is None or not page.exists_at(t_seconds):
            return None
        real_times = self.real_change_times(page, t_seconds)
        version = len(real_times)
        cosmetic_version = len(self.cosmetic_change_times(page, t_seconds))
        links = [
            RenderedLink(expand_href(link.href, origin, other_origin), self._link_text(page, link))
            for link in self.rendered_links(page, t_seconds)
        ]
        seed = self.page_seed(page)
        html = render_page(
            page_seed=seed, site_name=self.name, version=version,
            cosmetic_version=cosmetic_version, links=links,
            per_request_note=per_request_note if page.cosmetic_per_request else None,
        )
        return PageState(
            html=html, version=version, cosmetic_version=cosmetic_version,
            etag=content_etag(seed, version, cosmetic_version),
            last_modified_seconds=real_times[-1] if real_times else page.created_at_seconds,
        )

    def visible_change_times(self, page: PageSpec, until_seconds: float) -> list[float]:
        """Sorted instants in (0, until] at which what a fetch of the page would see changed:
        its text rewritten while it is served, and its disappearances and returns (a text
        rewritten while the page was away shows at its return)."""
        content = [t for t in self.real_change_times(page, until_seconds) if page.exists_at(t)]
        presence = [t for t in page.presence_change_times() if 0.0 < t <= until_seconds]
        return sorted(set(content) | set(presence))

    def sitemap_dates(self, t_seconds: float) -> list[tuple[str, float | None]]:
        """What the sitemap lists at t: every page created and not deleted, with the
        ``<lastmod>`` its ``SitemapSpec`` gives (site seconds; None when absent)."""
        if self.sitemap is None:
            return []
        mode = self.sitemap.lastmod
        listed: list[tuple[str, float | None]] = []
        for page in self.pages:
            if not page.created_at_seconds <= t_seconds < page.deleted_at_seconds:
                continue
            claimed: float | None = None
            if mode == "truthful":
                times = self.visible_change_times(page, t_seconds)
                claimed = times[-1] if times else page.created_at_seconds
            elif mode == "random":
                rate = mean_rate_per_second(page.real)
                lies = (PoissonProcess(rate).event_times(f"lastmod:{self.page_seed(page)}",
                                                         t_seconds) if rate > 0 else [])
                claimed = lies[-1] if lies else page.created_at_seconds
            elif mode == "now":
                claimed = t_seconds
            listed.append((page.path, claimed))
        return listed

    def _link_text(self, page: PageSpec, link: Link) -> str:
        if link.text is not None:
            return link.text
        target_page = self._target(page, link)
        if target_page is not None:
            return page_title(self.page_seed(target_page))
        return sentence_text(f"anchor:{link.href}", 3)

    def graph_at(self, t_seconds: float) -> dict[str, list[str]]:
        """The site's link graph at t: for each existing page, the distinct same-site pages
        it links to, in the order their first link appears in the document."""
        graph: dict[str, list[str]] = {}
        for page in self.pages:
            if not page.exists_at(t_seconds):
                continue
            targets: dict[str, None] = {}
            for link in self.rendered_links(page, t_seconds):
                target = resolve_href(page.path, link.href)
                if target is not None and self.exists(target, t_seconds):
                    targets[target] = None
            graph[page.path] = list(targets)
        return graph

    def truth(self, at_seconds: float, time_origin: float = 0.0) -> list[dict[str, object]]:
        """Ground truth of every page created by ``at_seconds``: its processes, and its
        real and cosmetic change times so far. Times are shifted by ``time_origin`` (the
        web passes its start time, so the times are on the server clock)."""
        pages: list[dict[str, object]] = []
        for page in self.pages:
            if page.created_at_seconds > at_seconds:
                continue
            deleted = page.deleted_at_seconds <= at_seconds
            pages.append(
                {
                    "path": page.path,
                    "process": page.real.describe(),
                    "cosmetic_process": page.cosmetic.describe(),
                    "cosmetic_per_request": page.cosmetic_per_request,
                    "real_change_times": [
                        time_origin + t for t in self.real_change_times(page, at_seconds)
                    ],
                    "cosmetic_change_times": [
                        time_origin + t for t in self.cosmetic_change_times(page, at_seconds)
                    ],
                    "created_at": time_origin + page.created_at_seconds,
                    "deleted_at": time_origin + page.deleted_at_seconds if deleted else None,
                    # Outages begun so far; one still running has no end yet (None).
                    "outages": [
                        [time_origin + start, time_origin + end if end <= at_seconds else None]
                        for start, end in page.outages
                        if start <= at_seconds
                    ],
                    "exists": page.exists_at(at_seconds),
                    "version": self.version_at(page, at_seconds) if not deleted else None,
                }
            )
        return pages


def bfs_window(graph: Mapping[str, Sequence[str]], root_path: str, n: int) -> list[str]:
    """The first ``n`` pages reachable breadth first from ``root_path`` (Cho & Garcia-Molina's
    page window, docs/MODEL.md §7).

    Ties are broken by link order: a page's out-links are visited in the order they appear
    in ``graph[page]`` (``SiteSpec.graph_at`` lists them in document order), so among pages
    at the same depth, those linked from an earlier-visited page come first, and among one
    page's links, the earlier link comes first. Targets missing from ``graph`` (pages that do
    not exist) are skipped.
    """
    if n <= 0 or root_path not in graph:
        return []
    window = [root_path]
    seen = {root_path}
    queue = deque([root_path])
    while queue and len(window) < n:
        for target in graph[queue.popleft()]:
            if target in seen or target not in graph:
                continue
            seen.add(target)
            window.append(target)
            queue.append(target)
            if len(window) == n:
                break
    return window


@dataclass(frozen=True)
class _Mix:
    """How a builder assigns processes to pages."""

    mean_change_seconds: float
    spread: float = 1.0
    periodic_fraction: float = 0.0
    static_fraction: float = 0.0
    cosmetic_fraction: float = 0.3
    per_request_fraction: float = 0.2

    def draw(self, rng: random.Random) -> tuple[ChangeProcess, ChangeProcess, bool]:
        # Mean intervals are log-normal around the mean (mu chosen so that E = mean).
        mu = math.log(self.mean_change_seconds) - self.spread**2 / 2
        interval_seconds = rng.lognormvariate(mu, self.spread)
        roll = rng.random()
        real: ChangeProcess
        if roll < self.static_fraction:
            real = NEVER
        elif roll < self.static_fraction + self.periodic_fraction:
            real = PeriodicProcess(
                period_seconds=interval_seconds,
                phase_seconds=rng.random() * interval_seconds,
                jitter_seconds=0.1 * interval_seconds * rng.random(),
            )
        else:
            real = PoissonProcess(1.0 / interval_seconds)
        roll = rng.random()
        # A page gets at most one kind of cosmetic noise.
        if roll < self.cosmetic_fraction:
            return real, PoissonProcess(1.0 / (interval_seconds * rng.uniform(0.2, 1.0))), False
        if roll < self.cosmetic_fraction + self.per_request_fraction:
            return real, NEVER, True
        return real, NEVER, False


def poisson_site(
    name: str,
    n_pages: int = 20,
    *,
    seed: int = 0,
    mean_change_seconds: float = 30.0,
    spread: float = 1.0,
    periodic_fraction: float = 0.0,
    static_fraction: float = 0.0,
    cosmetic_fraction: float = 0.3,
    per_request_fraction: float = 0.2,
    branching: int = 4,
) -> SiteSpec:
    """``n_pages`` pages in a tree under ``/`` (each page links home, to its children and to
    two random pages; the root also links to the next site). Mean change intervals are
    log-normal with the given mean and ``spread`` (sigma of the log); most pages are
    Poisson, ``periodic_fraction`` are periodic and ``static_fraction`` never change."""
    if n_pages < 1:
        raise ValueError("n_pages must be >= 1")
    rng = random.Random(f"poisson_site:{name}:{seed}")
    mix = _Mix(mean_change_seconds, spread, periodic_fraction, static_fraction,
               cosmetic_fraction, per_request_fraction)
    paths = ["/"] + [f"/page-{i}.html" for i in range(1, n_pages)]
    pages = []
    for i, path in enumerate(paths):
        links: list[Link] = [] if i == 0 else [Link("/", text="Home")]
        children = range(i * branching + 1, min(n_pages, (i + 1) * branching + 1))
        links += [Link(paths[child].lstrip("/")) for child in children]
        links += [Link(paths[rng.randrange(n_pages)]) for _ in range(min(2, n_pages - 1))]
        if i == 0:
            links.append(Link("{site:1}/", text="Next site"))
        real, cosmetic, per_request = mix.draw(rng)
        pages.append(PageSpec(path, tuple(links), real, cosmetic, per_request))
    return SiteSpec(name, tuple(pages))


def static_site(name: str = "static", n_pages: int = 300, *, seed: int = 0) -> SiteSpec:
    """A few hundred never-changing pages shaped like a real site, to exercise link
    extraction: sections with articles and archives, relative links, ``..``, ``./``,
    fragments, absolute paths, absolute URLs, links to another host, a ``mailto:`` and a
    few broken links. Every page is reachable from ``/``."""
    rng = random.Random(f"static_site:{name}:{seed}")
    n_sections = max(1, round(math.sqrt(n_pages) / 2))
    fixed = 3 + 2 * n_sections  # root, about, contact, section and archive indexes
    if n_pages < fixed + n_sections:
        raise ValueError(f"n_pages must be >= {fixed + n_sections}")
    articles: list[list[str]] = [[] for _ in range(n_sections)]
    olds: list[list[str]] = [[] for _ in range(n_sections)]
    for k in range(n_pages - fixed):
        section = k % n_sections
        if rng.random() < 0.7 or not olds[section]:
            articles[section].append(f"/section-{section}/article-{len(articles[section])}.html")
        else:
            olds[section].append(f"/section-{section}/archive/old-{len(olds[section])}.html")

    links: dict[str, list[Link]] = {}
    links["/"] = [
        *(Link(f"section-{s}/") for s in range(n_sections)),
        Link("/about.html"),
        Link("{origin}/contact.html"),
        Link("{site:1}/", text="Our partner site"),
        Link("mailto:editor@localhost", text="Write to us"),
    ]
    links["/about.html"] = [Link("./"), Link("contact.html#address"), Link("missing.html")]
    links["/contact.html"] = [Link("/", text="Home"), Link("about.html#team")]
    for s in range(n_sections):
        index = f"/section-{s}/"
        links[index] = [
            Link("../", text="Home"),
            *(Link(a.rsplit("/", 1)[1]) for a in articles[s]),
            Link("archive/"),
        ]
        links[f"{index}archive/"] = [
            Link("../../", text="Home"),
            Link("..", text="Section"),
            *(Link(o.rsplit("/", 1)[1]) for o in olds[s]),
        ]
        for j, path in enumerate(articles[s]):
            other = rng.randrange(n_sections)
            others = articles[other]
            page_links = [Link("../", text="Section"), Link("/", text="Home")]
            if others:
                page_links.append(Link(f"../section-{other}/{others[-1].rsplit('/', 1)[1]}"))
            next_article = articles[s][(j + 1) % len(articles[s])]
            page_links.append(Link(f"./{next_article.rsplit('/', 1)[1]}"))
            page_links.append(Link(f"{path.rsplit('/', 1)[1]}#comments", text="Comments"))
            if rng.random() < 0.1:
                page_links.append(Link(f"{{origin}}/section-{other}/"))
            if rng.random() < 0.03:
                page_links.append(Link("no-such-article.html"))
            if rng.random() < 0.05:
                page_links.append(Link("{site:2}/", text="Elsewhere"))
            links[path] = page_links
        for path in olds[s]:
            links[path] = [Link("../", text="Archive"), Link("../../article-0.html")]
    paths = ["/", "/about.html", "/contact.html"]
    for s in range(n_sections):
        paths += [f"/section-{s}/", *articles[s], f"/section-{s}/archive/", *olds[s]]
    return SiteSpec(name, tuple(PageSpec(p, tuple(links[p])) for p in paths))


def evolving_site(
    name: str = "evolving",
    n_initial: int = 40,
    *,
    n_created: int = 10,
    n_deleted: int = 6,
    n_moved: int = 6,
    horizon_seconds: float = 120.0,
    seed: int = 0,
    mean_change_seconds: float | None = None,
    branching: int = 3,
) -> SiteSpec:
    """A site whose link structure changes on a seeded schedule in (0, horizon): pages are
    created (linked from an existing page), deleted (their links vanish) and moved (the link
    to them leaves one parent and appears, last, on another). Deleted and moved pages are
    leaves, so no move makes another page unreachable. With ``mean_change_seconds`` the
    pages' text also changes by Poisson processes; otherwise only through link changes."""
    rng = random.Random(f"evolving_site:{name}:{seed}")
    parents: dict[int, int] = {}  # initial tree: page i's parent, chosen among earlier pages
    for i in range(1, n_initial):
        parents[i] = rng.randrange((i - 1) // branching, i)
    leaves = [i for i in range(1, n_initial) if i not in parents.values()]
    if n_deleted + n_moved > len(leaves):
        raise ValueError("not enough leaf pages to delete and move")
    rng.shuffle(leaves)
    deleted = set(leaves[:n_deleted])
    moved = set(leaves[n_deleted : n_deleted + n_moved])
    stable = [i for i in range(n_initial) if i not in deleted and i not in moved]

    def when() -> float:
        return rng.uniform(0.05, 1.0) * horizon_seconds

    def path_of(i: int) -> str:
        return "/" if i == 0 else f"/node-{i}.html"

    links: dict[int, list[Link]] = {i: [] for i in range(n_initial + n_created)}
    for i in range(1, n_initial):
        if i not in moved:
            links[parents[i]].append(Link(path_of(i)))
    deleted_at = {i: when() for i in deleted}
    for i in sorted(moved):
        move_at = when()
        new_parent = rng.choice([p for p in stable if p != parents[i]])
        links[parents[i]].append(Link(path_of(i), until_seconds=move_at))
        links[new_parent].append(Link(path_of(i), since_seconds=move_at))
    created_at: dict[int, float] = {}
    for i in range(n_initial, n_initial + n_created):
        created_at[i] = when()
        links[rng.choice(stable)].insert(0, Link(path_of(i)))  # news goes on top
    mix = _Mix(mean_change_seconds or 1.0, cosmetic_fraction=0.0, per_request_fraction=0.0)
    pages = []
    for i in range(n_initial + n_created):
        real = NEVER if mean_change_seconds is None else mix.draw(rng)[0]
        home = [Link("/", text="Home")] if i else []
        pages.append(PageSpec(
            path_of(i), tuple(home + links[i]), real, created_at_seconds=created_at.get(i, 0.0),
            deleted_at_seconds=deleted_at.get(i, math.inf),
        ))
    return SiteSpec(name, tuple(pages))


def demo_sites(
    n_sites: int = 5, pages_per_site: int = 20, seed: int = 0, mean_change_seconds: float = 30.0
) -> list[SiteSpec]:
    """Sites for ``make run``'s demo: log-normal mixes of fast and slow pages (a few periodic,
    a few static) so that changes show within a minute."""
    return [
        poisson_site(f"site-{k}", pages_per_site, seed=seed * 1000 + k,
                     mean_change_seconds=mean_change_seconds, spread=1.2,
                     periodic_fraction=0.2, static_fraction=0.1)
        for k in range(n_sites)
    ]
