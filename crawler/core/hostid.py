"""A host's key, derived from its origin: the same in every daemon, shard and seeder.

``host_id`` is the distribution key of every host-owned table: all of a host's rows share it,
so a distributed PostgreSQL (Citus) keeps them on one node and a statement about one host goes
to that node. Unlike a sequence, a hash of the origin needs no coordinator: two seeders agree
on a new host's key before the database has seen it.

The key is the first 8 bytes of the SHA-256 of the origin's UTF-8 bytes, read big-endian as a
signed 64-bit integer (BIGINT). Migration 0010_citus defines the same in SQL,
``crawler_host_id(origin)`` and ``crawler_url_host_id(url)``; a test checks that they agree.
Two origins with one key (a 1 in 2^64 chance per pair) are refused when the second is seeded:
they are never merged into one host.
"""

from __future__ import annotations

import hashlib


class HostIdCollision(Exception):
    """Two different origins hash to one host_id: the second cannot be stored."""

    def __init__(self, host_id: int, origin: str, existing: str) -> None:
        self.host_id, self.origin, self.existing = host_id, origin, existing
        super().__init__(
            f"host_id collision: {origin!r} hashes to {host_id}, already the key of "
            f"{existing!r}; refusing to merge two hosts (seed the URLs of {origin!r} "
            "elsewhere or report this)"
        )


def host_id(origin: str) -> int:
    """The key of ``origin`` (scheme://host[:port] of a normalised URL)."""
    digest = hashlib.sha256(origin.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


def origin_of(url: str) -> str:
    """scheme://host[:port] of a normalised URL: the politeness unit, and what is hashed.
    Kept equal to SQL's ``crawler_url_host_id``: the text up to the "/" after the "://"."""
    scheme, rest = url.split("://", 1)
    return f"{scheme}://{rest.split('/', 1)[0]}"


def url_host_id(url: str) -> int:
    """The key of a normalised URL's host."""
    return host_id(origin_of(url))
