"""What the collection stores from a server that gzips its pages and answers 304s.

The response record holds the entity as received: Content-Encoding kept, the gzip bytes the
server sent as payload, WARC-Payload-Digest their SHA-1; ``crawler get`` prints the page
decoded. A URL that already has validators but no stored original (the collection enabled
after it was fetched) gets a 304 to its first, conditional fetch: nothing can be stored, so the
validators are dropped and the next fetch is unconditional, stores the full response, and the
304s after it are revisits of that response.
"""

from __future__ import annotations

import asyncio
import gzip
import signal
import subprocess
import sys
import time
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon
from warctools import check_files, check_index_rows

from crawler.db import frontier
from crawler.store.base import payload_digest
from crawler.store.index import load_body, versions
from crawler.store.warc import SUFFIX, read_record

pytestmark = pytest.mark.timeout(120)

PAGE = ("<html><head><title>Encoded</title></head><body>"
        + "".join(f"<p>Paragraph {n} of a page served gzipped.</p>" for n in range(50))
        + "</body></html>").encode()
# mtime 0: the same bytes for every request, as servers that cache their compressed pages send.
WIRE = gzip.compress(PAGE, mtime=0)
ETAG = '"v1"'


class Server:
    """One gzipped page with an ETag; 304 to a matching If-None-Match."""

    def __init__(self) -> None:
        self.requests: list[str | None] = []  # each request's If-None-Match
        self.runner: web.AppRunner | None = None
        self.origin = ""

    async def page(self, request: web.Request) -> web.Response:
        self.requests.append(request.headers.get("If-None-Match"))
        if request.headers.get("If-None-Match") == ETAG:
            return web.Response(status=304, headers={"ETag": ETAG})
        return web.Response(body=WIRE, headers={
            "Content-Type": "text/html; charset=utf-8", "Content-Encoding": "gzip",
            "ETag": ETAG,
        })

    async def start(self) -> None:
        app = web.Application()
        app.router.add_get("/page", self.page)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        port = self.runner.addresses[0][1]
        self.origin = f"http://127.0.0.1:{port}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


async def drain(stream: asyncio.StreamReader, lines: list[bytes]) -> None:
    while line := await stream.readline():
        lines.append(line)


async def test_gzipped_pages_are_stored_as_received_and_a_304_without_original_refetches(
    db_url: str, tmp_path: Path,
) -> None:
    warc_dir = tmp_path / "warc"
    server = Server()
    await server.start()
    url = server.origin + "/page"
    pool = await asyncpg.create_pool(db_url)
    output: list[bytes] = []
    try:
        await frontier.seed(pool, [(url, 1.0)], time.time())
        # Fetched before the collection was enabled: a fingerprint and validators (so the
        # next fetch is conditional), no stored record.
        await pool.execute("UPDATE urls SET etag = $1, last_content_hash = $2, last_status = 200",
                           ETAG, b"\x01" * 16)
        env = daemon_env(db_url, schedule="uniform", default_interval="0.2",
                         min_interval="0.2", politeness_delay="0", poll_interval="0.05",
                         warc_dir=str(warc_dir))
        proc = await start_daemon(env)
        assert proc.stdout is not None
        reader = asyncio.create_task(drain(proc.stdout, output))
        deadline = time.monotonic() + 60
        while await pool.fetchval(
            "SELECT count(*) FROM stored_records WHERE record_type = 'revisit'") < 2:
            assert time.monotonic() < deadline, b"".join(output)[-3000:]
            assert proc.returncode is None, b"".join(output)[-3000:]
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 30)
        await reader
        assert proc.returncode == 0, b"".join(output)[-3000:]
        rows = [dict(r) for r in await pool.fetch(
            "SELECT * FROM stored_records ORDER BY fetched_at")]
        statuses = [r["status"] for r in await pool.fetch(
            "SELECT status FROM observations ORDER BY fetched_at")]
        async with pool.acquire() as conn:
            stored = await versions(conn, url)
    finally:
        await pool.close()
        await server.stop()

    # The first fetch was conditional and got a 304 with nothing to refer to: not stored,
    # and the next request went without validators and got the page in full.
    assert server.requests[0] == ETAG and server.requests[1] is None, server.requests
    assert statuses[:2] == [304, 200], statuses
    assert [r["record_type"] for r in rows][:3] == ["response", "revisit", "revisit"], rows
    assert len(rows) == len(statuses) - 1
    response = rows[0]
    assert all(r["refers_to"] == response["record_id"] for r in rows[1:])

    # The response record holds the gzip bytes as sent; its digest covers them.
    assert response["payload_digest"] == payload_digest(WIRE)
    assert response["payload_bytes"] == len(WIRE)
    record = read_record(warc_dir, response["warc_file"], response["warc_offset"])
    assert record.stored_payload == WIRE
    assert record.payload == PAGE
    assert record.http_header("Content-Encoding") == "gzip"
    assert record.http_header("Content-Length") == str(len(WIRE))
    assert record.http_header("Transfer-Encoding") is None
    check_files(sorted(warc_dir.glob("*" + SUFFIX)))
    check_index_rows(warc_dir, rows)

    # get: the page decoded, for the response and for a revisit's time.
    assert load_body(warc_dir, stored, stored[-1]).payload == PAGE
    got = subprocess.run(
        [sys.executable, "-m", "crawler", "get", url],
        env=daemon_env(db_url, warc_dir=str(warc_dir)), capture_output=True, timeout=60,
        check=False,
    )
    assert got.returncode == 0, got.stderr
    assert got.stdout == PAGE
