"""What the storage fault tests share: a test web that logs every request, the real daemon
with its output drained, its /readyz and /metrics, `crawler status`, and the file-system
faults (a tiny tmpfs, a read-only bind mount)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
from aiohttp import web
from daemon import start_daemon
from toolcheck import missing, require_tool


@dataclass
class LoggedRequest:
    origin: str
    path: str
    at: float  # monotonic arrival
    conditional: bool  # carried If-None-Match or If-Modified-Since


@dataclass
class LoggingWeb:
    """``hosts`` origins (a port each) of ``pages`` pages: ``/c<i>`` changes at every request
    (a new response each fetch), ``/s<i>`` never does and answers 304 to its ETag (revisits).
    Every request is logged."""

    hosts: int = 3
    pages: int = 3
    log: list[LoggedRequest] = field(default_factory=list)
    origins: list[str] = field(default_factory=list)
    _runners: list[web.AppRunner] = field(default_factory=list)
    _served: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        origin = f"http://{request.host}"
        conditional = "If-None-Match" in request.headers or \
            "If-Modified-Since" in request.headers
        self.log.append(LoggedRequest(origin, request.path, time.monotonic(), conditional))
        self._served += 1
        path = request.path
        if path == "/robots.txt":
            return web.Response(text="User-agent: *\nAllow: /\n")
        if path.startswith("/s"):
            etag = f'"{path[1:]}-v1"'
            if request.headers.get("If-None-Match") == etag:
                return web.Response(status=304, headers={"ETag": etag})
            body = f"<html><body><h1>static {path}</h1>" + "<p>same words</p>" * 40
            return web.Response(text=body + "</body></html>", content_type="text/html",
                                headers={"ETag": etag})
        body = (f"<html><body><h1>page {path}</h1><p>visit {self._served} "
                f"{os.urandom(6).hex()}</p>" + f"<p>{os.urandom(200).hex()}</p>" * 4)
        return web.Response(text=body + "</body></html>", content_type="text/html")

    async def start(self) -> None:
        for _ in range(self.hosts):
            app = web.Application()
            app.router.add_get("/{tail:.*}", self.handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
            self._runners.append(runner)
            self.origins.append(f"http://127.0.0.1:{port}")

    async def stop(self) -> None:
        for runner in self._runners:
            await runner.cleanup()

    def urls(self) -> list[str]:
        return [f"{o}/{kind}{i}" for o in self.origins for kind in ("c", "s")
                for i in range(self.pages)]

    def arrivals(self) -> list[tuple[str, float]]:
        return [(r.origin, r.at) for r in self.log]


class RunningDaemon:
    """`python -m crawler run` with its output kept (drained, so it never blocks on it)."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self.lines: list[str] = []
        self.port: int | None = None
        self._started = asyncio.Event()
        self._reader = asyncio.create_task(self._read())

    async def _read(self) -> None:
        assert self.proc.stdout is not None
        while line := await self.proc.stdout.readline():
            text = line.decode(errors="replace").rstrip()
            self.lines.append(text)
            found = re.search(r"metrics at http://[^:]+:(\d+)/metrics", text)
            if found:
                self.port = int(found.group(1))
                self._started.set()
        self._started.set()

    @classmethod
    async def start(cls, env: dict[str, str]) -> RunningDaemon:
        daemon = cls(await start_daemon(env))
        await asyncio.wait_for(daemon._started.wait(), 90)
        assert daemon.port is not None, "\n".join(daemon.lines[-30:])
        return daemon

    async def get(self, path: str) -> tuple[int, str]:
        async with aiohttp.ClientSession() as session, \
                session.get(f"http://127.0.0.1:{self.port}{path}") as response:
            return response.status, await response.text()

    async def stop(self, timeout: float = 60.0) -> str:
        """SIGTERM (if it still runs), wait for the exit, and return what it printed."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(self.proc.wait(), timeout)
        await asyncio.wait_for(self._reader, timeout)
        return "\n".join(self.lines)

    def output(self) -> str:
        return "\n".join(self.lines)


async def poll(check: Callable[[], Awaitable[bool]], what: str, seconds: float) -> float:
    """Poll ``check`` until it holds; the seconds it took. Fails naming ``what``."""
    started = time.monotonic()
    while not await check():
        assert time.monotonic() - started < seconds, f"timed out ({seconds} s) waiting for {what}"
        await asyncio.sleep(0.05)
    return time.monotonic() - started


def crawler_cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


def metric(text: str, name: str) -> float | None:
    """The value of the series ``name`` (with its labels, as exposed) in a /metrics page."""
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[-1])
    return None


def _mount(*args: str) -> None:
    require_tool("mount", "mount")
    done = subprocess.run(["mount", *args], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        missing(f"mount {' '.join(args)} failed ({done.stderr.strip()}; needs root or "
                "CAP_SYS_ADMIN)", "mount")


def _umount(path: Path) -> None:
    subprocess.run(["umount", "-l", str(path)], capture_output=True, check=False)


@contextlib.contextmanager
def tiny_tmpfs(path: Path, size_bytes: int) -> Iterator[Path]:
    """A tmpfs of ``size_bytes`` mounted at ``path`` for the block."""
    path.mkdir(parents=True, exist_ok=True)
    _mount("-t", "tmpfs", "-o", f"size={size_bytes}", "tmpfs", str(path))
    try:
        yield path
    finally:
        _umount(path)


def fill(directory: Path) -> Path:
    """Fill the file system of ``directory`` to the last byte; the filler file."""
    filler = directory / "filler"
    with filler.open("wb", buffering=0) as out:
        chunk = b"\0" * 65536
        while True:
            try:
                out.write(chunk)
            except OSError:
                break
        while True:
            try:
                out.write(b"\0")
            except OSError:
                break
    return filler


@contextlib.contextmanager
def read_only(directory: Path) -> Iterator[None]:
    """``directory`` read-only (a read-only bind mount over it: root ignores permission
    bits) for the block."""
    _mount("--bind", str(directory), str(directory))
    try:
        _mount("-o", "remount,bind,ro", str(directory))
        yield
    finally:
        _umount(directory)


@contextlib.asynccontextmanager
async def logging_web(hosts: int = 3, pages: int = 3) -> AsyncIterator[LoggingWeb]:
    web_ = LoggingWeb(hosts, pages)
    await web_.start()
    try:
        yield web_
    finally:
        await web_.stop()
