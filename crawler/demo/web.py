"""The demo web: serves many ``SiteSpec`` sites over real HTTP on loopback.

Each site is its own host: site k listens on 127.0.0.(host_base + k), all on one shared
port, so its origin is ``http://127.0.0.N:PORT`` (Linux routes all of 127.0.0.0/8 to lo).
Nothing is ever bound outside 127.0.0.0/8.

Time comes from the ``clock`` callable; site time (what the change processes see) is
``clock() - start_time``. Tests pass a fake clock to move time by hand.
"""

from __future__ import annotations

import datetime
import email.utils
import errno
import ipaddress
import json
import math
import socket
import time
from collections import Counter
from collections.abc import Callable, Mapping, Sequence
from types import TracebackType

from aiohttp import web

from crawler.demo.sites import SiteSpec, bfs_window

_MAX_PORT_ATTEMPTS = 20
_SHUTDOWN_TIMEOUT_SECONDS = 2.0


def http_date(timestamp: float) -> str:
    return email.utils.formatdate(timestamp, usegmt=True)


def w3c_date(timestamp: float) -> str:
    """A W3C datetime to the microsecond: a sitemap's date of a change a second apart from a
    fetch must fall on the right side of it."""
    return datetime.datetime.fromtimestamp(timestamp, datetime.UTC).isoformat()


def _parse_http_date(value: str) -> float | None:
    try:
        return email.utils.parsedate_to_datetime(value).timestamp()
    except (TypeError, ValueError, IndexError):
        return None


def _etag_matches(if_none_match: str, etag: str) -> bool:
    """If-None-Match uses the weak comparison (RFC 9110 §13.1.2)."""
    if if_none_match.strip() == "*":
        return True
    candidates = (tag.strip().removeprefix("W/") for tag in if_none_match.split(","))
    return etag.removeprefix("W/") in candidates


class DemoWeb:
    """Serve ``sites`` on loopback; ``origins[k]`` is site k's origin after ``start()``."""

    def __init__(
        self,
        sites: Sequence[SiteSpec],
        *,
        host_base: int = 2,
        port: int = 0,
        clock: Callable[[], float] = time.time,
        start_time: float | None = None,
    ) -> None:
        if not sites:
            raise ValueError("no sites")
        if host_base < 2 or host_base + len(sites) > 254:
            raise ValueError("sites must fit in 127.0.0.2 .. 127.0.0.253")
        self.sites = list(sites)
        self.host_base = host_base
        self.clock = clock
        self.start_time = clock() if start_time is None else start_time
        self.addresses = [f"127.0.0.{host_base + k}" for k in range(len(sites))]
        for address in self.addresses:
            assert ipaddress.ip_address(address) in ipaddress.ip_network("127.0.0.0/8")
        self.port = port
        self.origins: list[str] = []
        self._site_by_address = {address: k for k, address in enumerate(self.addresses)}
        self._visits: Counter[tuple[int, str]] = Counter()
        # Per (site, path): (server time, visit number) of every 200 served, in order, so that
        # the body served at any past time can be rendered again from the ground truth.
        self._served: dict[tuple[int, str], list[tuple[float, int]]] = {}
        self._runner: web.AppRunner | None = None

    @property
    def visits(self) -> Mapping[tuple[int, str], int]:
        """Requests answered so far, per (site index, path); tests compare it with records."""
        return self._visits

    # -- lifecycle ------------------------------------------------------------------------

    async def start(self) -> None:
        """Bind every site (one listening socket per address, one port for all)."""
        sockets = self._bind_all()
        self.port = sockets[0].getsockname()[1]
        self.origins = [f"http://{address}:{self.port}" for address in self.addresses]
        app = web.Application()
        app.router.add_get("/{tail:.*}", self._handle)
        self._runner = web.AppRunner(
            app, access_log=None, handle_signals=False, shutdown_timeout=_SHUTDOWN_TIMEOUT_SECONDS
        )
        await self._runner.setup()
        for sock in sockets:
            await web.SockSite(self._runner, sock).start()

    def _bind_all(self) -> list[socket.socket]:
        """Pre-bound sockets on every address. With port 0 the first address picks a free
        port, and the others must get the same one; on a clash, try another port."""
        for _ in range(_MAX_PORT_ATTEMPTS):
            sockets: list[socket.socket] = []
            port = self.port
            try:
                for address in self.addresses:
                    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
                    sockets.append(sock)
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
                    sock.bind((address, port))
                    port = sock.getsockname()[1]
                return sockets
            except OSError as error:
                for sock in sockets:
                    sock.close()
                if self.port != 0 or error.errno != errno.EADDRINUSE:
                    raise
        raise OSError(errno.EADDRINUSE, "no port free on every demo address")

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def __aenter__(self) -> DemoWeb:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> None:
        await self.stop()

    # -- ground truth -----------------------------------------------------------------------

    def site_seconds(self, at: float | None = None) -> float:
        """Site time (seconds since start) at server-clock time ``at`` (default: now)."""
        return (self.clock() if at is None else at) - self.start_time

    def urls(self, at: float | None = None) -> list[str]:
        """Every page URL that exists at ``at`` (default: now)."""
        t = self.site_seconds(at)
        return [self.origins[k] + page.path for k, site in enumerate(self.sites)
                for page in site.pages if page.exists_at(t)]

    def window(self, site_index: int, n: int, at: float | None = None) -> list[str]:
        """The true page window (first n pages breadth first from the root), as URLs."""
        site = self.sites[site_index]
        paths = bfs_window(site.graph_at(self.site_seconds(at)), site.root_path, n)
        return [self.origins[site_index] + path for path in paths]

    def site_truth(self, site_index: int, at: float | None = None) -> dict[str, object]:
        now = self.clock() if at is None else at
        site = self.sites[site_index]
        return {
            "site": site.name,
            "origin": self.origins[site_index] if self.origins else None,
            "now": now,
            "start_time": self.start_time,
            "pages": site.truth(now - self.start_time, time_origin=self.start_time),
        }

    def truth(self, at: float | None = None) -> list[dict[str, object]]:
        """Per site, what ``GET /__truth__`` answers: every page's processes and its real
        and cosmetic change times so far, on the server clock."""
        now = self.clock() if at is None else at
        return [self.site_truth(k, now) for k in range(len(self.sites))]

    def body_at(self, url: str, at: float) -> bytes | None:
        """The body a client of ``url`` held at server time ``at``: the body of the last 200
        served at or before ``at`` (a 304 since then kept it), rendered again from the ground
        truth. None when the page had not been served by then or was gone (404) at ``at``."""
        index = self.origins.index(url[: url.index("/", len("http://"))])
        path = url[len(self.origins[index]):] or "/"
        site = self.sites[index]
        if not site.exists(path, self.site_seconds(at)):
            return None
        served = [s for s in self._served.get((index, path), []) if s[0] <= at]
        if not served:
            return None
        when, visit = served[-1]
        state = site.state_at(
            path, self.site_seconds(when), origin=self.origins[index],
            other_origin=self._other_origin(index),
            per_request_note=f"Rendered at {math.floor(when)} for visit {visit}.",
        )
        return None if state is None else state.html.encode("utf-8")

    def _past_body(self, index: int, request: web.Request, date: dict[str, str]) -> web.Response:
        """``GET /__body__?path=/p&at=T``: ``body_at`` over HTTP (404 when there was none)."""
        try:
            at = float(request.query["at"])
            url = self.origins[index] + request.query["path"]
        except (KeyError, ValueError):
            return web.Response(status=400, text="want ?path=/p&at=POSIX-seconds", headers=date)
        body = self.body_at(url, at)
        if body is None:
            return web.Response(status=404, text="no body then", headers=date)
        return web.Response(body=body, content_type="text/html", charset="utf-8", headers=date)

    # -- HTTP -------------------------------------------------------------------------------

    def _other_origin(self, site_index: int) -> Callable[[int], str]:
        def other(offset: int) -> str:
            target = (site_index + offset) % len(self.sites)
            if target == site_index:  # no other site: a loopback host where nobody listens
                return f"http://127.0.0.{self.host_base + len(self.sites)}:{self.port}"
            return self.origins[target]

        return other

    def _site_index(self, request: web.Request) -> int:
        sockname = request.transport.get_extra_info("sockname") if request.transport else None
        if sockname is not None and sockname[0] in self._site_by_address:
            return self._site_by_address[sockname[0]]
        host = (request.host or "").rsplit(":", 1)[0]
        if host in self._site_by_address:
            return self._site_by_address[host]
        raise web.HTTPMisdirectedRequest()

    async def _handle(self, request: web.Request) -> web.StreamResponse:
        now = self.clock()
        t = now - self.start_time
        index = self._site_index(request)
        site = self.sites[index]
        date = {"Date": http_date(now)}
        if request.path == "/robots.txt":
            robots = site.robots_txt
            if site.sitemap is not None:
                robots += f"\nSitemap: {self.origins[index]}{site.sitemap.path}\n"
            return web.Response(text=robots, content_type="text/plain", headers=date)
        if site.sitemap is not None and request.path == site.sitemap.path:
            return web.Response(text=self._sitemap_xml(index, t), content_type="application/xml",
                                headers=date)
        if request.path == "/__truth__":
            body = json.dumps(self.site_truth(index, now))
            return web.Response(text=body, content_type="application/json", headers=date)
        if request.path == "/__body__":
            return self._past_body(index, request, date)
        self._visits[(index, request.path)] += 1
        visit = self._visits[(index, request.path)]
        state = site.state_at(
            request.path, t, origin=self.origins[index], other_origin=self._other_origin(index),
            per_request_note=f"Rendered at {math.floor(now)} for visit {visit}.",
        )
        if state is None:
            return web.Response(
                status=404, text="<h1>Not found</h1>", content_type="text/html", headers=date
            )
        last_modified = self.start_time + state.last_modified_seconds
        headers = {**date, "ETag": state.etag, "Last-Modified": http_date(last_modified)}
        if self._not_modified(request, state.etag, last_modified):
            return web.Response(status=304, headers=headers)
        self._served.setdefault((index, request.path), []).append((now, visit))
        return web.Response(
            text=state.html, content_type="text/html", charset="utf-8", headers=headers
        )

    def _sitemap_xml(self, index: int, t: float) -> str:
        """Site ``index``'s sitemap at site time t, dates on the server clock."""
        origin = self.origins[index]
        entries = []
        for path, claimed in self.sites[index].sitemap_dates(t):
            lastmod = ("" if claimed is None
                       else f"<lastmod>{w3c_date(self.start_time + claimed)}</lastmod>")
            entries.append(f"<url><loc>{origin}{path}</loc>{lastmod}</url>")
        return ('<?xml version="1.0" encoding="UTF-8"?>\n'
                '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
                + "\n".join(entries) + "\n</urlset>\n")

    @staticmethod
    def _not_modified(request: web.Request, etag: str, last_modified: float) -> bool:
        """RFC 9110 §13.2.2: If-None-Match, when present, decides; otherwise
        If-Modified-Since, at the one-second resolution of HTTP dates."""
        if_none_match = request.headers.get("If-None-Match")
        if if_none_match is not None:
            return _etag_matches(if_none_match, etag)
        if_modified_since = request.headers.get("If-Modified-Since")
        if if_modified_since is not None:
            since = _parse_http_date(if_modified_since)
            return since is not None and math.floor(last_modified) <= since
        return False
