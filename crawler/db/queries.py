"""The named SQL statements of ``queries.sql``, parsed once.

``QUERIES`` is the one mapping every caller reads. On a database with the citus extension,
``crawler.db.connect`` calls ``use_citus(True)`` when it opens the process's pool or
connection, which puts the statements of ``queries_citus.sql`` (the few Citus refuses, written
as Citus runs them, with the same parameters and result columns) in place of the plain ones;
plain PostgreSQL keeps the plain statements. A process talks to one database, so one mapping
per process is enough.
"""

from __future__ import annotations

import re
from importlib import resources
from typing import LiteralString, cast

_HEADER = re.compile(r"^-- name: (\w+)\s*$", re.MULTILINE)


def parse_queries(sql: str) -> dict[str, LiteralString]:
    parts = _HEADER.split(sql)
    queries: dict[str, LiteralString] = {}
    for name, body in zip(parts[1::2], parts[2::2], strict=True):
        if name in queries:
            raise ValueError(f"duplicate query name {name!r}")
        queries[name] = cast(LiteralString, body.strip())
    return queries


def _read(name: str) -> dict[str, LiteralString]:
    return parse_queries(resources.files("crawler.db").joinpath(name).read_text())


PLAIN_QUERIES = _read("queries.sql")
CITUS_QUERIES = _read("queries_citus.sql")
_unknown = CITUS_QUERIES.keys() - PLAIN_QUERIES.keys()
if _unknown:  # a variant replaces a statement, never adds one
    raise ValueError(f"Citus variants of unknown statements: {sorted(_unknown)}")

QUERIES: dict[str, LiteralString] = dict(PLAIN_QUERIES)


# Set by tests: the variants (or the plain statements) whatever the database says.
_forced: bool | None = None


def use_citus(enabled: bool) -> None:
    """Run the Citus variants (``enabled``) or the plain statements, from now on, in this
    process. The mapping is changed in place: modules hold it by reference."""
    if _forced is not None:
        enabled = _forced
    source = CITUS_QUERIES if enabled else PLAIN_QUERIES
    for name in CITUS_QUERIES:
        QUERIES[name] = source[name]


def force_citus(enabled: bool | None) -> None:
    """Tests: run the variants (True) or the plain statements (False) on any database, even
    after a pool's look-up; None goes back to the plain statements and to looking up."""
    global _forced
    _forced = enabled
    use_citus(bool(enabled))


def using_citus() -> bool:
    return all(QUERIES[name] is CITUS_QUERIES[name] for name in CITUS_QUERIES)
