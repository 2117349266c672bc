"""Loopback seeded without the allow-list: said once per host in the log and in status."""

from __future__ import annotations

import asyncio
import json
import sys
import time

import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(180)


async def test_refused_loopback_host_is_logged_once_and_shown_in_status(db_url: str) -> None:
    env = daemon_env(db_url, log_level="WARNING", poll_interval="0.2")
    del env["CRAWLER_ALLOW_NETWORKS"]
    seed = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "seed", "http://127.0.0.1:9/a", "http://127.0.0.1:9/b",
        env=env)
    assert await seed.wait() == 0
    proc = await start_daemon(env)
    conn = await asyncpg.connect(db_url)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and proc.returncode is None:
            if await conn.fetchval("SELECT count(*) FROM hosts WHERE refused_reason IS NOT NULL"):
                break
            await asyncio.sleep(0.1)
    finally:
        await conn.close()
        output = await stop_daemon(proc)
    assert output.count("refused by the SSRF policy") == 1, output
    assert "CRAWLER_ALLOW_NETWORKS" in output
    status = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "status", "--json", env=env,
        stdout=asyncio.subprocess.PIPE)
    out, _ = await status.communicate()
    refused = json.loads(out)["hosts_refused"]
    assert [h["origin"] for h in refused] == ["http://127.0.0.1:9"]
    assert "CRAWLER_ALLOW_NETWORKS" in refused[0]["reason"]
