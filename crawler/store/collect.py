"""The fetch path's side of the collection: store a fetch's record, then its index and event rows.

``Collection.prepare`` runs before the fetch's transaction: it writes the record (flushed to
the OS) and returns a ``CollectionWrite`` that inserts the index row and the change event in
that transaction. Stored: 200s (a response, or a revisit when the payload is byte-identical to
the URL's last stored response), 304s (a revisit) and 404/410s (a response without body).

Redirects: every exchange is a record of its own under the URI actually requested (as Heritrix
and warcio's capture_http write them), so replay never serves a target's content under the URI
that redirected. A permanent redirect stores its 3xx exchange alone, indexed as the URL's
version; its target is a URL of its own. A temporary redirect stores each 3xx exchange, then
the final answer under the final URI, which is the URL's indexed version.

A 304 with no stored original (collection enabled later, or the file archived or deleted)
stores nothing: a revisit would refer to nothing. The URL's validators are dropped instead, so
the next fetch is unconditional and stores the full response.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import json
import logging
import socket
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from crawler.core.bounds import parse_bounded
from crawler.core.events import event_payload
from crawler.core.fingerprint import CONTENT_HASH_BYTES, content_hash, same_content
from crawler.core.model import (
    GONE,
    NOT_MODIFIED,
    OK,
    REDIRECT,
    Exchange,
    FetchResult,
    Observation,
    UrlRecord,
)
from crawler.core.observe import rebased as rebased_record
from crawler.core.region import Region
from crawler.core.textdiff import LineChanges, body_text, line_changes, split_lines
from crawler.core.transition import ChangeKind, Transition
from crawler.db.collection import LastResponse, last_response, register_warc_file, write_rows
from crawler.metrics import CollectionMetrics
from crawler.net.fetch import conditional_headers
from crawler.store.base import (
    RESPONSE,
    REVISIT,
    Capture,
    Original,
    ReadRecord,
    RecordStore,
    StoredRecord,
)
from crawler.store.durable import DurableStore

log = logging.getLogger(__name__)

STORED_OUTCOMES = frozenset({OK, NOT_MODIFIED, GONE})
LAST_RESPONSE_CACHE = 100_000  # URLs whose newest stored response is remembered (~300 B each)
# Characters of extracted text remembered for the URLs fetched last, so that a page that
# changes often is diffed without parsing its previous version again (a text longer than a
# tenth of it is not remembered).
TEXT_CACHE_CHARS = 16_000_000
# A diff that takes longer (a loaded machine) leaves the event without lines rather than hold
# the fetch's host.
DIFF_SECONDS = 10.0


def _at(seconds: float) -> dt.datetime:
    return dt.datetime.fromtimestamp(seconds, dt.UTC)


@dataclass(frozen=True, slots=True)
class CollectionWrite:
    """The rows a fetch adds to the collection, written in the fetch's transaction."""

    url_id: int
    fetched_at: float
    status: int | None
    changed: bool | None
    stored: StoredRecord | None
    refers_to: str | None  # a revisit's original (WARC-Record-ID)
    event_kind: str | None
    event: dict[str, Any] | None
    unconditional: bool = False  # a 304 with no original: drop the validators with the fetch
    host_id: int = 0  # the URL's host: in every key of the collection's rows (Citus shards)

    def adjusted(self, t: Transition) -> Transition:
        """``t``, without validators when the next fetch must be unconditional."""
        if not self.unconditional or (t.record.etag is None and t.record.last_modified is None):
            return t
        return dataclasses.replace(
            t, record=dataclasses.replace(t.record, etag=None, last_modified=None)
        )

    def rows(self) -> tuple[dict[str, Any] | None, dict[str, Any] | None]:
        """The stored_records row and the change_events row (None when there is none)."""
        s = self.stored
        at = _at(self.fetched_at).isoformat()
        stored = None if s is None else {
            "url_id": self.url_id, "host_id": self.host_id, "fetched_at": at,
            "record_type": s.record_type,
            "status": self.status, "warc_file": s.file, "warc_offset": s.offset,
            "warc_length": s.length, "record_id": s.record_id,
            "payload_digest": s.payload_digest, "payload_bytes": s.payload_bytes,
            "changed": self.changed, "refers_to": self.refers_to, "target_uri": s.url,
        }
        event = None if self.event_kind is None else {
            "url_id": self.url_id, "host_id": self.host_id, "fetched_at": at,
            "kind": self.event_kind, "payload": self.event,
        }
        return stored, event

    async def __call__(self, conn: asyncpg.Connection, t: Transition) -> None:
        """An ``ExtraWrite`` of ``crawler.db.record``: one statement in the fetch's transaction."""
        del t  # everything needed was captured when the record was stored (and adjusted)
        await self.write_many(conn, [self])

    @staticmethod
    async def write_many(conn: asyncpg.Connection, writes: Sequence[CollectionWrite]) -> None:
        """Many fetches' rows in one statement (one round trip), as JSON arrays: how
        ``crawler.db.record.write_batch`` writes a batch's collection rows."""
        stored, events = [], []
        for write in writes:
            row, event = write.rows()
            if row is not None:
                stored.append(row)
            if event is not None:
                events.append(event)
        await write_rows(conn, json.dumps(stored), json.dumps(events))


class Collection:
    """Stores fetches through a ``DurableStore``; reads the index through ``pool``. With no
    store (``CRAWLER_STORE_VERSIONS=false``) only change events are written, without lines.

    The newest stored response of recent URLs is remembered, used only while the content hash
    it was stored for is the URL row's (so another daemon's newer version is never missed).
    """

    def __init__(
        self,
        store: DurableStore | None,
        pool: asyncpg.Pool,
        user_agent: str = "",
        metrics: CollectionMetrics | None = None,
    ) -> None:
        self.store = store
        # Where this daemon's files live, registered in ``warc_files`` once per file.
        self.machine = socket.gethostname()
        self._registered: set[str] = set()
        self.pool = pool
        self.user_agent = user_agent
        self.metrics = metrics
        self._last: OrderedDict[int, tuple[bytes | None, LastResponse]] = OrderedDict()
        # url_id -> (content hash, region, extracted text) of its newest fetched version.
        self._texts: OrderedDict[int, tuple[bytes, Region, str]] = OrderedDict()
        self._text_chars = 0

    async def _last_response(self, record: UrlRecord) -> LastResponse | None:
        cached = self._last.get(record.url_id)
        if cached is not None and cached[0] == record.last_content_hash:
            self._last.move_to_end(record.url_id)
            return cached[1]
        found = await last_response(self.pool, record.url_id, record.host_id)
        if found is not None:
            self._remember(record.url_id, record.last_content_hash, found)
        return found

    def _remember(self, url_id: int, content: bytes | None, last: LastResponse) -> None:
        self._last[url_id] = (content, last)
        self._last.move_to_end(url_id)
        while len(self._last) > LAST_RESPONSE_CACHE:
            self._last.popitem(last=False)

    def _remember_text(self, url_id: int, content: bytes | None, region: Region,
                       text: str | None) -> None:
        """The text a fetch extracted, for the diff of the URL's next change."""
        old = self._texts.pop(url_id, None)
        if old is not None:
            self._text_chars -= len(old[2])
        if content is None or text is None or len(text) > TEXT_CACHE_CHARS // 10:
            return
        self._texts[url_id] = (content, region, text)
        self._text_chars += len(text)
        while self._text_chars > TEXT_CACHE_CHARS:
            _, (_, _, evicted) = self._texts.popitem(last=False)
            self._text_chars -= len(evicted)

    def _previous_text(self, record: UrlRecord) -> str | None:
        """The remembered text of the version ``record`` was last fetched with, if it is."""
        cached = self._texts.get(record.url_id)
        if cached is None or record.last_content_hash is None:
            return None
        content, region, text = cached
        return text if content == record.last_content_hash and region == record.region else None

    async def _changes(
        self, t: Transition, capture: Capture, content_type: str | None,
        previous: str | None, old: ReadRecord | None,
    ) -> LineChanges | None:
        """The lines and words a change moved, from this fetch's text and the previous
        version's (remembered, or parsed from its record). Off the event loop: a long page's
        bounded diff is still tens of milliseconds, and a parse of the previous version more."""
        record = t.before
        new_text = t.text

        def compute() -> LineChanges:
            old_raw = previous
            if old_raw is None:
                assert old is not None
                old_raw = body_text(old.payload, old.http_header("Content-Type"),
                                    record.region)[0]
            new_raw = new_text if new_text is not None else body_text(
                capture.payload, content_type, record.region)[0]
            return line_changes(split_lines(old_raw), split_lines(new_raw),
                                numbers=record.exact)

        try:
            return await asyncio.wait_for(asyncio.to_thread(compute), DIFF_SECONDS)
        except Exception as exc:  # the event goes without lines; the version is recorded
            log.warning("no diff for %s: %r", record.url, exc)
            return None

    async def _register(self, stored: Sequence[StoredRecord]) -> None:
        """Each new file these records went to, in ``warc_files`` with this machine and
        directory before any index row naming it commits (so a fleet can say where it is);
        the records counted in the metrics."""
        if self.store is None:
            return
        if self.metrics is not None:
            for one in stored:
                self.metrics.stored(one.record_type, one.length)
        root = getattr(self.store.store, "root", None)
        for name in {one.file for one in stored} - self._registered:
            directory = "" if root is None else str(root.resolve())
            await register_warc_file(self.pool, name, self.machine, directory)
            self._registered.add(name)

    async def rebased(self, record: UrlRecord) -> UrlRecord:
        """``record`` with its fingerprint taken again, under its current rule, from its newest
        stored response (when ``crawler.core.observe.needs_baseline`` says), so that the next
        fetch is compared with that version, not with nothing. ``record`` unchanged when no
        version is stored or the stored one is not the one the fingerprint was taken of."""
        if self.store is None or record.last_content_hash is None:
            return record
        last = await self._last_response(record)
        if last is None:
            return record

        def read(store: RecordStore) -> ReadRecord | None:
            return store.read(last.file, last.offset) if store.holds(last.file) else None

        try:
            old = await self.store.run(read)
        except (OSError, LookupError, ValueError):
            return record  # a damaged or vanished record: the next fetch is a new baseline
        if old is None or not same_content(
            record.last_content_hash, content_hash(old.payload), old.payload
        ):
            return record
        _, page = parse_bounded(
            FetchResult(fetched_at=last.fetched_at, duration_seconds=0.0, outcome=OK,
                        status=old.status, body=old.payload,
                        content_type=old.http_header("Content-Type")),
            region=record.region,
        )
        return record if page is None else rebased_record(record, page)

    async def prepare(self, t: Transition, result: FetchResult) -> CollectionWrite | None:
        """Write the fetch's record (flushed) and return the rows to commit with it."""
        record, obs, change = t.before, t.observation, t.event
        if obs.outcome == REDIRECT and result.redirects:
            return await self._prepare_redirect(t, result)
        if obs.outcome not in STORED_OUTCOMES or result.status is None:
            return None
        original: LastResponse | None = None
        identical = obs.outcome == NOT_MODIFIED or (
            obs.outcome == OK and obs.content_changed is False
        )
        wants_diff = change is not None and change.kind != ChangeKind.GONE and obs.outcome == OK
        if self.store is not None and (identical or wants_diff):
            original = await self._last_response(record)
        stored: StoredRecord | None = None
        lines: LineChanges | None = None
        if self.store is not None and result.redirects:
            await self._write_redirects(record, result.redirects, result.fetched_at)
        if self.store is not None and (obs.outcome != NOT_MODIFIED or original is not None):
            capture = self._capture(record, result, obs)
            previous = self._previous_text(record) if wants_diff else None
            stored, old = await self.store.run(
                lambda store: _write(store, capture, original, identical,
                                     wants_diff and previous is None)
            )
            if wants_diff and stored is not None and (previous is not None or old is not None):
                lines = await self._changes(t, capture, result.content_type, previous, old)
        if obs.outcome == OK:
            self._remember_text(record.url_id, obs.content_hash, record.region, t.text)
        # A 304 with nothing to refer to: fetch it in full next time.
        unconditional = self.store is not None and obs.outcome == NOT_MODIFIED and stored is None
        if unconditional:
            self._last.pop(record.url_id, None)
        if stored is not None:
            await self._register((stored,))
            if stored.record_type == RESPONSE:
                self._remember(record.url_id, obs.content_hash, LastResponse(
                    obs.fetched_at, stored.file, stored.offset, stored.record_id,
                    stored.payload_digest, stored.url,
                ))
        event = None
        if change is not None:
            if self.metrics is not None:
                self.metrics.event_queued(change.kind)
            event = event_payload(
                kind=change.kind, url=change.url,
                # The status of the version the event points at (a redirect's target's).
                fetched_at_iso=_at(change.fetched_at).isoformat(), status=result.status,
                previous_simhash=change.previous_simhash, simhash=change.new_simhash,
                distance=change.distance, lines=lines,
                warc_file=stored.file if stored else None,
                warc_offset=stored.offset if stored else None,
            )
        refers_to = None
        if stored is not None and stored.record_type == REVISIT and original is not None:
            refers_to = original.record_id
        if stored is None and event is None and not unconditional:
            return None
        # The index row's status is its record's: after a temporary redirect, the final one.
        return CollectionWrite(record.url_id, obs.fetched_at, result.status, obs.changed,
                               stored, refers_to, None if change is None else str(change.kind),
                               event, unconditional, record.host_id)

    async def _prepare_redirect(self, t: Transition, result: FetchResult) -> CollectionWrite | None:
        """A permanent redirect: its 3xx exchange, under the URL, is the URL's version now.
        Not a change of the page (no event); the target's content is its own URL's."""
        record, obs = t.before, t.observation
        if self.store is None:
            return None
        hop = result.redirects[0]
        stored = (await self._write_redirects(record, (hop,), result.fetched_at))[0]
        self._last.pop(record.url_id, None)  # the newest stored response is this one now
        return CollectionWrite(record.url_id, obs.fetched_at, hop.status, None, stored, None,
                               None, None, False, record.host_id)

    async def _write_redirects(
        self, record: UrlRecord, hops: tuple[Exchange, ...], fetched_at: float
    ) -> list[StoredRecord]:
        """Each redirect exchange as a response (and request) record under its own URI."""
        assert self.store is not None
        captures = [
            self._hop_capture(record, hop, n == 0, fetched_at) for n, hop in enumerate(hops)
        ]
        stored = await self.store.run(lambda store: [store.write_response(c) for c in captures])
        await self._register(stored)
        return stored

    def _request_headers(self, record: UrlRecord, first: bool) -> tuple[tuple[str, str], ...]:
        """The headers a request carried: validators go only with the URL's own request."""
        request_headers = tuple(conditional_headers(record).items()) if first else ()
        if self.user_agent:
            request_headers = (("User-Agent", self.user_agent), *request_headers)
        return request_headers

    def _hop_capture(
        self, record: UrlRecord, hop: Exchange, first: bool, fetched_at: float
    ) -> Capture:
        return Capture(
            url=hop.url, fetched_at=fetched_at, status=hop.status,
            reason=hop.reason, response_headers=hop.headers, payload=hop.body,
            request_headers=hop.request_headers or self._request_headers(record, first),
            truncated=hop.truncated, wire_payload=hop.wire_body,
            request_target=hop.request_target, http_version=hop.http_version,
        )

    def _capture(self, record: UrlRecord, result: FetchResult, obs: Observation) -> Capture:
        assert result.status is not None
        # The observation's content hash is the SHA-1 of the body it was taken of: when the
        # record stores that body as it is (no Content-Encoding kept), it is the payload digest.
        sha1 = obs.content_hash if (
            obs.outcome == OK and result.wire_body is None
            and obs.size_bytes == len(result.body)
            and obs.content_hash is not None and len(obs.content_hash) == CONTENT_HASH_BYTES
        ) else None
        return Capture(
            url=result.final_url or record.url, fetched_at=result.fetched_at,
            status=result.status,
            reason=result.reason, response_headers=result.headers, payload=result.body,
            # As sent, from the fetch; rebuilt only for a result that did not record them.
            request_headers=result.request_headers
            or self._request_headers(record, not result.redirects),
            request_target=result.request_target, http_version=result.http_version,
            truncated=result.truncated, body_read=result.outcome == OK,
            wire_payload=result.wire_body, payload_sha1=sha1,
        )


def _write(
    store: RecordStore,
    capture: Capture,
    original: LastResponse | None,
    identical: bool,
    read_original: bool,
) -> tuple[StoredRecord | None, ReadRecord | None]:
    """A revisit or a response, and (with ``read_original``, for a diff) the original's record
    when it can be read. Nothing for a 304 whose original is not (or no longer) in the store."""
    if original is not None and not store.holds(original.file):
        original = None  # archived or deleted: nothing to refer to or diff against
    if identical and original is not None and (
        capture.status == 304 or capture.payload_digest() == original.payload_digest
    ):
        # The URI the original was stored under: after a temporary redirect whose target
        # moved, not this capture's. Unknown for a row indexed without it: this one's.
        return store.write_revisit(capture, Original(
            original.url or capture.url, original.fetched_at, original.record_id,
            original.payload_digest,
        )), None
    if capture.status == 304:
        return None, None
    stored = store.write_response(capture)
    if not read_original or original is None:
        return stored, None
    try:
        return stored, store.read(original.file, original.offset)
    except (OSError, ValueError) as exc:
        # A damaged or vanished earlier version costs the event its lines, never the
        # new version its record (``crawler verify`` finds and marks the damage).
        log.warning("no diff for %s: its previous version cannot be read (%s)",
                    capture.url, exc)
        note = getattr(store, "note_unreadable", None)
        if note is not None:  # marked damaged in the index by the daemon's storage task
            note(original.file, original.offset, exc)
        return stored, None
