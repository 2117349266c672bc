"""The ground-truth web of the live freshness harness: pages on many hosts whose changes are
known, so that the freshness a real daemon achieves can be measured exactly.

Three kinds of page, mixed on every host so that no host's politeness binds the plan:

- ``poisson``: changes arrive as a Poisson process, mean intervals log-uniform between the
  fastest and the slowest (the model the planner and the analytic oracle assume);
- ``periodic``: changes on a clock (a period, a phase, a little late jitter);
- ``outage``: Poisson changes, and spans during which the page answers 404 before it comes
  back.

Pages carry no links: the harness seeds every URL, and a link list that changed with its
targets would add changes no process describes. Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass

from crawler.demo.processes import ChangeProcess, PeriodicProcess, PoissonProcess
from crawler.demo.sites import PageSpec, SitemapSpec, SiteSpec

# The sitemaps of the hint comparison, site k's the (k mod 6)-th: truthful dates on a third
# of the sites, lies on another third (half dates at random, half the moment of reading), no
# dates on the rest.
HINT_SITEMAPS = ("truthful", "random", "absent", "truthful", "now", "absent")


@dataclass(frozen=True, slots=True)
class LivePage:
    """One page of the live web: where it is, its kind, and its mean rate of changes a
    crawler can see (content changes while present, disappearances and returns)."""

    site: int
    path: str
    kind: str
    change_rate_per_second: float
    lastmod: str | None = None  # what its site's sitemap dates it with; None: no sitemap


@dataclass(frozen=True, slots=True)
class LiveWeb:
    sites: tuple[SiteSpec, ...]
    pages: tuple[LivePage, ...]


def _log_uniform(rng: random.Random, low: float, high: float) -> float:
    return math.exp(rng.uniform(math.log(low), math.log(high)))


def _outages(
    rng: random.Random, horizon_seconds: float, up_seconds: float, down_seconds: tuple[float, float]
) -> tuple[tuple[float, float], ...]:
    """Alternating spans up to the horizon: present for an exponential time of mean
    ``up_seconds``, then absent for a uniform time in ``down_seconds``."""
    spans: list[tuple[float, float]] = []
    t = rng.expovariate(1.0 / up_seconds)
    while t < horizon_seconds:
        down = rng.uniform(*down_seconds)
        spans.append((t, t + down))
        t += down + rng.expovariate(1.0 / up_seconds)
    return tuple(spans)


def live_web(
    pages: int,
    hosts: int,
    *,
    horizon_seconds: float,
    seed: int = 0,
    fastest_seconds: float = 10.0,
    slowest_seconds: float = 5000.0,
    periodic_fraction: float = 0.15,
    outage_fraction: float = 0.1,
    outage_up_seconds: float = 240.0,
    outage_down_seconds: tuple[float, float] = (20.0, 90.0),
    sitemaps: tuple[str, ...] = (),
) -> LiveWeb:
    """``pages`` pages dealt round-robin onto ``hosts`` sites. Mean change intervals of
    Poisson and outage pages are log-uniform in [fastest, slowest]; periods of periodic pages
    are log-uniform in the middle of that range (a clock faster than a politeness-bound
    crawler can follow teaches nothing). Outages are drawn up to ``horizon_seconds``. With
    ``sitemaps`` (``SitemapSpec.lastmod`` modes, e.g. ``HINT_SITEMAPS``), site k serves a
    sitemap dated the (k mod len)-th way."""
    if pages < 1 or hosts < 1 or hosts > pages:
        raise ValueError("need 1 <= hosts <= pages")
    if not 0 < fastest_seconds < slowest_seconds:
        raise ValueError("need 0 < fastest_seconds < slowest_seconds")
    if periodic_fraction < 0 or outage_fraction < 0 or periodic_fraction + outage_fraction > 1:
        raise ValueError("fractions must be non-negative and sum to at most 1")
    rng = random.Random(f"live_web:{seed}")
    # Exact shares rather than per-page draws, so a short run still has every kind.
    n_periodic = round(pages * periodic_fraction)
    n_outage = round(pages * outage_fraction)
    kinds = ["periodic"] * n_periodic + ["outage"] * n_outage
    kinds += ["poisson"] * (pages - len(kinds))
    rng.shuffle(kinds)
    mean_outage_cycle = outage_up_seconds + sum(outage_down_seconds) / 2.0
    per_site: list[list[PageSpec]] = [[] for _ in range(hosts)]
    described: list[LivePage] = []
    for index, kind in enumerate(kinds):
        site = index % hosts
        path = f"/p{index}.html"
        real: ChangeProcess
        outages: tuple[tuple[float, float], ...] = ()
        if kind == "periodic":
            middle = math.sqrt(fastest_seconds * slowest_seconds)
            period = _log_uniform(rng, middle / 10.0, middle)
            real = PeriodicProcess(
                period_seconds=period,
                phase_seconds=rng.random() * period,
                jitter_seconds=0.05 * period * rng.random(),
            )
            rate = 1.0 / period
        else:
            rate = 1.0 / _log_uniform(rng, fastest_seconds, slowest_seconds)
            real = PoissonProcess(rate)
            if kind == "outage":
                outages = _outages(rng, horizon_seconds, outage_up_seconds, outage_down_seconds)
                # A disappearance and a return per cycle, besides the content's changes.
                rate += 2.0 / mean_outage_cycle
        per_site[site].append(PageSpec(path, real=real, seed=f"live{index}", outages=outages))
        lastmod = sitemaps[site % len(sitemaps)] if sitemaps else None
        described.append(LivePage(site, path, kind, rate, lastmod))
    sites = tuple(
        SiteSpec(f"live-{k}", tuple(specs),
                 sitemap=SitemapSpec(sitemaps[k % len(sitemaps)]) if sitemaps else None)
        for k, specs in enumerate(per_site)
    )
    return LiveWeb(sites, tuple(described))


# (site, page, until_seconds): the instants in (0, until] at which what a fetch sees changed.
observable_change_times = SiteSpec.visible_change_times
