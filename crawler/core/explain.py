"""``crawler explain URL``: why a URL is scheduled when it is, from what the daemon stored.

The account follows the order in which the daemon decides (docs/MODEL.md sections 2, 5 and 9):
the page's rate estimate and the evidence behind it, the plan's μ and the fetch rate they give,
the bound that binds, then its change hints and how far each source is trusted, which decide
whether the page keeps that schedule (its own), waits for announcements (a complete source),
was made due by one, or was brought forward by a noisy one; and last the host's politeness,
which decides when the request can go. Each account names the next fetch it expects, and says
whether the stored one agrees.

Plain data in, a JSON-ready mapping out (``now`` is given).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crawler.core.estimate import GammaPrior
from crawler.core.hint_evidence import (
    AUDIT_CHANGES,
    PING,
    UNPROVEN_PING_TESTS,
    announced_rate_per_day,
    audit_seconds,
    ping_unproven,
)
from crawler.core.hint_trust import COMPLETE, NOISY, HintCounts, assess
from crawler.core.model import SECONDS_PER_DAY, Schedule, UrlRecord
from crawler.core.observed import hinted_fetch_time
from crawler.core.plan import fetch_rate_for
from crawler.core.schedule import (
    SchedulePolicy,
    estimated_rate_per_day,
    own_interval_bounds_seconds,
    timing_model,
    within_own_schedule,
)

# Outcomes whose fetch scheduled the URL by its rate (the others retry on a backoff).
CONTENT_OUTCOMES = ("ok", "not_modified")
# Times stored and recomputed agree within this (microseconds rounded, float seconds).
AGREEMENT_SECONDS = 0.001


@dataclass(frozen=True, slots=True)
class SourceEvidence:
    """One source of the URL's hints: the host's counts and classification (``hint_trust``),
    and this URL's announcements."""

    source: str
    counts: HintCounts
    classification: str | None  # stored; None: no test nor date counted yet
    tested_class: str | None
    announced_at_fetch: int  # announcements since its hints are watched, up to the last fetch
    announced_since_fetch: bool  # a change dated after the last fetch
    first_seen_since_fetch: float | None  # when the first such announcement was read
    claims: int


@dataclass(frozen=True, slots=True)
class HostState:
    origin: str
    next_request_at: float | None
    backoff_until: float | None
    crawl_delay_seconds: float | None
    politeness_delay: float
    paused: bool
    lease_owner: str | None
    lease_expires_at: float | None


@dataclass(frozen=True, slots=True)
class PlanState:
    version: int
    mu: float | None
    objective: str
    mode: str
    complete_sampled: int
    solved_at: float | None


def _iso(seconds: float | None) -> str | None:
    import datetime as dt

    if seconds is None:
        return None
    if not math.isfinite(seconds):
        return "infinity" if seconds > 0 else "-infinity"
    return dt.datetime.fromtimestamp(seconds, dt.UTC).isoformat()


def duration(seconds: float | None) -> str:
    """A duration in the largest unit that keeps it readable."""
    if seconds is None or not math.isfinite(seconds):
        return "never"
    sign = "-" if seconds < 0 else ""
    s = abs(seconds)
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if s >= size:
            return f"{sign}{s / size:.3g} {unit}"
    return f"{sign}{s:.3g} s"


def _source_view(src: SourceEvidence, rate: float) -> dict[str, Any]:
    trust = assess(src.counts)
    c = src.counts
    view: dict[str, Any] = {
        "source": src.source,
        "classification": src.classification or trust.classification,
        "hits": c.hits, "false_alarms": c.false_alarms, "misses": c.misses, "quiet": c.quiet,
        "expected_hinted": c.expected_hinted, "expected_silent": c.expected_silent,
        "dates": c.dates, "stamped_now": c.stamped_now,
        "precision": trust.precision, "recall": trust.recall, "false_alarm": trust.false_alarm,
        "reason": trust.reason,
        "claims": src.claims,
        "announced": src.announced_at_fetch,
        "announced_rate_per_day": rate,
        "announced_since_last_fetch": src.announced_since_fetch,
    }
    if src.source == PING and ping_unproven(c):
        view["pings"] = (f"taken at their word: tested on {c.hits + c.false_alarms} announced "
                         f"intervals, fewer than {UNPROVEN_PING_TESTS}")
    return view


def _normal(
    record: UrlRecord, policy: SchedulePolicy, last_attempt_at: float | None,
    fetch_rate: float | None,
) -> tuple[str, str, float | None]:
    """The URL's own schedule: (its reason, the bound that binds, the next fetch it gives)."""
    shortest, longest = own_interval_bounds_seconds(record, policy)
    if last_attempt_at is None or not fetch_rate:
        return "not fetched yet: due when seeded", "none", None
    interval = SECONDS_PER_DAY / fetch_rate
    expected: float | None = within_own_schedule(
        record, last_attempt_at, Schedule(last_attempt_at + interval)).next_fetch_at
    clock = timing_model(record, policy)
    if policy.settings.schedule == "uniform" or policy.mu is None:
        reason = (f"the uniform interval {duration(interval)}"
                  + (" (no plan solved yet)" if policy.settings.schedule == "optimal" else ""))
        binding = "uniform interval"
    else:
        lam = record.change_rate_per_day or 0.0
        settings = policy.settings
        free = fetch_rate_for(lam, record.importance, policy.mu, settings.objective,
                              0.0, math.inf, beta_days=settings.beta_seconds / SECONDS_PER_DAY)
        reason = (f"the optimum for λ = {lam:.4g}/day, importance {record.importance:g} and "
                  f"μ = {policy.mu:.4g} ({policy.settings.objective}): a fetch every "
                  f"{duration(interval)}")
        binding = "none"
        free_interval = SECONDS_PER_DAY / free if free > 0 else math.inf
        if free_interval > longest * (1 + 1e-9):
            binding = ("its own longest interval (crawler bound --at-least-every)"
                       if record.own_max_interval_seconds is not None
                       else "the longest interval (CRAWLER_MAX_INTERVAL)")
        elif free_interval < shortest * (1 - 1e-9):
            binding = ("its own shortest interval (crawler bound --at-most-every)"
                       if record.own_min_interval_seconds is not None
                       else "the shortest interval (CRAWLER_MIN_INTERVAL)")
    if clock is not None:
        reason += (f"; timed by its update clock (every {duration(clock.period_days * 86400)},"
                   f" jitter {duration(clock.jitter_days * 86400)})")
        binding = "its update clock" if binding == "none" else binding
        expected = None  # the clock's phase, not the interval, places the fetch
    if record.fetch_windows and expected is not None and expected != last_attempt_at + interval:
        binding = f"its fetch windows ({record.fetch_windows})"
    return reason, binding, expected


def explain(
    record: UrlRecord,
    *,
    state: str,
    next_fetch_at: float,
    last_attempt_at: float | None,
    last_outcome: str | None,
    fetch_rate_per_day: float | None,
    policy: SchedulePolicy,
    plan: PlanState | None,
    hints: Sequence[dict[str, Any]],
    sources: Sequence[SourceEvidence],
    hints_since: float | None,
    planned_at: float | None,
    host: HostState,
    now: float,
) -> dict[str, Any]:
    """The account of one URL (module docstring), JSON-ready."""
    prior: GammaPrior = policy.prior_for(record.host_id)
    history = record.history
    rate = {
        "change_rate_per_day": record.change_rate_per_day,
        "estimate_now": estimated_rate_per_day(record, policy),
        "prior": {"shape": prior.shape, "rate_days": prior.rate,
                  "mean_per_day": prior.mean_rate_per_day},
        "evidence": {
            "fetches": record.fetch_count,
            "changes": record.change_count,
            "intervals_observed": history.fetches,
            "changed_intervals": len(history.changed_intervals_days),
            "changed_interval_days": list(history.changed_intervals_days[-8:]),
            "unchanged_days": history.unchanged_days,
            "last_modified": {
                "fetches": record.last_modified_history.fetches,
                "changes": record.last_modified_history.changes,
                "observed_days": record.last_modified_history.observed_days,
            },
            "update_clock": None if record.periodic is None else {
                "period_days": record.periodic.period_days,
                "phase_days": record.periodic.phase_days,
                "jitter_days": record.periodic.jitter_days,
            },
        },
    }
    shortest, longest = own_interval_bounds_seconds(record, policy)
    reason, binding, expected = _normal(record, policy, last_attempt_at, fetch_rate_per_day)
    normal_reason = reason
    own_expected = planned_at if planned_at is not None else expected

    fetched = record.last_fetched_at
    views = []
    complete = noisy = None
    for src in sources:
        watched = ((fetched or now) - (hints_since if hints_since is not None else now)) / 86400
        src_rate = announced_rate_per_day(src.announced_at_fetch, watched, prior)
        views.append(_source_view(src, src_rate))
        if src.classification == COMPLETE and complete is None:
            complete = (src, src_rate)
        elif src.classification == NOISY and noisy is None:
            noisy = src

    kind = "own schedule"
    agrees: bool | None = None
    if last_outcome is not None and last_outcome not in CONTENT_OUTCOMES:
        kind = "retry"
        reason = (f"its last fetch ended {last_outcome}: retried on the backoff "
                  f"({record.consecutive_failures} failures in a row)")
        binding = "backoff"
        own_expected = None
    elif complete is not None and fetched is not None:
        src, src_rate = complete
        if src.announced_since_fetch:
            kind = "announced"
            reason = (f"its {src.source} source is trusted as complete and announced a change "
                      f"after its last fetch (read at {_iso(src.first_seen_since_fetch)}): "
                      "due then")
            binding = "an announcement"
            agrees = (src.first_seen_since_fetch is not None
                      and next_fetch_at <= src.first_seen_since_fetch + AGREEMENT_SECONDS)
            own_expected = None
        else:
            kind = "waiting for announcements"
            wait = audit_seconds(src_rate, longest)
            audit = fetched + wait
            own_expected = max(planned_at if planned_at is not None else -math.inf, audit)
            binding = ("the longest interval" if wait >= longest
                       else f"{AUDIT_CHANGES:g} announcement intervals")
            reason = (f"its {src.source} source is trusted as complete: the page is fetched "
                      f"after an announced change, and waits for one at most "
                      f"{duration(wait)} (the shorter of {AUDIT_CHANGES:g} intervals between "
                      f"its announcements, {duration(SECONDS_PER_DAY / src_rate)} each, and its "
                      f"longest interval {duration(longest)}), never sooner than its own "
                      f"schedule ({normal_reason})")
    elif noisy is not None and noisy.announced_since_fetch and fetched is not None:
        kind = "brought forward"
        trust = assess(noisy.counts)
        seen = noisy.first_seen_since_fetch
        lam = record.change_rate_per_day or 0.0
        if (planned_at is not None and seen is not None and lam > 0
                and timing_model(record, policy) is None and math.isfinite(planned_at)):
            moved = hinted_fetch_time(fetched / 86400, planned_at / 86400, lam, seen / 86400,
                                      trust.recall, trust.false_alarm) * 86400
            own_expected = min(moved, planned_at)
        reason = (f"its {noisy.source} source is a noisy signal (recall {trust.recall:.2f}, "
                  f"false alarms {trust.false_alarm:.2f}); its announcement read at "
                  f"{_iso(seen)} raised the probability of a change and brought the fetch "
                  f"forward from its own schedule ({_iso(planned_at)})")
        binding = "a noisy hint"
    elif sources:
        reason = f"its own schedule: {normal_reason}; its hints are not trusted enough to move it"
    else:
        reason = f"its own schedule: {normal_reason}; it has no hints"
    if agrees is None and own_expected is not None:
        agrees = abs(next_fetch_at - own_expected) <= AGREEMENT_SECONDS
    request_at = max(next_fetch_at, host.next_request_at or -math.inf,
                     host.backoff_until or -math.inf)
    politeness = "none"
    if host.paused:
        politeness = "the host is paused (crawler resume)"
    elif host.backoff_until is not None and host.backoff_until > next_fetch_at:
        politeness = f"the host backs off until {_iso(host.backoff_until)}"
    elif host.next_request_at is not None and host.next_request_at > next_fetch_at:
        politeness = f"the host's politeness clock: its next request not before " \
                     f"{_iso(host.next_request_at)}"
    return {
        "url": record.url,
        "state": state,
        "last_fetched_at": _iso(fetched),
        "last_attempt_at": _iso(last_attempt_at),
        "last_outcome": last_outcome,
        "rate": rate,
        "plan": None if plan is None else {
            "version": plan.version, "mu": plan.mu, "objective": plan.objective,
            "mode": plan.mode, "complete_sampled": plan.complete_sampled,
            "solved_at": _iso(plan.solved_at),
        },
        "fetch_rate_per_day": fetch_rate_per_day,
        "bounds": {
            "shortest_seconds": shortest, "longest_seconds": longest,
            "own_min_interval_seconds": record.own_min_interval_seconds,
            "own_max_interval_seconds": record.own_max_interval_seconds,
            "windows": record.fetch_windows or None,
        },
        "hints": list(hints),
        "sources": views,
        "hints_since": _iso(hints_since),
        "own_schedule_next_fetch_at": _iso(planned_at if planned_at is not None else expected),
        "schedule": {
            "kind": kind,
            "reason": reason,
            "binding": binding,
            "expected_next_fetch_at": _iso(own_expected),
            "agrees": agrees,
        },
        "next_fetch_at": _iso(next_fetch_at),
        "politeness": {
            "origin": host.origin,
            "binding": politeness,
            "next_request_at": _iso(host.next_request_at),
            "backoff_until": _iso(host.backoff_until),
            "delay_seconds": max(host.politeness_delay, host.crawl_delay_seconds or 0.0),
            "crawl_delay_seconds": host.crawl_delay_seconds,
            "paused": host.paused,
            "lease_owner": host.lease_owner,
            "lease_expires_at": _iso(host.lease_expires_at),
        },
        "request_not_before": _iso(request_at),
        "due_in_seconds": None if not math.isfinite(request_at) else request_at - now,
    }
