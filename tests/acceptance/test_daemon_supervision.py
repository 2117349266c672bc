"""Supervision: a planner that fails (its process killed by the test) is logged with its
traceback and restarted with backoff, and /readyz says not ready while it is down."""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
import time
from pathlib import Path

import aiohttp
import pytest
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(180)

FAILURES = 3  # restarts wait 1, 2 and 4 s: the planner is down about 7 s in all


def _planner_pids(daemon_pid: int) -> list[int]:
    """The daemon's live planner processes: its children started by multiprocessing's spawn
    (a dead one, a zombie until joined, has no command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rpartition(")")[2].split()[1])
        if parent == daemon_pid and b"spawn_main" in cmdline:
            found.append(int(entry.name))
    return found


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
    proc = await start_daemon(env)
    seen: list[str] = []
    states: list[tuple[int, str]] = []
    killed: set[int] = set()
    try:
        port = await _metrics_port(proc, seen)
        reader = asyncio.create_task(_drain_output(proc, seen))
        deadline = time.monotonic() + 90
        async with aiohttp.ClientSession() as client:
            while time.monotonic() < deadline:
                async with client.get(f"http://127.0.0.1:{port}/readyz") as response:
                    states.append((response.status, (await response.text()).strip()))
                # One planner killed per run: the first, then each one a restart started.
                restarts = sum("side task planner restarted" in line for line in seen)
                if len(killed) < FAILURES and len(killed) == restarts:
                    for pid in set(_planner_pids(proc.pid)) - killed:
                        os.kill(pid, signal.SIGKILL)
                        killed.add(pid)
                        break
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
    assert log.count("RuntimeError: the planner process exited with code -9") == FAILURES
    assert "Traceback" in log  # logged with its traceback
    waits = [float(w) for w in re.findall(r"side task planner restarts in (\d+)s", log)]
    assert waits == [1.0, 2.0, 4.0], waits  # backoff doubles
