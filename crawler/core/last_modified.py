"""Last-Modified evidence: when a server's dates can be trusted, they time the changes.

Cho & Garcia-Molina (2003) estimate a page's change rate from the Last-Modified date: a fetch
that finds a change saw the page unchanged only since its last modification, not since the
previous fetch. The estimator (``crawler.core.estimate.last_modified_rate``) is given only for
URLs whose recent Last-Modified headers pass the credibility test
(``last_modified_is_credible``: not stamped with the response time, not in the future, never
going backwards). The schedule uses the dates to time changes for the period detector
(``crawler.core.observe``), not this rate: docs/MODEL.md section 2.4 says why. Pure.
"""

from __future__ import annotations

from crawler.core.estimate import (
    LastModifiedHistory,
    last_modified_is_credible,
    last_modified_rate,
)
from crawler.core.model import SECONDS_PER_DAY, UrlRecord

# (Last-Modified, fetched at) pairs kept per URL for the credibility test, in POSIX days.
MAX_EVIDENCE_PAIRS = 16
# Fewer fetches with a date than this say too little about the server to trust it.
MIN_EVIDENCE_PAIRS = 4


def observe_last_modified(
    record: UrlRecord,
    fetched_at: float,
    last_modified: float | None,
    interval_days: float,
    changed: bool,
) -> tuple[LastModifiedHistory, tuple[float, ...]]:
    """The URL's Last-Modified statistics and evidence after a content fetch.

    A fetch without the header breaks the evidence: the server does not date this page
    consistently, so both start again.
    """
    if last_modified is None:
        return LastModifiedHistory(), ()
    evidence = (
        *record.last_modified_evidence_days,
        last_modified / SECONDS_PER_DAY,
        fetched_at / SECONDS_PER_DAY,
    )[-2 * MAX_EVIDENCE_PAIRS :]
    history = record.last_modified_history.observe(
        interval_days, changed, (fetched_at - last_modified) / SECONDS_PER_DAY
    )
    return history, evidence


def known_change_rate_per_day(record: UrlRecord) -> float | None:
    """The Last-Modified estimate of the URL's change rate, or None when the evidence is too
    thin or not credible (the caller then uses the posterior)."""
    evidence = record.last_modified_evidence_days
    if len(evidence) < 2 * MIN_EVIDENCE_PAIRS:
        return None
    if not last_modified_is_credible(evidence[::2], evidence[1::2]):
        return None
    h = record.last_modified_history
    return last_modified_rate(h.fetches, h.changes, h.observed_days)
