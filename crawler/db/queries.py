"""The named SQL statements of ``queries.sql``, parsed once, and their Citus variants.

``QUERIES`` holds the statements both engines run as written. A few statements Citus refuses
have a variant in ``queries_citus.sql`` (``VARIED``: same name, parameters and result
columns). ``crawler.db.connect`` opens every product connection as an ``EngineConnection``
holding the statement set of its database, and the db layer reads a varied statement through
``statements(conn)`` or ``fetch``/``fetchval`` here. Plain PostgreSQL keeps statements of its
own because the variants' one-host-per-statement locking costs it more.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import fields
from functools import cache
from importlib import resources
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, LiteralString, TypeVar, cast

import asyncpg

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

Row = TypeVar("Row", bound="DataclassInstance")

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def parse_queries(sql: str) -> dict[str, LiteralString]:
    parts = _HEADER.split(sql)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"duplicate query name {name!r}")
        queries[name] = cast(LiteralString, body.strip())
    return queries


def _read(name: str) -> Mapping[str, LiteralString]:
    return MappingProxyType(parse_queries(resources.files("crawler.db").joinpath(name).read_text()))


PLAIN_QUERIES = _read("queries.sql")
CITUS_QUERIES = _read("queries_citus.sql")
_unknown = CITUS_QUERIES.keys() - PLAIN_QUERIES.keys()
if _unknown:  # a variant replaces a statement, never adds one
    raise ValueError(f"Citus variants of unknown statements: {sorted(_unknown)}")

VARIED = frozenset(CITUS_QUERIES)


class _Unvaried(Mapping[str, LiteralString]):
    """The statements both engines run as written. A statement of VARIED is not one of them:
    asked for, it says where it is read (a KeyError, not the plain text run on Citus)."""

    def __init__(self, every: Mapping[str, LiteralString]) -> None:
        self._every = every

    def __getitem__(self, name: str) -> LiteralString:
        if name in VARIED:
            raise KeyError(f"{name!r} has a Citus variant: run it through "
                           "crawler.db.queries.fetch/fetchval, or statements(conn)")
        return self._every[name]

    def __iter__(self) -> Iterator[str]:
        return (name for name in self._every if name not in VARIED)

    def __len__(self) -> int:
        return len(self._every) - len(VARIED)


QUERIES: Mapping[str, LiteralString] = _Unvaried(PLAIN_QUERIES)
# The statement set of a database with the citus extension.
CITUS_STATEMENTS: Mapping[str, LiteralString] = MappingProxyType({**PLAIN_QUERIES, **CITUS_QUERIES})


class EngineConnection(asyncpg.Connection):  # type: ignore[misc]
    """A connection holding the statement set its database runs (``crawler.db.connect``)."""

    statements: Mapping[str, LiteralString] = PLAIN_QUERIES


# Tests only: one statement set whatever the connection (``force_citus``).
_forced: Mapping[str, LiteralString] | None = None


def force_citus(enabled: bool | None) -> None:
    """Tests: run the variants (True) or the plain statements (False) on any connection of
    this process, whatever its database; None: each connection's own set again."""
    global _forced
    _forced = None if enabled is None else CITUS_STATEMENTS if enabled else PLAIN_QUERIES


def statements(conn: asyncpg.Connection) -> Mapping[str, LiteralString]:
    """The statement set ``conn`` runs: its own as opened (a pool's connection forwards to
    it), the plain one for a connection opened otherwise. A pool has no set of its own: its
    connections have (``fetch`` and ``fetchval`` take either)."""
    if _forced is not None:
        return _forced
    if isinstance(conn, asyncpg.Pool):
        raise TypeError("a pool's statements are its connections': acquire one")
    found: Mapping[str, LiteralString] = getattr(conn, "statements", PLAIN_QUERIES)
    return found


async def fetch(
    db: asyncpg.Connection | asyncpg.Pool, name: str, *args: Any
) -> list[asyncpg.Record]:
    """The rows of statement ``name`` as ``db``'s database runs it (a pool: on one of its
    connections, as ``Pool.fetch`` runs a statement)."""
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as conn:
            return await conn.fetch(statements(conn)[name], *args)  # type: ignore[no-any-return]
    return await db.fetch(statements(db)[name], *args)  # type: ignore[no-any-return]


async def fetchval(db: asyncpg.Connection | asyncpg.Pool, name: str, *args: Any) -> Any:
    """The first value of statement ``name`` as ``db``'s database runs it (as ``fetch``)."""
    if isinstance(db, asyncpg.Pool):
        async with db.acquire() as conn:
            return await conn.fetchval(statements(conn)[name], *args)
    return await db.fetchval(statements(db)[name], *args)


@cache
def _field_names(cls: type[DataclassInstance]) -> tuple[str, ...]:
    return tuple(f.name for f in fields(cls))


def row_as(cls: type[Row], row: asyncpg.Record) -> Row:
    """A ``cls`` dataclass of the row's columns named as its fields (an export builds
    millions: the names are read from the class once)."""
    return cls(**{name: row[name] for name in _field_names(cls)})
