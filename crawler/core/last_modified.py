"""Last-Modified evidence: when a server's dates can be trusted, they time the changes.

Cho & Garcia-Molina (2003) estimate a page's change rate from the Last-Modified date: a fetch
that finds a change saw the page unchanged only since its last modification, not since the
previous fetch. A URL's dates are used (``dated_history``) only when its recent Last-Modified
headers pass the credibility test (``last_modified_is_credible``: not stamped with the response
time, not in the future, never going backwards) and have agreed with the fingerprint on every
fetch since the evidence began: the date moved exactly when the simhash saw a change. A server
whose date also moves for edits under the simhash threshold (a counter, an ad slot) dates
changes the crawler does not count, and its dates would time the wrong events. The schedule
then takes the known-change-time posterior as the rate (``crawler.core.schedule``), and the
period detector gets each change dated to the minute (``crawler.core.observe``). Pure.
"""

from __future__ import annotations

from crawler.core.estimate import LastModifiedHistory, last_modified_is_credible, last_modified_rate
from crawler.core.model import SECONDS_PER_DAY, UrlRecord

# (Last-Modified, fetched at) pairs kept per URL for the credibility test, in POSIX days.
MAX_EVIDENCE_PAIRS = 16
# Fewer fetches with a date than this say too little about the server to trust it.
MIN_EVIDENCE_PAIRS = 4
# The statistics started again: one shared value (immutable), as most servers send no date and
# every fetch of their pages comes here.
_NO_DATES = LastModifiedHistory()


def observe_last_modified(
    record: UrlRecord, fetched_at: float, last_modified: float | None, interval_days: float,
    changed: bool,
) -> tuple[LastModifiedHistory, tuple[float, ...]]:
    """The URL's Last-Modified statistics and evidence after a content fetch.

    Both start again when the fetch has no date (the server does not date this page
    consistently) or when the date disagrees with the fingerprint: it moved though the simhash
    saw no change, or it did not move though the simhash saw one.
    """
    if last_modified is None:
        return _NO_DATES, ()
    previous = record.last_modified
    if previous is not None and changed != (last_modified > previous):
        return _NO_DATES, ()
    dated = (last_modified / SECONDS_PER_DAY, fetched_at / SECONDS_PER_DAY)
    evidence = (*record.last_modified_evidence_days, *dated)[-2 * MAX_EVIDENCE_PAIRS :]
    history = record.last_modified_history.observe(
        interval_days, changed, (fetched_at - last_modified) / SECONDS_PER_DAY
    )
    return history, evidence


def dated_history(record: UrlRecord) -> LastModifiedHistory | None:
    """The URL's known-change-time statistics when its dates can be used, else None (the
    caller then uses the interval posterior): enough dated fetches, all credible and in
    agreement with the fingerprint (``observe_last_modified`` restarts them otherwise)."""
    evidence = record.last_modified_evidence_days
    if len(evidence) < 2 * MIN_EVIDENCE_PAIRS:
        return None
    if not last_modified_is_credible(evidence[::2], evidence[1::2]):
        return None
    return record.last_modified_history


def known_change_rate_per_day(record: UrlRecord) -> float | None:
    """Cho & Garcia-Molina's Last-Modified estimate of the URL's change rate, or None when
    the dates cannot be used (reported by ``crawler plan``-style tools; the schedule uses the
    posterior form, ``crawler.core.estimate.known_times_posterior_rate``)."""
    history = dated_history(record)
    if history is None:
        return None
    return last_modified_rate(history.fetches, history.changes, history.observed_days)
