"""A daemon whose fetch loop dies exits non-zero (1), saying why, so that its supervisor
(systemd, Kubernetes) restarts it. The loop is killed by a non-transient database error: the
hosts table renamed under it."""

from __future__ import annotations

import asyncio

import asyncpg
import pytest
from daemon import daemon_env, start_daemon

pytestmark = pytest.mark.timeout(180)


async def test_a_dead_fetch_loop_exits_1(db_url: str) -> None:
    proc = await start_daemon(daemon_env(db_url, poll_interval="0.1", schedule="uniform"))
    assert proc.stdout is not None
    seen = []
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 120)).decode()
        assert line, "".join(seen)
        seen.append(line)
        if "metrics at http://" in line:
            break
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute("ALTER TABLE hosts RENAME TO hosts_gone")
        out, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        await conn.execute("ALTER TABLE IF EXISTS hosts_gone RENAME TO hosts")
        await conn.close()
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    log = "".join(seen) + out.decode()
    assert proc.returncode == 1, log[-3000:]
    assert "the fetch loop died" in log, log[-3000:]
    assert "stopped after" in log, log[-3000:]  # it shut down in order, not by a crash
