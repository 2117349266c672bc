"""An IndexNow ping's effect in PostgreSQL: its known URLs made due, each with a hint, as far
as the host's pings proved true (``hint_trust``)."""

from __future__ import annotations

from collections.abc import Sequence

import asyncpg

from crawler.core.hostid import url_host_id
from crawler.core.indexnow import HINT_SOURCE
from crawler.db.frontier import to_datetime
from crawler.db.hints import ping_parameters, refresh_due
from crawler.db.queries import QUERIES


async def take_ping(conn: asyncpg.Connection, urls: Sequence[str], due: float) -> int:
    """The known URLs of ``urls`` due at ``due`` (if not sooner, as far as their host's pings
    are trusted), each with a hint, and their hosts due by then too; how many URLs were made
    due. Unknown URLs are skipped. The hosts are locked first, in id order, as the fetch loop's
    writes lock a host before its URLs (no deadlock). Then the hosts' due times are recomputed
    (``refresh_due``)."""
    url_hosts = [url_host_id(url) for url in urls]
    hosts = sorted(set(url_hosts))
    async with conn.transaction():
        await conn.execute(QUERIES["indexnow_lock_hosts"], hosts)
        made_due = int(await conn.fetchval(
            QUERIES["indexnow_pinged"], list(urls), url_hosts, to_datetime(due), HINT_SOURCE,
            hosts, *ping_parameters(),
        ))
    await refresh_due(conn, set(hosts))
    return made_due
