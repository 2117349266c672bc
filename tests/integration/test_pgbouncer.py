"""The crawler behind Debian's PgBouncer in transaction pooling mode (``CRAWLER_PGBOUNCER``).

PgBouncer runs on loopback in front of the test database with a server pool smaller than the
daemon's client pool, so consecutive transactions of one client land on different server
connections: a named prepared statement, a temporary table created outside the transaction
that uses it, or a session-level advisory lock would break (or leak) here. Through it, the
test seeds URLs with ``crawler seed`` (more than the small-seed path, so the COPY staging table
is used), runs the real daemon against the demo web with a webhook receiver, and checks that
fetches were recorded, events delivered, nothing complained and no lock was left behind, and
that ``crawler db upgrade`` refuses to run through it (migrations need a direct connection).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pwd
import shutil
import signal
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, unquote, urlsplit

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, start_daemon, stop_daemon
from toolcheck import require_tool

from crawler.db import frontier, partitions
from crawler.db.connect import connect, database_url
from crawler.db.frontier import SMALL_SEED
from crawler.db.queries import EngineConnection
from crawler.demo.processes import PoissonProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb
from crawler.settings import Settings

pytestmark = pytest.mark.timeout(60)

SERVER_POOL = 2  # server connections per (database, user): fewer than the daemon's clients
PAGES_PER_SITE = SMALL_SEED // 3 + 5
ADVISORY_LOCKS_HERE = (
    "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' "
    "AND database = (SELECT oid FROM pg_database WHERE datname = current_database())"
)
COMPLAINTS = ("prepared statement", "does not exist", "Traceback", "advisory", "ERROR")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def backend(db_url: str) -> dict[str, str]:
    """host, port, dbname, user (and password) of the test database, as PgBouncer wants them;
    the embedded server listens on a unix socket directory given as ``?host=``."""
    parts = urlsplit(db_url)
    query = parse_qs(parts.query)
    host = parts.hostname or query.get("host", ["127.0.0.1"])[0]
    port = parts.port or int(query.get("port", ["5432"])[0])
    found = {"host": host, "port": str(port), "dbname": parts.path.lstrip("/"),
             "user": unquote(parts.username or "postgres")}
    if parts.password:
        found["password"] = unquote(parts.password)
    return found


def pgbouncer_ini(directory: Path, listen_port: int, target: dict[str, str],
                  round_robin: bool) -> Path:
    connstr = " ".join(f"{key}={value}" for key, value in target.items())
    (directory / "userlist.txt").write_text(f'"{target["user"]}" ""\n')
    ini = directory / "pgbouncer.ini"
    ini.write_text(
        "[databases]\n"
        f"crawler = {connstr}\n"
        "[pgbouncer]\n"
        "listen_addr = 127.0.0.1\n"
        f"listen_port = {listen_port}\n"
        "unix_socket_dir =\n"
        "auth_type = trust\n"
        f"auth_file = {directory / 'userlist.txt'}\n"
        "pool_mode = transaction\n"
        f"default_pool_size = {SERVER_POOL}\n"
        "min_pool_size = 0\n"
        f"server_round_robin = {int(round_robin)}\n"
        "reserve_pool_size = 0\n"
        "max_client_conn = 200\n"
        "ignore_startup_parameters = extra_float_digits,options\n"
        "server_check_delay = 0\n"
    )
    for path in (directory, directory / "userlist.txt", ini):
        path.chmod(0o755 if path.is_dir() else 0o644)
    return ini


def run_as(target: dict[str, str]) -> str:
    """The user PgBouncer drops to when started as root (it refuses to run as root): the
    owner of the server's unix socket (the embedded server runs as a user of its own and its
    socket directory may be closed to others), else nobody."""
    socket_file = Path(target["host"]) / f".s.PGSQL.{target['port']}"
    if target["host"].startswith("/") and socket_file.exists():
        owner = pwd.getpwuid(socket_file.stat().st_uid).pw_name
        if owner != "root":
            return owner
    return "nobody"


@contextlib.asynccontextmanager
async def pgbouncer(
    db_url: str, *, round_robin: bool = False
) -> AsyncIterator[tuple[str, asyncio.subprocess.Process]]:
    """A running PgBouncer in front of ``db_url``; yields its URL and its process.
    ``round_robin``: hand out server connections in turn (not the last used first), so that a
    client's consecutive transactions alternate between them."""
    binary = require_tool("pgbouncer", "pgbouncer")
    directory = Path(tempfile.mkdtemp(prefix="crawler-test-pgbouncer-"))
    port = free_port()
    ini = pgbouncer_ini(directory, port, backend(db_url), round_robin)
    user = ["-u", run_as(backend(db_url))] if os.geteuid() == 0 else []
    proc = await asyncio.create_subprocess_exec(
        binary, *user, str(ini),
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    url = f"postgresql://{backend(db_url)['user']}@127.0.0.1:{port}/crawler"
    try:
        deadline = time.monotonic() + 10
        while True:
            assert proc.returncode is None, (await proc.communicate())[0].decode()
            try:
                conn = await asyncpg.connect(url, statement_cache_size=0, timeout=2)
            except (OSError, asyncpg.PostgresError) as exc:
                if time.monotonic() > deadline:
                    proc.kill()
                    said = (await proc.communicate())[0].decode()
                    pytest.fail(f"pgbouncer never accepted a connection ({exc!r}):\n{said}")
                await asyncio.sleep(0.1)
                continue
            await conn.fetchval("SELECT 1")
            await conn.close()
            break
        yield url, proc
    finally:
        if proc.returncode is None:
            proc.send_signal(signal.SIGINT)  # SIGINT: a fast shutdown
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(proc.wait(), 10)
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        shutil.rmtree(directory, ignore_errors=True)


def demo_sites() -> list[SiteSpec]:
    return [
        SiteSpec(name, tuple(
            PageSpec(f"/p{k}", real=PoissonProcess(rate_per_second=2.0), seed=f"{name}{k}")
            for k in range(PAGES_PER_SITE)
        ))
        for name in ("a", "b", "c")
    ]


async def webhook_receiver(received: list[bytes]) -> tuple[web.AppRunner, str]:
    async def accept(request: web.Request) -> web.Response:
        received.append(await request.read())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/events", accept)
    runner = web.AppRunner(app)
    await runner.setup()
    port = free_port()
    await web.TCPSite(runner, "127.0.0.1", port).start()
    return runner, f"http://127.0.0.1:{port}/events"


async def wait_for(conn: asyncpg.Connection, query: str, at_least: int, seconds: float,
                   daemon: asyncio.subprocess.Process) -> int:
    deadline = time.monotonic() + seconds
    while True:
        value = int(await conn.fetchval(query))
        if value >= at_least:
            return value
        assert daemon.returncode is None, f"the daemon exited with {daemon.returncode}"
        assert time.monotonic() < deadline, f"{query}: {value} < {at_least} after {seconds}s"
        await asyncio.sleep(0.2)


async def test_seed_and_crawl_through_pgbouncer_in_transaction_mode(db_url: str) -> None:
    received: list[bytes] = []
    runner, hook_url = await webhook_receiver(received)
    web_server = DemoWeb(demo_sites(), host_base=60)
    await web_server.start()
    direct = await asyncpg.connect(db_url)
    daemon: asyncio.subprocess.Process | None = None
    output = ""
    try:
        async with pgbouncer(db_url) as (bouncer_url, bouncer):
            env = daemon_env(
                bouncer_url, pgbouncer="true", default_interval="0.7", min_interval="0.5",
                politeness_delay="0.02", poll_interval="0.1", db_pool_size="6",
                webhook_url=hook_url,
            )
            urls = web_server.urls()
            assert len(urls) > SMALL_SEED  # the bulk path: COPY into the staging table
            seed_file = Path(tempfile.mkdtemp(prefix="crawler-test-seed-")) / "seeds.txt"
            seed_file.write_text("\n".join(urls) + "\n")
            seeding = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "crawler", "seed", "--file", str(seed_file), env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            seeded, _ = await asyncio.wait_for(seeding.communicate(), 30)
            shutil.rmtree(seed_file.parent, ignore_errors=True)
            assert seeding.returncode == 0, seeded.decode()
            assert await direct.fetchval("SELECT count(*) FROM urls") == len(urls)

            # Migrations hold a session-level lock: they refuse to run through PgBouncer.
            upgrade = await asyncio.create_subprocess_exec(
                sys.executable, "-m", "crawler", "db", "upgrade", env=env,
                stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
            )
            refused, _ = await asyncio.wait_for(upgrade.communicate(), 30)
            assert upgrade.returncode == 2, refused.decode()
            assert b"needs a direct connection" in refused, refused.decode()

            daemon = await start_daemon(env)
            await wait_for(direct, "SELECT count(*) FROM observations", len(urls) + 20, 20,
                           daemon)
            await wait_for(direct, "SELECT count(*) FROM change_events "
                           "WHERE delivered_at IS NOT NULL", 3, 20, daemon)
            output = await stop_daemon(daemon)
            assert daemon.returncode == 0, output
            complaints = [line for line in output.splitlines()
                          if any(word in line for word in COMPLAINTS)]
            assert not complaints, output
            assert len(received) >= 3
            # The maintenance round and the deliverer took transaction-level locks only: no
            # server connection PgBouncer keeps open still holds one.
            assert bouncer.returncode is None
            assert await direct.fetchval(ADVISORY_LOCKS_HERE) == 0
    finally:
        if daemon is not None and not output:
            output = await stop_daemon(daemon)
        await direct.close()
        await web_server.stop()
        await runner.cleanup()
        print("daemon:", output[-4000:])  # shown by pytest only when the test fails


class HoppingConnection(EngineConnection):
    """After each statement it runs outside a transaction (a COMMIT too), this client moves to
    the other server connection, as it may any time in production: an idle ``hog`` takes the
    server connection that statement ran on (PgBouncer hands out the last released first),
    then the other hog lets go of the other one."""

    hogs: tuple[asyncpg.Connection, asyncpg.Connection] | None = None
    hop_on_fetchval = True

    async def _hop(self) -> None:
        if self.hogs is None or self.is_in_transaction():
            return
        taking, leaving = sorted(self.hogs, key=lambda hog: hog.is_in_transaction())
        await taking.execute("BEGIN; SELECT 1")
        if leaving.is_in_transaction():
            await leaving.execute("ROLLBACK")

    async def execute(self, query: str, *args: Any, timeout: float | None = None) -> str:
        status = await super().execute(query, *args, timeout=timeout)
        await self._hop()
        return status

    async def fetchval(self, query: str, *args: Any, column: int = 0,
                       timeout: float | None = None) -> Any:
        value = await super().fetchval(query, *args, column=column, timeout=timeout)
        if self.hop_on_fetchval:
            await self._hop()
        return value


async def test_session_state_would_not_survive_a_server_switch(db_url: str) -> None:
    """Bulk seeding and partition maintenance, with this client moved to another server
    connection after its first statement: a temporary table created outside the transaction
    that uses it, or a session-level lock taken and released in different transactions,
    would fail or stay behind here."""
    async with pgbouncer(db_url) as (url, _):
        settings = Settings.model_validate({"database_url": url, "pgbouncer": True})
        hogs = (await asyncpg.connect(url, statement_cache_size=0),
                await asyncpg.connect(url, statement_cache_size=0))
        conn = await connect(database_url(settings), connection_class=HoppingConnection)
        assert isinstance(conn, HoppingConnection)
        direct = await asyncpg.connect(db_url)
        try:
            conn.hogs = hogs
            pids = [await conn.fetchval("SELECT pg_backend_pid()") for _ in range(3)]
            assert pids[0] != pids[1] and pids[0] == pids[2]  # it bites

            urls = [(f"http://127.0.0.{2 + k % 3}:8/p{k}", 1.0) for k in range(SMALL_SEED + 50)]
            result = await frontier.seed(conn, urls, time.time(), batch_size=40)
            assert result.inserted == len(urls)
            assert await direct.fetchval("SELECT count(*) FROM urls") == len(urls)
            # Hops after execute only (each COMMIT among them) from here: the maintenance
            # lock (a fetchval) and its release land on different server connections.
            conn.hop_on_fetchval = False
            for _ in range(2):  # the second round finds what the first one made
                done = await partitions.maintain(conn, time.time(), retention_days=0,
                                                 keep_undelivered=False, pgbouncer=True)
                assert not done.skipped
            # The hogs hold one server connection, PgBouncer keeps the other open: neither
            # holds an advisory lock of this database.
            assert await direct.fetchval(ADVISORY_LOCKS_HERE) == 0
        finally:
            await direct.close()
            await conn.close()
            for hog in hogs:
                await hog.close()
