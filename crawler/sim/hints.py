"""Change hints in the simulator: sources that announce (or claim to announce) page changes.

docs/MODEL.md section 9, docs/SIMULATOR.md. A source covers a share of each site's pages (a
site's sitemap lists some of its pages, not all) and, for each page it covers, announces
changes: an announcement arrives at some instant with the date of the change it claims. Modes:

- ``accurate``: each true change is announced ``delay`` after it, dated when it happened;
  a share ``miss`` of the changes is never announced, and false announcements (a date that
  moves without a change the fingerprint would see) come as a Poisson process at ``fp`` times
  the page's change rate, dated when they claim the change was;
- ``lying-now``: ``lastmod`` is the moment of reading on every read: the first read after each
  fetch (``delay`` later) says the page changed then;
- ``random``: dates that move as often as the page changes, at random instants unrelated to
  its changes (the hardest lie to see: neither always "now" nor implausible in rate).

The sitemap's ``changefreq`` is what Nutch turns into a fetch interval: an accurate source
declares the bucket nearest (in log scale) the page's true mean change interval; the lying
modes declare ``daily``, the value content systems write by default.

Sites are blocks of ``SITE_PAGES`` pages after a random permutation. Announcements of the
``accurate`` and ``random`` modes are drawn up front (``HintWorld.events``), from their own
random stream, so every policy sees the same ones; ``lying-now`` announcements depend on when
the crawler fetched, and ``HintWorld.after_fetch`` makes them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from crawler.sim.populations import MINUTE_DAYS, Population, poisson_times

HintMode = Literal["accurate", "lying-now", "random"]
HINT_MODES: tuple[HintMode, ...] = ("accurate", "lying-now", "random")
DEFAULT_DELAY_DAYS = 5.0 * MINUTE_DAYS
SITE_PAGES = 100

# sitemaps.org changefreq values with the intervals Nutch's SitemapProcessor gives them
# ("always" is one second there; "never" is the longest interval).
CHANGEFREQ_DAYS: dict[str, float] = {
    "always": 1.0 / 86400.0,
    "hourly": 1.0 / 24.0,
    "daily": 1.0,
    "weekly": 7.0,
    "monthly": 30.0,
    "yearly": 365.0,
}
LYING_CHANGEFREQ = "daily"


@dataclass(frozen=True, slots=True)
class HintSpec:
    """One hint source: its mode, the share of each site's pages it covers, the delay of its
    announcements (days), its false announcements per true change and its missed share."""

    mode: HintMode
    share: float
    delay_days: float = DEFAULT_DELAY_DAYS
    false_positive_rate: float = 0.0
    miss_rate: float = 0.0

    def __post_init__(self) -> None:
        if self.mode not in HINT_MODES:
            raise ValueError(f"hint mode must be one of {', '.join(HINT_MODES)}")
        if not 0.0 <= self.share <= 1.0 or not 0.0 <= self.miss_rate <= 1.0:
            raise ValueError("share and miss rate must be in [0, 1]")
        if self.delay_days < 0.0 or self.false_positive_rate < 0.0:
            raise ValueError("delay and false-positive rate must be 0 or more")

    @property
    def label(self) -> str:
        return f"{self.mode}:{self.share:g}"


def parse_hint_spec(text: str) -> HintSpec:
    """``MODE:SHARE[,delay=SECONDS][,fp=RATE][,miss=SHARE]``, e.g. ``accurate:0.3`` or
    ``accurate:1,delay=600,fp=0.2,miss=0.3``. Raises ValueError with a readable message."""
    head, *options = text.split(",")
    mode, separator, share = head.partition(":")
    if not separator:
        raise ValueError(f"{text!r}: expected MODE:SHARE, e.g. accurate:0.3")
    if mode not in HINT_MODES:
        raise ValueError(f"{text!r}: mode must be one of {', '.join(HINT_MODES)}")
    values = {"delay": DEFAULT_DELAY_DAYS * 86400.0, "fp": 0.0, "miss": 0.0}
    for option in options:
        key, equals, value = option.partition("=")
        if not equals or key not in values:
            raise ValueError(f"{text!r}: options are delay=SECONDS, fp=RATE, miss=SHARE")
        values[key] = _finite(value, text)
    return HintSpec(
        mode,
        _finite(share, text),
        delay_days=values["delay"] / 86400.0,
        false_positive_rate=values["fp"],
        miss_rate=values["miss"],
    )


def _finite(value: str, text: str) -> float:
    try:
        number = float(value)
    except ValueError:
        raise ValueError(f"{text!r}: {value!r} is not a number") from None
    if not math.isfinite(number):
        raise ValueError(f"{text!r}: {value!r} is not finite")
    return number


def changefreq_for(change_rate_per_day: float) -> str:
    """The changefreq bucket nearest the mean change interval 1/λ, in log scale."""
    if change_rate_per_day <= 0.0:
        return "yearly"
    interval = 1.0 / change_rate_per_day
    return min(
        (name for name in CHANGEFREQ_DAYS if name != "always"),
        key=lambda name: abs(math.log(CHANGEFREQ_DAYS[name] / interval)),
    )


@dataclass(frozen=True, slots=True)
class Announcement:
    at_days: float
    page: int
    claimed_days: float


@dataclass(frozen=True, slots=True)
class HintWorld:
    """Which pages have which source, on which site, and what their sources announce.

    ``source_of_page[i]`` indexes ``specs`` (−1: no source); ``events`` are the announcements
    drawn up front, sorted by arrival.
    """

    specs: tuple[HintSpec, ...]
    site_of_page: tuple[int, ...]
    source_of_page: tuple[int, ...]
    changefreq_of_page: tuple[str | None, ...]
    events: tuple[Announcement, ...]
    days: float
    seed: int = 0

    @property
    def pages(self) -> int:
        return len(self.site_of_page)

    def covered(self, page: int) -> bool:
        return self.source_of_page[page] >= 0

    def after_fetch(self, page: int, now_days: float) -> Announcement | None:
        """The announcement a fetch provokes: a ``lying-now`` source's next read, which dates a
        change at the moment of reading."""
        source = self.source_of_page[page]
        if source < 0 or self.specs[source].mode != "lying-now":
            return None
        at = now_days + self.specs[source].delay_days
        return Announcement(at, page, at) if at <= self.days else None


NO_HINTS = HintWorld((), (), (), (), (), 0.0)


def build_hint_world(
    population: Population, specs: Sequence[HintSpec], days: float, seed: int
) -> HintWorld:
    """Sites, coverage and the announcements of ``specs`` over [0, days], from the stream
    [seed, 3] (the population and the policies use others)."""
    rng = np.random.default_rng([seed, 3])
    pages = population.pages
    site_of_page = (rng.permutation(pages) // SITE_PAGES).tolist()
    source_of_page = [-1] * pages
    shares = np.cumsum([spec.share for spec in specs])
    if shares.size and shares[-1] > 1.0 + 1e-9:
        raise ValueError("the sources' shares add up to more than every page")
    draws = rng.random(pages)
    for page, draw in enumerate(draws.tolist()):
        for index, bound in enumerate(shares.tolist()):
            if draw < bound:
                source_of_page[page] = index
                break
    rates = population.change_rates_per_day
    changefreq: list[str | None] = []
    events: list[Announcement] = []
    for page in range(pages):
        source = source_of_page[page]
        if source < 0:
            changefreq.append(None)
            continue
        spec = specs[source]
        rate = float(rates[page])
        if spec.mode == "accurate":
            changefreq.append(changefreq_for(rate))
            changes = population.change_times_days[
                population.offsets[page] : population.offsets[page + 1]
            ]
            kept = changes[rng.random(changes.size) >= spec.miss_rate]
            false = poisson_times(rng, spec.false_positive_rate * rate, days)
            claimed = np.concatenate([kept, false])
        elif spec.mode == "random":
            changefreq.append(LYING_CHANGEFREQ)
            claimed = poisson_times(rng, rate, days)
        else:
            changefreq.append(LYING_CHANGEFREQ)
            continue
        arrivals = claimed + spec.delay_days
        for at, date in zip(arrivals.tolist(), claimed.tolist(), strict=True):
            if at <= days:
                events.append(Announcement(at, page, date))
    events.sort(key=lambda event: (event.at_days, event.page))
    return HintWorld(
        tuple(specs), tuple(site_of_page), tuple(source_of_page), tuple(changefreq),
        tuple(events), days, seed,
    )
