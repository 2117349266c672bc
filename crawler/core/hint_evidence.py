"""The daemon's side of change hints as evidence: what it stores, and why a URL is
scheduled when it is.

The science is ``crawler.core.hint_trust`` (how far a (site, source) is trusted) and
``crawler.core.observed`` (what complete and noisy observations do to a schedule); the daemon
keeps per (host, source) the counts ``hint_trust.HintCounts`` holds (table ``hint_trust``),
counted in SQL at every fetch with a change verdict, and the classification ``assess`` gives
(``assessed``, computed here on the rows a batch of fetches touched). A hint's arrival is then
SQL alone: the classification is a column (docs/MODEL.md, "In the daemon").

A source is a kind of hint in ``url_hints``: ``lastmod`` (sitemaps), ``updated`` and
``published`` (feeds), ``ping`` (IndexNow).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import NDArray

from crawler.core.budget import host_caps_per_day
from crawler.core.estimate import DEFAULT_PRIOR, GammaPrior
from crawler.core.hint_trust import (
    INFORMATIVE_MIN_HITS,
    STAMPED_NOW_DAYS,
    HintCounts,
    HintTrust,
    assess,
)
from crawler.core.model import SECONDS_PER_DAY
from crawler.core.observed import ObservedObjective, ObservedPlan, solve_observed
from crawler.core.planning import Sample, sampled_hosts
from crawler.core.replan import interval_bounds_days
from crawler.core.schedule import SchedulePolicy

FloatArray = NDArray[np.float64]

PING = "ping"

AUDIT_CHANGES = 8.0
"""A completely observed page with no announcement for this many of its mean announcement
intervals is fetched anyway (a Poisson page stays unchanged that long with probability e^{-8}:
the source has most likely stopped announcing). Never later than the page's longest interval."""

UNPROVEN_PING_TESTS = INFORMATIVE_MIN_HITS
"""Pings from a host whose pings were tested on fewer announced fetch intervals than this are
taken at their word (the URL is due): the site proved it owns the key, and the fetch that
follows a ping tests it, as often as ``assess`` needs before it judges a source."""

STAMPED_NOW_SECONDS = STAMPED_NOW_DAYS * SECONDS_PER_DAY


def counts_of(row: Mapping[str, Any]) -> HintCounts:
    """A ``hint_trust`` row's counts (``dates`` and ``stamped_now`` when the row has them)."""
    return HintCounts(
        int(row["hits"]), int(row["false_alarms"]), int(row["misses"]), int(row["quiet"]),
        float(row["expected_hinted"]), float(row["expected_silent"]),
        int(row.get("dates") or 0), int(row.get("stamped_now") or 0),
    )


def assessed(counts: HintCounts) -> HintTrust:
    """``assess`` of the tests alone (the dates left out): what ``hint_trust.tested_class``
    stores. The "now" rule over the dates is the table's generated ``classification``, the same
    rule ``assess`` applies first, so the column equals ``assess`` of all the counts."""
    return assess(replace(counts, dates=0, stamped_now=0))


def announced_rate_per_day(
    announced: int, watched_days: float, prior: GammaPrior = DEFAULT_PRIOR
) -> float:
    """A page's rate of announcements, (α + announced) / (β + days watched): a complete page's
    change rate, and the rate a source's test is calibrated by (``crawler.core.hint_trust``)."""
    return (prior.shape + announced) / (prior.rate + max(watched_days, 0.0))


def audit_seconds(announced_rate: float, longest_seconds: float) -> float:
    """How long a completely observed page waits for an announcement after a fetch."""
    if announced_rate <= 0.0:
        return longest_seconds
    return min(AUDIT_CHANGES / announced_rate * SECONDS_PER_DAY, longest_seconds)


def ping_unproven(counts: HintCounts) -> bool:
    """Whether a host's pings are still taken at their word (``UNPROVEN_PING_TESTS``)."""
    return counts.hits + counts.false_alarms < UNPROVEN_PING_TESTS


def solve_sample_observed(
    sample: Sample, rates: FloatArray, complete: NDArray[np.bool_], complete_rates: FloatArray,
    budget_per_day: float, policy: SchedulePolicy, politeness_delay: float,
) -> ObservedPlan:
    """μ for the planner's sample with its completely observed pages planned as such
    (``crawler.core.observed.solve_observed``), scaled as ``crawler.core.planning.solve_sample``
    scales the budget and the hosts' politeness caps. ``rates``: the sampled URLs' change rates
    as their fetches estimate them; ``complete_rates``: for the complete ones, the rate of their
    announcements, which replaces it (docs/MODEL.md section 9.1)."""
    fraction, host_index, delays = sampled_hosts(sample, politeness_delay)
    change_rates = np.where(complete, complete_rates, rates)
    shortest, longest = interval_bounds_days(
        policy, sample.host_ids.size, sample.own_min_seconds, sample.own_max_seconds
    )
    objective: ObservedObjective = (
        "harmonic" if policy.settings.objective == "harmonic" else "freshness")
    return solve_observed(
        change_rates, sample.importance, complete, budget_per_day * fraction, objective,
        min_interval_days=shortest, max_interval_days=longest, host_ids=host_index,
        host_caps_per_day=host_caps_per_day(delays / fraction), mu_hint=policy.mu,
    )
