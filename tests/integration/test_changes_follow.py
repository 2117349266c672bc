"""`crawler changes --follow` prints events as they are stored, filtered, until Ctrl-C (exit 0)."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sys
import time

import asyncpg
import pytest

from crawler.db import frontier

pytestmark = pytest.mark.timeout(60)

WATCHED = "http://127.0.0.1:1/watched"
OTHER = "http://127.0.0.2:1/other"


async def store(pool: asyncpg.Pool, url: str, kind: str) -> int:
    row = await pool.fetchrow("SELECT id, host_id FROM urls WHERE url = $1", url)
    event_id: int = await pool.fetchval(
        "INSERT INTO change_events (url_id, fetched_at, kind, payload, host_id) "
        "VALUES ($1, clock_timestamp(), $2, $3::jsonb, $4) RETURNING id",
        row["id"], kind, json.dumps({"url": url, "kind": kind, "fetched_at": "t"}),
        row["host_id"],
    )
    return event_id


async def test_follow_prints_new_matching_events_and_exits_0_on_ctrl_c(db_url: str) -> None:
    pool = await asyncpg.create_pool(db_url)
    await frontier.seed(pool, [(WATCHED, 1.0), (OTHER, 1.0)], time.time())
    old = await store(pool, WATCHED, "changed")  # before following: not printed
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "changes", "--follow", "--json",
        "--host", "http://127.0.0.1:1", "--kind", "changed", "--kind", "failing",
        env={**os.environ, "CRAWLER_DATABASE_URL": db_url},
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    assert proc.stdout is not None
    try:
        printed: list[dict[str, object]] = []
        wanted: set[int] = set()
        deadline = time.monotonic() + 30
        # Stored until the follower prints one: it may start reading after the first.
        while not printed:
            assert time.monotonic() < deadline, "nothing followed"
            await store(pool, OTHER, "changed")  # another host: filtered out
            await store(pool, WATCHED, "gone")  # another kind: filtered out
            wanted.add(await store(pool, WATCHED, "changed"))
            try:
                line = await asyncio.wait_for(proc.stdout.readline(), 0.5)
            except TimeoutError:
                continue
            printed.append(json.loads(line))
        last = await store(pool, WATCHED, "failing")
        wanted.add(last)
        while last not in {e["id"] for e in printed}:
            printed.append(json.loads(await asyncio.wait_for(proc.stdout.readline(), 30)))
        proc.send_signal(signal.SIGINT)
        _, err = await asyncio.wait_for(proc.communicate(), 30)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
        await pool.close()
    assert proc.returncode == 0, err.decode()
    ids = [int(e["id"]) for e in printed]  # type: ignore[call-overload]
    assert old not in ids
    assert set(ids) <= wanted and max(wanted) in ids
    assert ids == sorted(ids) and len(ids) == len(set(ids))
    assert {e["kind"] for e in printed} <= {"changed", "failing"}
    assert all(e["url"] == WATCHED for e in printed)
