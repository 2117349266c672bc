"""Supervision: a planner that fails (made to, by the CRAWLER_TEST_PLANNER_FAIL hook) is logged
with its traceback and restarted with backoff, and /readyz says not ready while it is down."""

from __future__ import annotations

import asyncio
import contextlib
import re
import time

import aiohttp
import pytest
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(180)

FAILURES = 3  # restarts wait 1, 2 and 4 s: the planner is down about 7 s in all


async def _metrics_port(proc: asyncio.subprocess.Process, seen: list[str]) -> int:
    assert proc.stdout is not None
    while True:
        line = (await asyncio.wait_for(proc.stdout.readline(), 60)).decode()
        assert line, "daemon exited: " + "".join(seen)
        seen.append(line)
        match = re.search(r"metrics at http://[\d.]+:(\d+)/metrics", line)
        if match:
            return int(match.group(1))


async def _drain_output(proc: asyncio.subprocess.Process, seen: list[str]) -> None:
    assert proc.stdout is not None
    async for line in proc.stdout:
        seen.append(line.decode())


async def test_a_failing_planner_is_restarted_and_readyz_reports_it(db_url: str) -> None:
    env = daemon_env(db_url, schedule="optimal", planner_interval="1", poll_interval="0.2")
    env["CRAWLER_TEST_PLANNER_FAIL"] = str(FAILURES)
    proc = await start_daemon(env)
    seen: list[str] = []
    states: list[tuple[int, str]] = []
    try:
        port = await _metrics_port(proc, seen)
        reader = asyncio.create_task(_drain_output(proc, seen))
        deadline = time.monotonic() + 90
        async with aiohttp.ClientSession() as client:
            while time.monotonic() < deadline:
                async with client.get(f"http://127.0.0.1:{port}/readyz") as response:
                    states.append((response.status, (await response.text()).strip()))
                restarted = any(f"restart {FAILURES})" in line for line in seen)
                if restarted and states[-1][0] == 200:
                    break
                await asyncio.sleep(0.1)
        reader.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await reader
        out = await stop_daemon(proc)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    log = "".join(seen) + out
    assert proc.returncode == 0, log[-3000:]
    assert (503, "side task down: planner") in states, states
    assert states[-1] == (200, "ready"), (states[-5:], log[-3000:])
    assert log.count("side task planner failed") == FAILURES, log[-3000:]
    assert log.count("RuntimeError: planner made to fail by CRAWLER_TEST_PLANNER_FAIL") == FAILURES
    assert "Traceback" in log  # logged with its traceback
    waits = [float(w) for w in re.findall(r"side task planner restarts in (\d+)s", log)]
    assert waits == [1.0, 2.0, 4.0], waits  # backoff doubles
