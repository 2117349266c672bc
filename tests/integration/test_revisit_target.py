"""A revisit names the URI its original response was stored under, not the capture's.

After a temporary redirect the record is stored under the redirect's target; when the target
moves and the content stays the same, the revisit's capture URI is the new target while its
original was stored under the old one. Replay tools (pywb, warcio-based ones) resolve a
revisit by WARC-Refers-To-Target-URI and WARC-Refers-To-Date: naming the capture's URI there
points at a record that does not exist.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Any

import asyncpg
import pytest
from aiohttp import web
from inprocess import NullEvents, quick_settings, serve_loopback, wait_for
from warcio.archiveiterator import ArchiveIterator
from warctools import check_files, check_index_rows

from crawler.daemon.worker import Worker
from crawler.db import frontier
from crawler.net.fetch import new_session
from crawler.net.ssrf import AddressPolicy
from crawler.settings import default_settings
from crawler.store.base import REVISIT, Capture
from crawler.store.collect import Collection, LastResponse, _write
from crawler.store.durable import DurableStore
from crawler.store.warc import SUFFIX, WarcStore, warc_date

pytestmark = pytest.mark.timeout(120)

# Generous: a robots.txt that times out on a loaded machine backs the host off, and the
# test would wait for fetches that never come.
LIMITS = default_settings(connect_timeout=5.0, first_byte_timeout=10.0, total_timeout=20.0)
SAME = b"<html><body><p>the same words</p></body></html>"
OTHER = b"<html><body><p>other words altogether, a real change of the page</p></body></html>"
# Per fetch of /moving: where its 302 leads, and what that target answers.
FETCHES = [("/a.html", SAME), ("/b.html", SAME), ("/c.html", OTHER), ("/a.html", OTHER)]


def capture(url: str, at: float, payload: bytes = SAME) -> Capture:
    return Capture(url=url, fetched_at=at, status=200, reason="OK", payload=payload,
                   response_headers=(("Content-Type", "text/html"),))


def test_a_revisit_names_its_originals_uri(tmp_path: Path) -> None:
    store = WarcStore(tmp_path, max_bytes=1 << 20, writer_name="t")
    first = store.write_response(capture("http://127.0.0.1:9/a.html", 1_800_000_000.0))
    assert first.url == "http://127.0.0.1:9/a.html"
    for known, named in (("http://127.0.0.1:9/a.html", "http://127.0.0.1:9/a.html"),
                         # Indexed before 0017: the URI is unknown, the capture's is named.
                         (None, "http://127.0.0.1:9/b.html")):
        original = LastResponse(1_800_000_000.0, first.file, first.offset, first.record_id,
                                first.payload_digest, known)
        stored, lines = _write(store, capture("http://127.0.0.1:9/b.html", 1_800_000_100.0),
                               original, True, False)
        assert stored is not None and lines is None and stored.record_type == REVISIT
        assert stored.url == "http://127.0.0.1:9/b.html"
        record = store.read(stored.file, stored.offset)
        assert record.warc_header("WARC-Target-URI") == "http://127.0.0.1:9/b.html"
        assert record.warc_header("WARC-Refers-To") == first.record_id
        assert record.warc_header("WARC-Refers-To-Target-URI") == named
        assert record.warc_header("WARC-Refers-To-Date") == warc_date(1_800_000_000.0)
    store.close()
    check_files(sorted(tmp_path.glob("*" + SUFFIX)))


def warc_records(warc_dir: Path) -> list[dict[str, Any]]:
    """Every response and revisit record: its type and WARC headers."""
    found = []
    for path in sorted(warc_dir.glob("*" + SUFFIX)):
        with path.open("rb") as stream:
            for record in ArchiveIterator(stream):
                if record.rec_type in ("response", "revisit"):
                    found.append({"type": record.rec_type,
                                  **dict(record.rec_headers.headers)})
    return found


async def test_a_revisit_after_a_moved_redirect_refers_to_the_uri_stored(
    db_url: str, tmp_path: Path
) -> None:
    """/moving 302s to /a.html, then to /b.html (the same bytes: a revisit of the /a.html
    record, looked up in the index by a fresh daemon), then to /c.html (other bytes), then to
    /a.html (those bytes again: a revisit of /c.html, remembered by the daemon)."""
    fetches: list[int] = [0]

    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        location, body = FETCHES[fetches[0]]
        if request.path == "/moving":
            return web.Response(status=302, headers={"Location": location})
        if request.path != location:
            return web.Response(status=404)
        return web.Response(body=body, content_type="text/html")

    async with serve_loopback(handle) as origin:
        warc_dir = tmp_path / "warc"
        pool = await asyncpg.create_pool(db_url, min_size=1, max_size=4)
        session = new_session("testbot/1.0", address_policy=AddressPolicy(["127.0.0.0/8"]))
        config = quick_settings(LIMITS, concurrency=1)

        async def fetch(collection: Collection, n: int) -> None:
            """Fetch /moving once more (the n-th time), through ``collection``."""
            fetches[0] = n - 1
            await pool.execute("UPDATE urls SET next_fetch_at = now() - interval '1 second'")
            await pool.execute("UPDATE hosts SET next_due_at = now() - interval '1 second', "
                               "next_request_at = now() - interval '1 second'")
            worker = Worker(config, "revisit-test", pool, session, NullEvents(), collection)  # type: ignore[arg-type]
            task = asyncio.create_task(worker.run())

            async def fetched() -> bool:
                return await pool.fetchval(
                    "SELECT count(*) FROM observations o JOIN urls u ON u.id = o.url_id "
                    "WHERE u.url = $1", origin + "/moving") == n

            try:
                await wait_for(fetched, f"fetch {n} of /moving")
            finally:
                worker.stop()
                await task
                await asyncio.gather(*worker.host_tasks, return_exceptions=True)

        stores = [DurableStore(WarcStore(warc_dir, max_bytes=1 << 20, writer_name=name))
                  for name in ("first", "second")]
        try:
            await frontier.seed(pool, [(origin + "/moving", 1.0)], time.time() - 1)
            await fetch(Collection(stores[0], pool, "testbot/1.0"), 1)
            # A fresh daemon: the original comes from the index, not from memory.
            again = Collection(stores[1], pool, "testbot/1.0")
            for n in (2, 3, 4):
                await fetch(again, n)
            rows = [dict(r) for r in await pool.fetch(
                "SELECT s.* FROM stored_records s JOIN urls u ON u.id = s.url_id "
                "WHERE u.url = $1 ORDER BY s.fetched_at", origin + "/moving")]
        finally:
            for store in stores:
                await store.close()
            await session.close()
            await pool.close()

        check_files(sorted(warc_dir.glob("*" + SUFFIX)))
        check_index_rows(warc_dir, rows)
        assert [(r["record_type"], r["target_uri"]) for r in rows] == [
            ("response", origin + "/a.html"), ("revisit", origin + "/b.html"),
            ("response", origin + "/c.html"), ("revisit", origin + "/a.html")]
        records = warc_records(warc_dir)
        by_id = {r["WARC-Record-ID"]: r for r in records}
        revisits = [r for r in records if r["type"] == "revisit"]
        assert [r["WARC-Target-URI"] for r in revisits] == [origin + "/b.html", origin + "/a.html"]
        for revisit, original_row in zip(revisits, (rows[0], rows[2]), strict=True):
            assert revisit["WARC-Refers-To"] == original_row["record_id"]
            original = by_id[revisit["WARC-Refers-To"]]
            assert original["type"] == "response"
            assert revisit["WARC-Refers-To-Target-URI"] == original["WARC-Target-URI"] \
                == original_row["target_uri"]
            assert revisit["WARC-Refers-To-Date"] == original["WARC-Date"]
            # What a replay tool looks up: one response under that URI at that date.
            assert [r for r in records if r["type"] == "response"
                    and r["WARC-Target-URI"] == revisit["WARC-Refers-To-Target-URI"]
                    and r["WARC-Date"] == revisit["WARC-Refers-To-Date"]] == [original]
