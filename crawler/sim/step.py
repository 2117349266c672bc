"""One simulated fetch through the daemon's own code: `crawler.core.transition.transition`.

The simulator knows each page's version (how many times it changed), so it answers a fetch
with a tiny text body naming that version (and a truthful Last-Modified for pages that send
one) and hands it to the transition the worker calls for every fetch. Nothing here estimates
or schedules on its own. Times are POSIX-like seconds, as in the daemon: simulated day d is
d * 86400 seconds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from crawler.core.backoff import HostHealth
from crawler.core.model import (
    OK,
    SECONDS_PER_DAY,
    ErrorKind,
    FetchResult,
    Outcome,
    Schedule,
    UrlRecord,
)
from crawler.core.observe import observe, updated_record
from crawler.core.patterns import EVERY_URL
from crawler.core.schedule import SchedulePolicy
from crawler.core.transition import HostContext, transition
from crawler.settings import Settings, default_settings

if TYPE_CHECKING:  # checked field by field, as dataclasses.replace is
    from dataclasses import replace as replace_record
else:
    from crawler.core.model import replace_record

# Text bodies are compared by exact hash; the threshold is passed as the worker does.
SIMHASH_THRESHOLD_BITS = default_settings().simhash_threshold
_HOST = HostContext(HostHealth(), delay_seconds=0.0, next_request_at=0.0)
# What the HTTP edge names a simulated failure (an HTTP error is simulated without a status,
# so without its ``http_<status>`` kind).
_ERROR_KINDS = {
    Outcome.TIMEOUT: ErrorKind.TIMEOUT_TOTAL, Outcome.NETWORK_ERROR: ErrorKind.CONNECT_FAILED,
}
# Every successful answer but for its time, body and Last-Modified: each fetch copies it with
# those replaced (``replace_record``), cheaper than setting a FetchResult's 20 fields anew.
_ANSWER = FetchResult(
    fetched_at=0.0, duration_seconds=0.0, outcome=OK, status=200, content_type="text/plain"
)


def sim_settings(**overrides: Any) -> Settings:
    """The settings of a simulated crawl: the defaults, with no windows and no links read,
    but for ``overrides`` (field names)."""
    return default_settings(max_outlinks=0, max_depth=0, **overrides)


def page_body(version: int) -> bytes:
    """Differs exactly when the page changed."""
    return b"version %d" % version


def first_record(page: int) -> UrlRecord:
    """A page whose copy (version 0) was fetched at time 0: the simulator's starting state."""
    first = replace_record(_ANSWER, body=page_body(0))
    record = UrlRecord(url_id=page, url=f"sim://{page}")
    return updated_record(record, first, observe(record, first, SIMHASH_THRESHOLD_BITS))


def simulated_result(
    fetched_at_days: float,
    version: int,
    last_modified_days: float | None = None,
    outcome: Outcome = OK,
) -> FetchResult:
    """What the HTTP layer would return: the page at `version`, or a failed fetch."""
    if outcome != OK:
        return FetchResult(
            fetched_at=fetched_at_days * SECONDS_PER_DAY,
            duration_seconds=0.0,
            outcome=outcome,
            error_kind=_ERROR_KINDS.get(outcome),
        )
    return replace_record(
        _ANSWER,
        fetched_at=fetched_at_days * SECONDS_PER_DAY,
        body=page_body(version),
        last_modified=(
            None if last_modified_days is None else last_modified_days * SECONDS_PER_DAY
        ),
    )


def simulated_fetch(
    record: UrlRecord, result: FetchResult, policy: SchedulePolicy
) -> tuple[UrlRecord, Schedule]:
    """The URL's record after this fetch and its next schedule, exactly as the worker
    computes and commits them (the frontier stores the schedule's estimate with the row)."""
    change = transition(record, result, _HOST, policy, url_filter=EVERY_URL,
                        now=result.fetched_at, rng_value=0.5)
    return change.record, change.schedule
