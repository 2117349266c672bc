"""A misbehaving HTTP server on loopback, built on raw asyncio streams.

aiohttp's own server cannot lie about Content-Length, break a chunked body, omit the status
line or trickle bytes, so this one writes the bytes itself. The fault is chosen by the request
path (see ``HostileServer.routes``); ``robots_mode`` chooses what /robots.txt does.
It records every accepted connection and every request line it read.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import functools
import gzip
import time
import zlib
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlsplit

import brotli
import zstandard

BOMB_DECODED_BYTES = 64 * 1024 * 1024
PAGE = b"<html><head><title>t</title></head><body><p>hello hostile world</p></body></html>"

Handler = Callable[[asyncio.StreamWriter, str, dict[str, list[str]]], Awaitable[None]]


def head(status: str, headers: dict[str, str] | None = None) -> bytes:
    lines = [f"HTTP/1.1 {status}"] + [f"{k}: {v}" for k, v in (headers or {}).items()]
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")


def response(status: str, body: bytes = b"", headers: dict[str, str] | None = None) -> bytes:
    all_headers = {"Content-Length": str(len(body)), "Connection": "close", **(headers or {})}
    return head(status, all_headers) + body


@functools.cache
def bomb(encoding: str) -> bytes:
    """BOMB_DECODED_BYTES of zeros compressed (64 MiB -> 64 KiB gzip, ~200 B brotli)."""
    chunk = b"\0" * (1024 * 1024)
    if encoding in ("gzip", "deflate"):
        wbits = 16 + zlib.MAX_WBITS if encoding == "gzip" else zlib.MAX_WBITS
        compressor = zlib.compressobj(9, zlib.DEFLATED, wbits)
        parts = [compressor.compress(chunk) for _ in range(BOMB_DECODED_BYTES // len(chunk))]
        return b"".join(parts) + compressor.flush()
    zeros = b"\0" * BOMB_DECODED_BYTES
    if encoding == "br":
        return bytes(brotli.compress(zeros, quality=5))
    if encoding == "zstd":
        return zstandard.ZstdCompressor().compress(zeros)
    raise ValueError(encoding)


class RawServer:
    """A raw asyncio TCP server on a loopback address; subclasses write the bytes of each
    connection (``_connection``), which ``stop`` cancels."""

    def __init__(self, host: str = "127.0.0.1") -> None:
        self.host = host
        self.port = 0
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    @property
    def origin(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str) -> str:
        return self.origin + path

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._connection, self.host, 0)
        self.port = self._server.sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for task in list(self._tasks):
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        raise NotImplementedError


class HostileServer(RawServer):
    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.accepted = 0
        self.requests: list[tuple[float, str]] = []
        self.robots_mode = "ok"
        self.robots_body = b"User-agent: *\nDisallow: /private\n"



    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.accepted += 1
        try:
            request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 5.0)
            target = request.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
            self.requests.append((time.monotonic(), target))
            parts = urlsplit(target)
            query = parse_qs(parts.query)
            path = parts.path
            if path == "/robots.txt":
                await self.robots(writer, query)
            else:
                route = path.strip("/").split("/", 1)[0]
                handler: Handler = getattr(self, "route_" + route.replace("-", "_"), self.route_ok)
                await handler(writer, path, query)
            with contextlib.suppress(ConnectionError):
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._tasks.discard(task)

    # --- pages -------------------------------------------------------------------------

    async def route_ok(self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]) -> None:
        w.write(response("200 OK", PAGE, {"Content-Type": "text/html"}))

    async def route_bomb(self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]) -> None:
        encoding = path.rsplit("/", 1)[1]
        body = bomb(encoding)
        headers = {"Content-Type": "text/html", "Content-Encoding": encoding}
        w.write(response("200 OK", body, headers))

    async def route_nested(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        body = zstandard.ZstdCompressor().compress(brotli.compress(gzip.compress(PAGE)))
        headers = {"Content-Type": "text/html", "Content-Encoding": "gzip, br, zstd"}
        w.write(response("200 OK", body, headers))

    async def route_nested_bomb(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        body = brotli.compress(bomb("gzip"))  # the outer layer is small, the inner explodes
        headers = {"Content-Type": "text/html", "Content-Encoding": "gzip, br"}
        w.write(response("200 OK", body, headers))

    async def route_bad_gzip(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        headers = {"Content-Type": "text/html", "Content-Encoding": "gzip"}
        w.write(response("200 OK", b"\x1f\x8b\x08\x00this is not gzip at all", headers))

    async def route_compress(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        headers = {"Content-Type": "text/html", "Content-Encoding": "compress"}
        w.write(response("200 OK", b"whatever", headers))

    async def route_cl_larger(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        w.write(head("200 OK", {"Content-Type": "text/html", "Content-Length": "100000"}) + PAGE)

    async def route_cl_smaller(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        w.write(head("200 OK", {"Content-Type": "text/html", "Content-Length": "10"}) + PAGE)

    async def route_cl_smaller_later(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        """As /cl-smaller, but the bytes past Content-Length come in a later packet."""
        w.write(head("200 OK", {"Content-Type": "text/html", "Content-Length": "10"}) + PAGE[:10])
        await w.drain()
        await asyncio.sleep(0.2)
        w.write(PAGE[10:])

    async def route_chunked_broken(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        headers = {"Content-Type": "text/html", "Transfer-Encoding": "chunked"}
        w.write(head("200 OK", headers) + b"1000\r\n" + PAGE)  # promises 4096 bytes, sends fewer

    async def route_chunked_garbage(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        headers = {"Content-Type": "text/html", "Transfer-Encoding": "chunked"}
        w.write(head("200 OK", headers) + b"10\r\n0123456789abcdef\r\nzz\r\njunk\r\n")

    async def route_endless(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        w.write(head("200 OK", {"Content-Type": "text/html", "Connection": "close"}))
        block = b"<p>" + b"x" * 65530 + b"</p>"
        while True:
            w.write(block)
            await w.drain()

    async def route_silent(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        await asyncio.sleep(3600)

    async def route_trickle(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        """Headers at once, then one body byte every ``interval`` seconds, forever."""
        interval = float(q.get("interval", ["0.5"])[0])
        w.write(head("200 OK", {"Content-Type": "text/html", "Content-Length": "1000000"}))
        while True:
            w.write(b"x")
            await w.drain()
            await asyncio.sleep(interval)

    async def route_trickle_head(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        """The status line and headers themselves, one byte at a time."""
        interval = float(q.get("interval", ["0.3"])[0])
        for byte in response("200 OK", PAGE, {"Content-Type": "text/html"}):
            w.write(bytes([byte]))
            await w.drain()
            await asyncio.sleep(interval)

    async def route_no_status(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        w.write(PAGE)  # HTTP/0.9 style: a body with no status line and no headers

    async def route_garbage_status(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        w.write(b"HTTP/1.1 OK-ish\r\nContent-Length: 3\r\n\r\nabc")

    async def route_close(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        """Accept, read the request, close without a byte."""

    async def route_loop(self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]) -> None:
        w.write(response("302 Found", b"", {"Location": "/loop"}))

    async def route_loop_a(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        w.write(response("301 Moved Permanently", b"", {"Location": "/loop-b"}))

    async def route_loop_b(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        w.write(response("302 Found", b"", {"Location": "/loop-a"}))

    async def route_chain(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        """/chain/N redirects to /chain/N-1; /chain/0 is a page. N hops in all."""
        remaining = int(path.rsplit("/", 1)[1])
        if remaining <= 0:
            await self.route_ok(w, path, q)
        else:
            w.write(response("302 Found", b"", {"Location": f"/chain/{remaining - 1}"}))

    async def route_moved(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        w.write(response("301 Moved Permanently", b"", {"Location": "/ok"}))

    async def route_redirect(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        """/redirect?to=<any URL>: a 302 to exactly that."""
        w.write(response("302 Found", b"", {"Location": q["to"][0]}))

    async def route_status(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        """/status/<code>[?retry_after=<header value>]"""
        code = path.rsplit("/", 1)[1]
        headers = {"Content-Type": "text/html"}
        if "retry_after" in q:
            headers["Retry-After"] = q["retry_after"][0]
        w.write(response(f"{code} Whatever", b"<html>error</html>", headers))

    async def route_invalid_utf8(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        body = b"<html><body><p>caf\xc3 \xff\xfe broken \xe2\x82 bytes</p></body></html>"
        w.write(response("200 OK", body, {"Content-Type": "text/html; charset=utf-8"}))

    async def route_contradictory_charset(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        """Header says UTF-8, meta says Shift_JIS, the bytes are Latin-1; or ?lie=utf-16."""
        body = (
            b'<html><head><meta charset="shift_jis"></head>'
            b"<body><p>na\xefve caf\xe9 \x82\xa0</p></body></html>"
        )
        charset = q.get("lie", ["utf-8"])[0]
        w.write(response("200 OK", body, {"Content-Type": f"text/html; charset={charset}"}))

    async def route_pdf_as_html(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        body = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n1 0 obj << /Type /Catalog >> endobj\n%%EOF\n"
        w.write(response("200 OK", body, {"Content-Type": "text/html; charset=utf-8"}))

    async def route_etag(self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]) -> None:
        w.write(response("200 OK", PAGE, {"Content-Type": "text/html", "ETag": '"v1"'}))

    # --- robots.txt --------------------------------------------------------------------

    async def robots(self, w: asyncio.StreamWriter, q: dict[str, list[str]]) -> None:
        mode = self.robots_mode
        text = {"Content-Type": "text/plain"}
        if mode == "ok":
            w.write(response("200 OK", self.robots_body, text))
        elif mode.startswith("status-"):
            w.write(response(f"{mode.removeprefix('status-')} Whatever", b"error", text))
        elif mode == "timeout":
            await asyncio.sleep(3600)
        elif mode.startswith("redirect-"):  # redirect-N: N hops, then the rules
            w.write(response("302 Found", b"", {"Location": f"/robots-hop/{mode[9:]}"}))
        elif mode == "loop":
            w.write(response("302 Found", b"", {"Location": "/robots.txt"}))
        elif mode == "huge":
            early = b"User-agent: *\nDisallow: /early\n"
            filler = b"# " + b"padding " * 8 + b"\n"
            body = early + filler * (10 * 1024 * 1024 // len(filler)) + b"Disallow: /late\n"
            w.write(response("200 OK", body, text))
        elif mode == "html":
            page = (
                b"<!DOCTYPE html><html><head><title>Error</title></head><body>"
                b"<h1>Oops, something went wrong</h1><p>Disallow nothing</p></body></html>"
            )
            w.write(response("200 OK", page, {"Content-Type": "text/html"}))
        elif mode.startswith("delay-"):
            body = f"User-agent: *\nCrawl-delay: {mode[6:]}\nDisallow: /private\n".encode()
            w.write(response("200 OK", body, text))
        else:
            raise ValueError(mode)

    async def route_robots_hop(
        self, w: asyncio.StreamWriter, path: str, q: dict[str, list[str]]
    ) -> None:
        remaining = int(path.rsplit("/", 1)[1]) - 1
        if remaining <= 0:
            w.write(response("200 OK", b"User-agent: *\nDisallow: /\n", {}))
        else:
            w.write(response("302 Found", b"", {"Location": f"/robots-hop/{remaining}"}))


def http_date(when: float) -> str:
    return email.utils.formatdate(when, usegmt=True)


FORGED = head("200 OK", {"Content-Type": "text/html", "Content-Length": "6"}) + b"FORGED"


class KeepAliveServer(RawServer):
    """An HTTP/1.1 server that keeps connections open and misbehaves on some of them.

    ``served`` lists (connection number, path) per request, so a test can tell which
    requests shared a connection. Paths: ``/robots.txt`` and anything unlisted answer a
    correct page; ``/oversend`` appends a whole forged response (``FORGED``) to a correct
    one in the same write; ``/oversend-late`` sends the forged response later, while the
    connection is idle (``forged_sent`` is set then); ``/break`` declares 1000 bytes, sends
    20 and closes; ``/huge`` sends ``HUGE_BYTES``; ``/bomb`` a gzip bomb with a correct
    Content-Length; ``/silent`` never answers; after ``/drop-next`` the connection's next
    request is read and the connection closed without an answer (a server timing out an idle
    connection just as the client reuses it).
    """

    HUGE_BYTES = 256 * 1024

    def __init__(self, host: str = "127.0.0.1") -> None:
        super().__init__(host)
        self.connections = 0
        self.served: list[tuple[int, str]] = []
        self.forged_sent = asyncio.Event()


    def connection_of(self, path: str) -> int:
        return next(conn for conn, served in reversed(self.served) if served == path)


    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self.connections += 1
        number = self.connections
        drop_next = False
        try:
            while True:
                request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 30.0)
                path = request.split(b"\r\n", 1)[0].split(b" ")[1].decode("latin-1")
                self.served.append((number, path))
                if drop_next or not await self._answer(writer, path):
                    break
                drop_next = path == "/drop-next"
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, TimeoutError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._tasks.discard(task)

    async def _answer(self, w: asyncio.StreamWriter, path: str) -> bool:
        """Write the response to ``path``; False when the connection must end."""
        page = b"<html><body><p>" + path.encode() + b"</p></body></html>"
        html = {"Content-Type": "text/html"}
        if path == "/oversend":
            w.write(head("200 OK", {**html, "Content-Length": str(len(page))}) + page + FORGED)
        elif path == "/oversend-late":
            w.write(head("200 OK", {**html, "Content-Length": str(len(page))}) + page)
            await w.drain()
            await asyncio.sleep(0.05)
            w.write(FORGED)
            await w.drain()
            self.forged_sent.set()
        elif path == "/break":
            w.write(head("200 OK", {**html, "Content-Length": "1000"}) + page[:20])
            return False
        elif path == "/huge":
            body = b"<p>" + b"x" * self.HUGE_BYTES + b"</p>"
            w.write(head("200 OK", {**html, "Content-Length": str(len(body))}) + body)
        elif path == "/bomb":
            body = gzip.compress(b"\0" * (4 * 1024 * 1024), 9)
            headers = {**html, "Content-Encoding": "gzip", "Content-Length": str(len(body))}
            w.write(head("200 OK", headers) + body)
        elif path == "/silent":
            await asyncio.sleep(3600)
        else:
            w.write(head("200 OK", {**html, "Content-Length": str(len(page))}) + page)
        return True
