"""The collection's statements are backed by indexes (EXPLAIN with sequential scans off)."""

from __future__ import annotations

import datetime as dt
import json

import asyncpg
import pytest

from crawler.db.queries import QUERIES

NOW = dt.datetime.now(dt.UTC)
EXPLAINED = {
    "last_stored_response": [1, 7],
    "pending_events": [100, 0],
    "url_versions": ["http://127.0.0.1:1/a"],
    "changes_page": [NOW, 0, 100, None, None, None],
    "mark_event_delivered": [1, "owner", 1],
    "mark_event_failed": [1, NOW, "x", "owner", 1],
    "outbox_summary": [0],
}


@pytest.mark.parametrize("query", sorted(EXPLAINED))
async def test_collection_queries_use_indexes(db_url: str, query: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute("SET enable_seqscan = off")
        rows = await conn.fetch("EXPLAIN " + QUERIES[query], *EXPLAINED[query])
        plan = "\n".join(r[0] for r in rows)
        assert "Seq Scan" not in plan, plan
    finally:
        await conn.close()


@pytest.mark.breaks_invariant(
    "index_rows", reason="its index row names a WARC file that was never written (f.warc.gz)")
async def test_the_collection_rows_alone_write_once(db_url: str) -> None:
    """The transaction path (windowed pages, redirects) runs ``collection_rows`` on its own;
    a retried commit writes nothing twice."""
    from crawler.db import frontier
    from crawler.db.collection import insert_stored_record

    conn = await asyncpg.connect(db_url)
    try:
        await frontier.seed(conn, [("http://127.0.0.1:1/a", 1.0)], NOW.timestamp())
        url_id, host_id = await conn.fetchrow("SELECT id, host_id FROM urls")
        at = NOW.isoformat()
        stored = {"url_id": url_id, "host_id": host_id, "fetched_at": at,
                  "record_type": "response", "status": 200,
                  "warc_file": "f.warc.gz", "warc_offset": 0, "warc_length": 10,
                  "record_id": "<urn:uuid:1>", "payload_digest": "sha1:X", "payload_bytes": 10,
                  "changed": True, "refers_to": None}
        event = {"url_id": url_id, "host_id": host_id, "fetched_at": at, "kind": "changed",
                 "payload": {"url": "http://127.0.0.1:1/a"}}
        params = [json.dumps([stored]), json.dumps([event])]
        for _ in range(2):
            await conn.execute(insert_stored_record(), *params)
        counts = await conn.fetchrow(
            "SELECT (SELECT count(*) FROM stored_records) AS stored, "
            "(SELECT count(*) FROM change_events) AS events"
        )
        assert counts is not None and tuple(counts) == (1, 1)
    finally:
        await conn.close()
