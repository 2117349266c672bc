"""How far a site's change hints can be trusted, learned from the crawler's own fetches.

docs/MODEL.md section 9.2. A hint source (a sitemap's ``lastmod``, a feed's dates, pings) is
judged per (site, source). Every fetch of a page the source covers is a test of it: over the
fetch interval (a, b], did the source announce a change (a hint dated inside (a, b], counted
once the announcements that were late have had time to arrive), and did the fingerprint see
one? A changed interval is no test of a source that dates only a page's last change
(``lastmod``, a feed's ``updated``) when it dates none inside the interval but already one
after it: the change inside may have had its date overwritten before the file was read.
Four counts follow:

- ``hits``: announced and changed;
- ``false_alarms``: announced, unchanged;
- ``misses``: changed without an announcement;
- ``quiet``: neither.

Under a uniform Beta(1, 1) prior they give Beta posteriors of the source's

- precision π = P(changed | announced): Beta(1 + hits, 1 + false_alarms);
- recall R = P(announced | changed): Beta(1 + hits, 1 + misses);
- false-alarm probability φ = P(announced | unchanged): Beta(1 + false_alarms, 1 + quiet).

Each test also adds a probability p₀ = 1 − e^{−λ t} of a change in the interval (t its length)
to ``expected_hinted`` or ``expected_silent``. That is the calibration the counts alone lack:
fast pages and long intervals bring both more changes and more announcements from a source
that knows nothing of when the changes happen, so pooled over a site's pages such a source
shows recall above its false-alarm probability, and precision above the base rate. What it
cannot show is announced intervals changing more often than p₀. The caller computes p₀ with
``null_changed_probability``, under the null hypothesis of a source whose announcements come
as often as they do but at random moments: then announcements and changes are two independent
Poisson processes of one rate λ, and both inform it. Starting from the scale-free Jeffreys
prior λ^{−½}, the N announcements over T days watched give Gamma(N + ½, T), and the page's
fetch record before the interval (changed and unchanged intervals, the likelihood of
docs/MODEL.md section 2) updates that; p₀ = 1 − e^{−λ̂ t} at the posterior mean λ̂, which by
Jensen's inequality is a little above the posterior predictive: the test errs toward distrust.
Not the crawler's working rate: that is shrunk toward the population, and understates exactly
the fast pages on which announcements concentrate; so does any population prior early in a
crawl (under the default Gamma(0.5, 15 days) a page announcing hourly still looks weekly after
its first day, and random sources passed as informative on the fast population). The fetch
record is what lets a truthful source on slow pages be trusted quickly: months of unchanged
fetches say an announced change is a surprise, where one announcement alone would say the page
is as fast as one change over the days watched.

The source is classified (``assess``):

- **ignored** when its dates are the moment they were read (``lastmod`` = now on every read:
  every "announcement" is vacuous), or when it is not shown informative;
- **complete** (every change announced, nothing else: crawler.core.observed plans its pages as
  completely observed) when it is informative and, with posterior probability at least 0.8,
  recall is at least 0.9 and each of precision and 1 − φ at least 0.75;
- **noisy** when it is informative without being complete: a hint raises the probability that
  the page changed (crawler.core.observed.changed_probability) and silence lowers it.

"Informative" asks for at least five announced changes found, and a precision whose 0.1% lower
credible bound exceeds the mean p₀ of the announced intervals: announced intervals change
credibly more often than the Poisson model alone predicted for them. A source with random dates
has a precision equal to that mean, whatever the pages' rates, and does not pass however long
it is watched; one that always says "changed" announces every interval, and its precision is
the base rate, which is that mean too. The bound is strict because the test is repeated after
every fetch (a 5% bound, checked hundreds of times, lets a random source through now and then)
and because p₀ comes from rates shrunk toward the population: early in a crawl they understate
the fast pages, where both changes and random announcements concentrate. A source whose dates
are right passes at once all the same: five hits and no false alarm put the bound at
0.001^{1/6} = 0.32, above the p₀ of intervals that change one time in three or less, and each
further hit raises it (30 hits for intervals that change 80% of the time). The five hits keep a
source that has announced nothing from passing on a precision known only from its prior.

Why the complete thresholds. A complete page is fetched only after announcements, so it is
fresh a share R of the time: every change the source misses stays stale until the next one it
announces. The alternative is not blind fetching but the noisy treatment, which keeps the blind
fetches and adds the announcements; complete pays only when R is close to 1, above what the
blind optimum gives a page anyway (0.84 to 0.96 in docs/MODEL.md section 5's table), hence 0.9.
A false alarm costs a fetch, not freshness, hence the laxer 0.75 for precision and 1 − φ. Once
complete, a page is fetched after its announcements, so misses show only when a fetch finds an
unannounced change, rarely: the bar has to hold before trust, it is not corrected much after.
With no error seen, n confirmations give P(θ ≥ ℓ) = 1 − ℓ^{n+1}: **fifteen** announced changes
found for recall (1 − 0.9^{16} = 0.81; fourteen give 0.79) and **five** for precision and five
silences over unchanged intervals (1 − 0.75^6 = 0.82; four give 0.76). In practice the
informativeness test below asks for as many or more on most sites. Trust is reassessed at every
test and falls the moment the posterior does: a complete page whose source misses or cries wolf
returns to the incomplete-observation schedule at once.

The "now" test comes from the credible Last-Modified test (docs/MODEL.md section 2.4): a date
within two minutes of the moment it was read is "stamped now"; once at least four dates have
been read and 90% of them are stamped so, the source is ignored whatever the counts say. It
finds such a site out in four reads, before a single test has been counted.

Pure: no I/O, no clock.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
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
"""... and at least this many announced changes were found."""
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
        return HintCounts(
            self.hits, self.false_alarms, self.misses, self.quiet,
            self.expected_hinted, self.expected_silent,
            self.dates + 1, self.stamped_now + stamped,
        )


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
    announcements: int,
    watched_days: float,
    interval_days: float,
    history: ChangeHistory | None = None,
) -> float:
    """p₀ under the null hypothesis (announcements as frequent as they are, at random moments):
    the chance of a change in an interval of t days, 1 − e^{−λ̂ t}, with λ̂ the posterior mean
    from the Jeffreys prior, the page's N announcements over T days watched (Gamma(N + ½, T))
    and its fetch record before the interval (``history``), as the module's docstring derives."""
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
    of them (the module docstring)."""
    announced = counts.hits + counts.false_alarms
    if counts.hits < INFORMATIVE_MIN_HITS or announced == 0:
        return False
    expected = counts.expected_hinted / announced
    return _quantile(counts.hits, counts.false_alarms, INFORMATIVE_QUANTILE) > expected


def assess(counts: HintCounts) -> HintTrust:
    """Classify a source from its tests (the rules and their reasons are in the module's
    docstring): ignored, complete or noisy."""
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
