"""The planner's process dies with its daemon: a stop, or the daemon killed outright, leaves no
planner running (nothing that keeps solving and rescheduling for a daemon that is gone)."""

from __future__ import annotations

import asyncio
import signal
import time
from pathlib import Path

import pytest
from daemon import daemon_env, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(120)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    try:
        return [int(p) for p in path.read_text().split()]
    except OSError:
        return []


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its reaper has ended)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


async def planner_pid(daemon_pid: int) -> int:
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        for child in children(daemon_pid):
            try:
                cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
            except OSError:
                continue
            if b"spawn_main" in cmdline:
                return child
        await asyncio.sleep(0.1)
    raise AssertionError("no planner process started")


@pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc (Linux)")
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGKILL])
async def test_the_planner_process_ends_with_the_daemon(db_url: str, signum: int) -> None:
    proc = await start_daemon(daemon_env(db_url, schedule="optimal", planner_interval="300"))
    try:
        planner = await planner_pid(proc.pid)
        assert alive(planner)
        proc.send_signal(signum)
        await asyncio.wait_for(proc.wait(), 30.0)
        deadline = time.monotonic() + 15.0
        while alive(planner):
            assert time.monotonic() < deadline, f"planner {planner} outlived its daemon"
            await asyncio.sleep(0.1)
    finally:
        if proc.returncode is None:
            await stop_daemon(proc)
