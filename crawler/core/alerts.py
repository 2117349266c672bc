"""Alerts: which fetches raise ``failing``, ``recovered`` and ``region_missing`` events.

A URL, or a host, is *failing* after ``threshold`` consecutive failed requests of any kind: a
DNS or TLS failure, a refused or timed-out connection, an HTTP error status, on a page or on
the host's robots.txt (which counts for the host alone). A request that gets an answer (content,
304, 404/410, a redirect) ends the run: the URL, and its host, work again. ``failing`` is
raised once per run, when it reaches the threshold; ``recovered`` when a run that raised it
ends. While a host is failing its URLs raise nothing of their own (a host down would otherwise
raise one event per URL), and when a URL's run and its host's reach the threshold, or end,
with one request, the host's event alone is raised: one event per fetch and kind.

Pure: the counting itself is the database's (``alerts`` rows, crawler.daemon.alerts).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from crawler.core.model import AnyErrorKind, Observation, Outcome, UrlRecord, http_error_kind

HOST = 0  # the url_id of a host's own row in ``alerts``

# Not ``blocked``: a request this crawler refused to send (the SSRF policy, shown by `crawler
# status` as a refused host) or could not store says nothing of the site.
FAILED_OUTCOMES = frozenset({Outcome.HTTP_ERROR, Outcome.NETWORK_ERROR, Outcome.TIMEOUT})
# Answers: the URL and its host work, whatever the answer says about the page.
WORKED_OUTCOMES = frozenset({Outcome.OK, Outcome.NOT_MODIFIED, Outcome.GONE, Outcome.REDIRECT})


def failure_kind(outcome: str, error_kind: AnyErrorKind | None, status: int | None) -> str:
    """The name a failure is counted and shown under (the metric's ``kind`` label)."""
    if error_kind:
        return error_kind
    if status is not None:
        return http_error_kind(status)
    return str(outcome)


def fetch_failure(obs: Observation) -> str | None:
    """The kind of failure a fetch was, or None when it got an answer or was not sent (a
    URL robots.txt forbids, or one refused before connecting, is neither a failure nor an
    answer: see ``fetch_worked``)."""
    if obs.outcome not in FAILED_OUTCOMES:
        return None
    return failure_kind(obs.outcome, obs.error_kind, obs.status)


def fetch_worked(obs: Observation) -> bool:
    return obs.outcome in WORKED_OUTCOMES


@dataclass(frozen=True, slots=True)
class AlertRow:
    """A URL's or host's (``url_id`` HOST) run of failures, as stored."""

    url_id: int
    failures: int
    first_failed_at: float
    raised: bool
    url: str
    error_kind: str


def to_raise(rows: Sequence[AlertRow], threshold: int) -> list[AlertRow]:
    """After a failure counted on ``rows`` (the host's, and the URL's when a page failed):
    the rows whose ``failing`` event is due now, at most one. A URL's waits while its host's
    is raised, and is raised later if the URL still fails once the host works again."""
    host = next((r for r in rows if r.url_id == HOST), None)
    if host is not None and not host.raised and host.failures >= threshold:
        return [host]
    if host is not None and host.raised:
        return []
    return [r for r in rows if r.url_id != HOST and not r.raised and r.failures >= threshold][:1]


def to_recover(cleared: Sequence[AlertRow]) -> list[AlertRow]:
    """After an answer cleared ``cleared`` rows: the row whose ``recovered`` event is due (the
    host's when both had raised ``failing``), or none when no cleared run had raised one."""
    raised = [r for r in cleared if r.raised]
    host = [r for r in raised if r.url_id == HOST]
    return host or raised[:1]


def region_missing(before: UrlRecord, obs: Observation) -> bool:
    """A watched selector that matched on the last fetch matches nothing now.

    The region's text is what is fingerprinted: a selector matching nothing leaves no text,
    whose simhash is 0 (a non-empty text hashes to 0 with probability 2**-64). Raised once,
    on the fetch that first finds it gone, and only under the selector the previous
    fingerprint was taken with (a new selector has nothing to stop matching yet)."""
    region = before.region
    return (
        obs.outcome == Outcome.OK
        and region.watch is not None
        and before.fingerprint_region == region.key
        and before.last_simhash not in (None, 0)
        and obs.simhash == 0
    )


def alert_payload(
    kind: str, row: AlertRow, *, origin: str, fetched_at_iso: str, first_failed_at_iso: str,
    status: int | None,
) -> dict[str, Any]:
    """The JSON of a ``failing`` or ``recovered`` event (docs/COLLECTION.md, "Alerts")."""
    return {
        "kind": kind,
        "scope": "host" if row.url_id == HOST else "url",
        "url": row.url,
        "origin": origin,
        "fetched_at": fetched_at_iso,
        "status": status,
        "failures": row.failures,
        "error_kind": row.error_kind,
        "failing_since": first_failed_at_iso,
    }
