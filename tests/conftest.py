"""Fixtures shared by every suite: a real PostgreSQL, a fresh database per test.

The server is the embedded one (started once per session in a temporary directory) unless
``CRAWLER_TEST_DATABASE_URL`` names another. The schema is migrated once into a template
database; each test gets its own database cloned from it.
"""

from __future__ import annotations

import atexit
import os
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import asyncpg
import pytest

from crawler.db.connect import _run_blocking, embedded_server
from crawler.db.migrate import upgrade_blocking


def _with_database(url: str, name: str) -> str:
    parts = urlsplit(url)
    return urlunsplit(parts._replace(path="/" + name))


async def _admin(url: str, *statements: str) -> None:
    conn = await asyncpg.connect(url)
    try:
        for statement in statements:
            await conn.execute(statement)
    finally:
        await conn.close()


@pytest.fixture(scope="session")
def pg_server_url() -> Iterator[str]:
    """A URL of the test server's maintenance database ('postgres')."""
    configured = os.environ.get("CRAWLER_TEST_DATABASE_URL")
    if configured:
        yield _with_database(configured, "postgres")
        return
    tmp = Path(tempfile.mkdtemp(prefix="crawler-test-pg-"))
    # atexit runs last-registered first: the server's own handler (registered by
    # embedded_server below) stops it and deletes its data, then this removes the parent.
    atexit.register(shutil.rmtree, tmp, True)
    server = embedded_server(tmp, cleanup_mode="delete")
    try:
        yield server.get_uri(database="postgres")
    finally:
        _stop_server(server.get_pid())


def _stop_server(pid: int | None, timeout: float = 60.0) -> None:
    """Stop this session's server now (fast shutdown), not only from the wheel's atexit
    handler, which stops it only when its list of handle pids holds this process alone: a
    leftover pid in that list once left a test server running after the suite."""
    if pid is None:
        return
    try:
        os.kill(pid, signal.SIGINT)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)


@pytest.fixture(scope="session")
def template_db(pg_server_url: str) -> Iterator[str]:
    name = f"crawler_tpl_{os.getpid()}_{uuid.uuid4().hex[:6]}"
    _run_blocking(_admin(pg_server_url, f'CREATE DATABASE "{name}"'))
    upgrade_blocking(_with_database(pg_server_url, name))
    yield name
    _run_blocking(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def db_url(pg_server_url: str, template_db: str) -> Iterator[str]:
    """A fresh, migrated database for one test."""
    name = f"crawler_t_{uuid.uuid4().hex[:12]}"
    _run_blocking(_admin(pg_server_url, f'CREATE DATABASE "{name}" TEMPLATE "{template_db}"'))
    yield _with_database(pg_server_url, name)
    _run_blocking(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture
def empty_db_url(pg_server_url: str) -> Iterator[str]:
    """A fresh database with no schema at all (for migration tests)."""
    name = f"crawler_e_{uuid.uuid4().hex[:12]}"
    _run_blocking(_admin(pg_server_url, f'CREATE DATABASE "{name}"'))
    yield _with_database(pg_server_url, name)
    _run_blocking(_admin(pg_server_url, f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))


@pytest.fixture(params=["plain", "citus"])
def statements(request: pytest.FixtureRequest) -> Iterator[str]:
    """Each test twice: with the plain statements, and with the Citus variants
    (crawler/db/queries_citus.sql) forced on this plain PostgreSQL, whose semantics must be
    the same. Forced in this process only: a daemon started as a subprocess looks the
    extension up for itself (and runs the plain statements here)."""
    from crawler.db.queries import force_citus

    force_citus(request.param == "citus")
    try:
        yield request.param
    finally:
        force_citus(None)
