"""The named SQL statements of ``queries.sql``, parsed once."""

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


QUERIES = parse_queries(resources.files("crawler.db").joinpath("queries.sql").read_text())
