"""Every capture of a real crawl replays in pywb as the page the server sent at that time.

The real daemon recrawls a loopback server whose pages answer in every way a recrawl meets:
304s to If-None-Match and to If-Modified-Since (one page gzipped), a page that changes on
every fetch, a page that sends the same bytes without validators (digest revisits) and one
that changes every other fetch. pywb 2.10 (``make test`` installs it in .venv-replay, apart
from the crawler: see the ``replay`` extra in pyproject.toml) indexes the WARC files, and
separately the ``crawler export wacz`` package, and serves both on loopback; every capture,
asked for at its own time in ``id_`` mode (the bytes as archived), must come back as the
exact bytes the server sent for the page then, whether it was stored as a response, a digest
revisit or a 304 revisit. ``warcio check`` passes on every file, each request record holds
the request the server received byte for byte, and response headers keep their spelling,
order and duplicates.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import email.utils
import gzip
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import zipfile
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon
from multidict import CIMultiDict
from warcio.archiveiterator import ArchiveIterator
from warcio.timeutils import iso_date_to_timestamp
from warctools import check_files, check_index_rows

from crawler.db import frontier
from crawler.store.warc import (
    NOT_MODIFIED_PROFILE,
    REVISIT_PROFILE,
    SUFFIX,
    read_record,
    stored_path,
)

pytestmark = pytest.mark.timeout(240)

REPO = Path(__file__).resolve().parents[2]
CAPTURES_PER_PAGE = 3
LAST_MODIFIED = email.utils.formatdate(1_700_000_000, usegmt=True)


def pywb_bin() -> Path:
    """The venv holding pywb; skip (fail when CI=true) naming how to install it."""
    venv = Path(os.environ.get("CRAWLER_TEST_PYWB_VENV", REPO / ".venv-replay"))
    if (venv / "bin" / "wayback").exists() and (venv / "bin" / "wb-manager").exists():
        return venv / "bin"
    message = (f"pywb not found in {venv}: `make test` installs it there (pip install "
               "pywb==2.10.0 in a venv of its own; see the replay extra in pyproject.toml)")
    if os.environ.get("CI", "").lower() == "true":
        pytest.fail(message + " [CI=true: missing tools fail]", pytrace=False)
    pytest.skip(message)


def html(title: str, version: int) -> bytes:
    return (f"<html><head><title>{title}</title></head><body>"
            + "".join(f"<p>{title}, version {version}, paragraph {n}.</p>" for n in range(30))
            + "</body></html>").encode()


@dataclass
class Sent:
    """One request as the server received it, and the page it stood for at that moment (the
    bytes a 200 carried or would have carried, Content-Encoding applied)."""

    path: str
    at: float
    status: int
    entity: bytes
    request_head: bytes


class Server:
    """Pages answering as a recrawl meets them; logs every request."""

    def __init__(self) -> None:
        self.log: list[Sent] = []
        self.counts: dict[str, int] = {}
        self.runner: web.AppRunner | None = None
        self.origin = ""
        self.static = html("static", 0)
        self.gzipped = gzip.compress(html("gzipped", 0), mtime=0)

    def _request_head(self, request: web.Request) -> bytes:
        lines = [f"{request.method} {request.raw_path} HTTP/"
                 f"{request.version.major}.{request.version.minor}\r\n".encode()]
        lines += [name + b": " + value + b"\r\n" for name, value in request.raw_headers]
        return b"".join(lines) + b"\r\n"

    def _answer(self, request: web.Request, entity: bytes, response: web.Response
                ) -> web.Response:
        self.log.append(Sent(request.path, time.time(), response.status, entity,
                             self._request_head(request)))
        return response

    async def page(self, request: web.Request) -> web.Response:
        path = request.path
        n = self.counts.get(path, 0)
        self.counts[path] = n + 1
        if path == "/static":  # ETag and Last-Modified: 304s to If-None-Match
            headers = [("ETag", '"s0"'), ("Last-Modified", LAST_MODIFIED),
                       ("Link", "</a>; rel=preload"), ("Link", "</b>; rel=preload"),
                       ("x-lower-case", "kept")]
            if request.headers.get("If-None-Match") == '"s0"':
                return self._answer(request, self.static, web.Response(
                    status=304, headers=_multi([("ETag", '"s0"'),
                                                ("Cache-Control", "max-age=0")])))
            return self._answer(request, self.static, web.Response(
                body=self.static, headers=_multi([*headers,
                                                  ("Content-Type", "text/html")])))
        if path == "/modified":  # Last-Modified alone: 304s to If-Modified-Since
            body = html("modified", 0)
            if request.headers.get("If-Modified-Since") == LAST_MODIFIED:
                return self._answer(request, body, web.Response(status=304))
            return self._answer(request, body, web.Response(
                body=body, content_type="text/html",
                headers={"Last-Modified": LAST_MODIFIED}))
        if path == "/gzipped":  # gzip as sent; 304s refer to the gzip bytes
            if request.headers.get("If-None-Match") == '"g0"':
                return self._answer(request, self.gzipped, web.Response(
                    status=304, headers={"ETag": '"g0"'}))
            return self._answer(request, self.gzipped, web.Response(
                body=self.gzipped, headers={"Content-Type": "text/html",
                                            "Content-Encoding": "gzip", "ETag": '"g0"'}))
        if path == "/changing":  # a new version (and ETag) on every fetch
            body = html("changing", n)
            return self._answer(request, body, web.Response(
                body=body, content_type="text/html", headers={"ETag": f'"c{n}"'}))
        if path == "/same":  # the same bytes, no validators: digest revisits
            body = html("same", 0)
            return self._answer(request, body, web.Response(body=body,
                                                            content_type="text/html"))
        if path == "/flip":  # a new version every other fetch, no validators
            body = html("flip", n // 2)
            return self._answer(request, body, web.Response(body=body,
                                                            content_type="text/html"))
        raise web.HTTPNotFound()

    async def start(self) -> None:
        app = web.Application()
        for path in PATHS:
            app.router.add_get(path, self.page)
        self.runner = web.AppRunner(app, access_log=None)
        await self.runner.setup()
        site = web.TCPSite(self.runner, "127.0.0.1", 0)
        await site.start()
        self.origin = f"http://127.0.0.1:{self.runner.addresses[0][1]}"

    async def stop(self) -> None:
        if self.runner is not None:
            await self.runner.cleanup()


PATHS = ("/static", "/modified", "/gzipped", "/changing", "/same", "/flip")


def _multi(pairs: list[tuple[str, str]]) -> CIMultiDict[str]:
    """Headers in this order, a name twice when given twice."""
    return CIMultiDict(pairs)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def records_at(root: Path, file: str, offset: int, count: int) -> list[object]:
    """The ``count`` records from ``offset`` of ``file``: a capture and those written with it."""
    with stored_path(root, file).open("rb") as stream:
        stream.seek(offset)
        out = []
        for record in ArchiveIterator(stream):
            http = record.http_headers
            out.append((record.rec_type, record.rec_headers,
                        http.to_bytes() if http is not None else b"",
                        record.content_stream().read()))
            if len(out) == count:
                break
        return out


async def crawl(db_url: str, warc_dir: Path, server: Server) -> list[dict[str, object]]:
    """Run the daemon until every page has its captures; the index rows, oldest first."""
    pool = await asyncpg.create_pool(db_url)
    output: list[bytes] = []
    try:
        await frontier.seed(pool, [(server.origin + p, 1.0) for p in PATHS], time.time())
        # Fetches of one URL at least a second apart: pywb keys captures by the second.
        env = daemon_env(db_url, schedule="uniform", default_interval="1.1",
                         min_interval="1.1", politeness_delay="0", poll_interval="0.05",
                         warc_dir=str(warc_dir))
        proc = await start_daemon(env)
        assert proc.stdout is not None

        async def drain(stream: asyncio.StreamReader) -> None:
            while line := await stream.readline():
                output.append(line)

        reader = asyncio.create_task(drain(proc.stdout))
        deadline = time.monotonic() + 120
        while await pool.fetchval(
            "SELECT count(*) FROM (SELECT url_id FROM stored_records GROUP BY url_id "
            "HAVING count(*) >= $1) AS done", CAPTURES_PER_PAGE) < len(PATHS):
            assert time.monotonic() < deadline, b"".join(output)[-3000:]
            assert proc.returncode is None, b"".join(output)[-3000:]
            await asyncio.sleep(0.1)
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 60)
        await reader
        assert proc.returncode == 0, b"".join(output)[-3000:]
        return [dict(r) for r in await pool.fetch(
            "SELECT s.*, u.url FROM stored_records s JOIN urls u ON u.id = s.url_id "
            "ORDER BY s.fetched_at")]
    finally:
        await pool.close()


def run(*args: str | Path, cwd: Path) -> None:
    done = subprocess.run([str(a) for a in args], cwd=cwd, capture_output=True, text=True,
                          timeout=180, check=False)
    assert done.returncode == 0, (args, done.stdout[-3000:], done.stderr[-3000:])


def check_wacz(path: Path, urls: set[str], warc_names: set[str]) -> None:
    """The WACZ layout: every file listed in datapackage.json with its true hash and size,
    the WARC files stored as they are, and a pages list naming each URL once."""
    with zipfile.ZipFile(path) as wacz:
        package = json.loads(wacz.read("datapackage.json"))
        assert package["wacz_version"] == "1.1.1"
        listed = {r["path"]: r for r in package["resources"]}
        assert set(listed) == {*(f"archive/{n}" for n in warc_names), "indexes/index.cdx",
                               "pages/pages.jsonl"}
        for name, resource in listed.items():
            data = wacz.read(name)
            assert resource["hash"] == "sha256:" + hashlib.sha256(data).hexdigest(), name
            assert resource["bytes"] == len(data)
            if name.startswith("archive/"):
                assert wacz.getinfo(name).compress_type == zipfile.ZIP_STORED
        digest = json.loads(wacz.read("datapackage-digest.json"))
        assert digest["hash"] == "sha256:" + hashlib.sha256(
            wacz.read("datapackage.json")).hexdigest()
        pages = [json.loads(line) for line in wacz.read("pages/pages.jsonl").splitlines()]
        assert pages[0]["format"] == "json-pages-1.0"
        assert sorted(p["url"] for p in pages[1:]) == sorted(urls)


async def replay(port: int, collection: str, timestamp: str, url: str
                 ) -> tuple[int, bytes, str | None]:
    # The bytes as archived: no decoding of a Content-Encoding the server applied.
    async with aiohttp.ClientSession(auto_decompress=False) as session, session.get(
        f"http://127.0.0.1:{port}/{collection}/{timestamp}id_/{url}"
    ) as response:
        return (response.status, await response.read(),
                response.headers.get("Content-Encoding"))


async def test_every_capture_replays_in_pywb_as_sent(db_url: str, tmp_path: Path) -> None:
    bin_dir = pywb_bin()
    warc_dir = tmp_path / "warc"
    server = Server()
    await server.start()
    try:
        rows = await crawl(db_url, warc_dir, server)
    finally:
        await server.stop()

    files = sorted(warc_dir.glob("*" + SUFFIX))
    check_files(files)
    check_index_rows(warc_dir, rows)

    # Each capture is the exchange the server logged at that time, in order per page.
    kinds: dict[str, int] = {"response": 0, "digest revisit": 0, "304 revisit": 0}
    expected: list[tuple[dict[str, object], str, bytes]] = []
    for path in PATHS:
        url = server.origin + path
        captures = [r for r in rows if r["url"] == url]
        sent = [s for s in server.log if s.path == path]
        assert len(captures) >= CAPTURES_PER_PAGE and len(sent) >= len(captures), path
        for n, (row, exchange) in enumerate(zip(captures, sent, strict=False)):
            fetched_at = row["fetched_at"].timestamp()  # type: ignore[attr-defined]
            assert fetched_at <= exchange.at, (path, n)
            if n + 1 < len(captures):
                assert exchange.at < captures[n + 1]["fetched_at"].timestamp(), (path, n)  # type: ignore[attr-defined]
            assert row["status"] == exchange.status, (path, n)
            records = records_at(warc_dir, str(row["warc_file"]), int(row["warc_offset"]),  # type: ignore[call-overload]
                                 3 if exchange.status == 304 else 2)
            rec_type, warc_headers, http_head, _ = records[0]  # type: ignore[misc]
            request = records[1]
            # The request record: the request line and headers the server received.
            assert request[0] == "request"  # type: ignore[index]
            assert request[2] == exchange.request_head, (path, n)  # type: ignore[index]
            if rec_type == "response":
                kinds["response"] += 1
            elif exchange.status == 304:
                kinds["304 revisit"] += 1
                assert warc_headers.get_header("WARC-Profile") == NOT_MODIFIED_PROFILE
                assert http_head == b""  # replay serves the original's status and headers
                metadata = records[2]
                assert metadata[0] == "metadata"  # type: ignore[index]
                assert b"ETag" in metadata[3] or path == "/modified"  # type: ignore[index]
            else:
                kinds["digest revisit"] += 1
                assert warc_headers.get_header("WARC-Profile") == REVISIT_PROFILE
            timestamp = iso_date_to_timestamp(warc_headers.get_header("WARC-Date"))
            expected.append((row, timestamp, exchange.entity))
    assert all(count >= 2 for count in kinds.values()), kinds

    # Response headers as received: spelling, order, duplicates.
    static = next(r for r in rows if r["url"] == server.origin + "/static"
                  and r["record_type"] == "response")
    head = read_record(warc_dir, str(static["warc_file"]), int(static["warc_offset"]))  # type: ignore[call-overload]
    names = [name for name, _ in head.http_headers]
    assert names[:5] == ["ETag", "Last-Modified", "Link", "Link", "x-lower-case"], names
    assert [v for k, v in head.http_headers if k == "Link"] == ["</a>; rel=preload",
                                                                "</b>; rel=preload"]

    # pywb: the WARC files as they are, and the WACZ export unpacked.
    pywb_dir = tmp_path / "pywb"
    pywb_dir.mkdir()
    run(bin_dir / "wb-manager", "init", "crawl", cwd=pywb_dir)
    run(bin_dir / "wb-manager", "add", "crawl", *files, cwd=pywb_dir)
    wacz = tmp_path / "collection.wacz"
    exported = subprocess.run(
        [sys.executable, "-m", "crawler", "export", "wacz", "--out", str(wacz)],
        env=daemon_env(db_url, warc_dir=str(warc_dir)), capture_output=True, text=True,
        timeout=120, check=False)
    assert exported.returncode == 0, exported.stderr[-3000:]
    check_wacz(wacz, {server.origin + p for p in PATHS}, {f.name for f in files})
    run(bin_dir / "wb-manager", "init", "wacz", cwd=pywb_dir)
    run(bin_dir / "wb-manager", "add", "--unpack-wacz", "wacz", wacz, cwd=pywb_dir)

    port = free_port()
    wayback = await asyncio.create_subprocess_exec(
        str(bin_dir / "wayback"), "--bind", "127.0.0.1", "--port", str(port),
        "--directory", str(pywb_dir), cwd=pywb_dir,
        stdout=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                async with aiohttp.ClientSession() as session, session.get(
                    f"http://127.0.0.1:{port}/"
                ) as response:
                    if response.status == 200:
                        break
            except aiohttp.ClientConnectionError:
                pass
            assert wayback.returncode is None, "pywb exited"
            assert time.monotonic() < deadline, "pywb did not start"
            await asyncio.sleep(0.1)

        failures = []
        replayed = 0
        for collection in ("crawl", "wacz"):
            for row, timestamp, entity in expected:
                status, body, encoding = await replay(port, collection, timestamp,
                                                      str(row["url"]))
                if status != 200 or body != entity:
                    failures.append((collection, row["url"], row["record_type"],
                                     row["status"], timestamp, status, len(body),
                                     len(entity), encoding))
                replayed += 1
        assert not failures, failures
    finally:
        wayback.send_signal(signal.SIGTERM)
        await asyncio.wait_for(wayback.communicate(), 30)
    print(f"replayed {replayed} captures byte-identical ({kinds} per collection, "
          f"{dt.datetime.now(dt.UTC):%H:%M:%S})")
