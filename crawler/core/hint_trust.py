"""How far a site's change hints can be trusted, learned from the crawler's own fetches.

docs/MODEL.md section 9.2 derives the rules and their thresholds; in short: a hint source (a
sitemap's ``lastmod``, a feed's dates, pings) is judged per (site, source). Every fetch of a
page the source covers is a test of it over the fetch interval (a, b]: did the source announce
a change dated inside it, and did the fingerprint see one? (A changed interval is no test of a
source that dates only a page's last change when it dates none inside but already one after
it: the date of the change inside may have been overwritten before the file was read.) Four
counts follow: ``hits`` (announced, changed), ``false_alarms`` (announced, unchanged),
``misses`` (changed, silent) and ``quiet`` (neither); under a uniform Beta(1, 1) prior they
give Beta posteriors of precision π, recall R and false-alarm probability φ.

Each test also adds p₀, the chance of a change in the interval under the null hypothesis of a
source whose announcements come as often as they do but at random moments
(``null_changed_probability``), to ``expected_hinted`` or ``expected_silent``: pooled counts
alone are confounded, since fast pages and long intervals bring both more changes and more
announcements. The crawler's working rate would not do for p₀: shrunk toward the population,
it understates exactly the fast pages on which announcements concentrate.

``assess`` classifies the source: **ignored** when its dates are the moment they were read, or
when it is not shown informative (announced intervals change credibly more often than p₀
predicts); **complete** (crawler.core.observed plans its pages as completely observed) when
informative and recall, precision and 1 − φ are credibly high; **noisy** otherwise: a hint
raises the probability that the page changed and silence lowers it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, replace
from functools import lru_cache
from typing import Literal

from crawler.core.estimate import ChangeHistory, GammaPrior, fast_posterior_rate

Classification = Literal["complete", "noisy", "ignored"]
COMPLETE: Classification = "complete"
NOISY: Classification = "noisy"
IGNORED: Classification = "ignored"

PRIOR_SUCCESSES = 1.0
PRIOR_FAILURES = 1.0
COMPLETE_RECALL = 0.9
"""Recall at least this to be complete (fifteen clean confirmations) ..."""
COMPLETE_LEVEL = 0.75
"""... precision and 1 − φ at least this (five of each) ..."""
COMPLETE_CREDIBILITY = 0.8
"""... each with this posterior probability."""
INFORMATIVE_QUANTILE = 0.001
"""Informative when precision's lower 0.1% bound exceeds the announced intervals' mean p₀ ..."""
INFORMATIVE_MIN_HITS = 5
"""... and at least this many announced changes were found (so that a source that announced
nothing cannot pass on a precision known only from its prior)."""
STAMPED_NOW_DAYS = 120.0 / 86400.0
"""A date this close to the moment it was read is "now" (as the Last-Modified test uses)."""
STAMPED_NOW_SHARE = 0.9
STAMPED_NOW_MIN_DATES = 4


@dataclass(frozen=True, slots=True)
class HintCounts:
    """The tests of one (site, source): fetch intervals by (announced?, changed?), what the
    Poisson model expected of them, and the dates read by whether they were the moment of
    reading."""

    hits: int = 0
    false_alarms: int = 0
    misses: int = 0
    quiet: int = 0
    expected_hinted: float = 0.0
    expected_silent: float = 0.0
    dates: int = 0
    stamped_now: int = 0

    def tested(self, announced: bool, changed: bool, prior_changed: float) -> HintCounts:
        """The counts after one fetch interval: did the source announce a change inside it, did
        the fingerprint see one, and how likely the Poisson model made a change
        (``prior_changed_probability``)."""
        return HintCounts(
            self.hits + (announced and changed),
            self.false_alarms + (announced and not changed),
            self.misses + (changed and not announced),
            self.quiet + (not announced and not changed),
            self.expected_hinted + (prior_changed if announced else 0.0),
            self.expected_silent + (0.0 if announced else prior_changed),
            self.dates,
            self.stamped_now,
        )

    def dated(self, claimed_days: float, read_at_days: float) -> HintCounts:
        """The counts after reading one date from the source at ``read_at_days``."""
        stamped = abs(read_at_days - claimed_days) <= STAMPED_NOW_DAYS
        return replace(self, dates=self.dates + 1, stamped_now=self.stamped_now + stamped)


@dataclass(frozen=True, slots=True)
class HintTrust:
    """A source's classification, the posterior means behind it, and why."""

    classification: Classification
    precision: float
    recall: float
    false_alarm: float
    reason: str


def prior_changed_probability(change_rate_per_day: float, interval_days: float) -> float:
    """p₀ = 1 − e^{−λ t}: the Poisson model's chance of a change in an interval of t days."""
    return -math.expm1(-max(change_rate_per_day, 0.0) * max(interval_days, 0.0))


def null_changed_probability(
    announcements: int, watched_days: float, interval_days: float,
    history: ChangeHistory | None = None,
) -> float:
    """p₀ under the null hypothesis (announcements as frequent as they are, at random moments):
    the chance of a change in an interval of t days, 1 − e^{−λ̂ t}, with λ̂ the posterior mean
    from the Jeffreys prior, the page's N announcements over T days watched (Gamma(N + ½, T))
    and its fetch record before the interval (``history``), as docs/MODEL.md 9.2 derives. The
    record is what lets a truthful source on slow pages be trusted quickly: months of unchanged
    fetches say an announced change is a surprise."""
    if interval_days <= 0.0:
        return 0.0
    prior = GammaPrior(announcements + 0.5, max(watched_days, interval_days))
    if history is None or history.fetches <= 0:
        rate = prior.mean_rate_per_day
    else:
        rate = fast_posterior_rate(history, prior)
    return prior_changed_probability(rate, interval_days)


def announced_in(claimed_days: Iterable[float], start_days: float, end_days: float) -> bool:
    """Whether any announcement dates a change inside the fetch interval (start, end]."""
    return any(start_days < claimed <= end_days for claimed in claimed_days)


@lru_cache(maxsize=65536)
def _tail_above(successes: float, failures: float, level: float) -> float:
    """P(θ ≥ level) for θ ~ Beta(prior + successes, prior + failures)."""
    from scipy import special  # scipy on first use (see crawler.core)

    alpha, beta = PRIOR_SUCCESSES + successes, PRIOR_FAILURES + failures
    return float(1.0 - special.betainc(alpha, beta, level))


@lru_cache(maxsize=65536)
def _quantile(successes: float, failures: float, q: float) -> float:
    from scipy import special  # scipy on first use (see crawler.core)

    alpha, beta = PRIOR_SUCCESSES + successes, PRIOR_FAILURES + failures
    return float(special.betaincinv(alpha, beta, q))


def _mean(successes: float, failures: float) -> float:
    alpha, beta = PRIOR_SUCCESSES + successes, PRIOR_FAILURES + failures
    return alpha / (alpha + beta)


def stamped_now(counts: HintCounts) -> bool:
    """Whether the source's dates are the moment they were read: nearly all of at least four."""
    return (
        counts.dates >= STAMPED_NOW_MIN_DATES
        and counts.stamped_now >= STAMPED_NOW_SHARE * counts.dates
    )


def informative(counts: HintCounts) -> bool:
    """Whether announced intervals change credibly more often than the Poisson model expected
    of them (docs/MODEL.md section 9.2)."""
    announced = counts.hits + counts.false_alarms
    if counts.hits < INFORMATIVE_MIN_HITS or announced == 0:
        return False
    expected = counts.expected_hinted / announced
    return _quantile(counts.hits, counts.false_alarms, INFORMATIVE_QUANTILE) > expected


def assess(counts: HintCounts) -> HintTrust:
    """Classify a source from its tests: ignored, complete or noisy (docs/MODEL.md 9.2)."""
    precision = _mean(counts.hits, counts.false_alarms)
    recall = _mean(counts.hits, counts.misses)
    false_alarm = _mean(counts.false_alarms, counts.quiet)

    def trust(classification: Classification, reason: str) -> HintTrust:
        return HintTrust(classification, precision, recall, false_alarm, reason)

    if stamped_now(counts):
        return trust(IGNORED, f"{counts.stamped_now} of {counts.dates} dates were the moment "
                              "they were read")
    if not informative(counts):
        announced = counts.hits + counts.false_alarms
        expected = counts.expected_hinted / announced if announced else math.nan
        return trust(IGNORED, f"not shown informative: {counts.hits} of {announced} announced "
                              f"intervals changed, {expected:.2f} expected without hints")
    if (
        _tail_above(counts.hits, counts.misses, COMPLETE_RECALL) >= COMPLETE_CREDIBILITY
        and _tail_above(counts.hits, counts.false_alarms, COMPLETE_LEVEL) >= COMPLETE_CREDIBILITY
        and _tail_above(counts.quiet, counts.false_alarms, COMPLETE_LEVEL) >= COMPLETE_CREDIBILITY
    ):
        return trust(COMPLETE, f"{counts.hits} changes announced, {counts.quiet} silences "
                               f"confirmed, {counts.misses} missed, {counts.false_alarms} false")
    return trust(NOISY, f"precision {precision:.2f}, recall {recall:.2f}, false alarms "
                        f"{false_alarm:.2f}: informative, not complete")
