"""`crawler run --processes 2`: politeness across processes, one aggregated /metrics, drain.

The children are real daemons sharing the frontier; the server records every request's span
per host, so an overlap or a short gap between two processes' requests to one host shows.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import re
import signal
import socket
import sys
import time
from pathlib import Path

import aiohttp
import asyncpg
import pytest
from daemon import daemon_env, start_daemon, stop_daemon
from test_politeness import RecordingServer
from toolcheck import require_tool

from crawler.db import frontier

pytestmark = pytest.mark.timeout(240)

STOPPED = re.compile(r"stopped after \d+s: (\d+) fetches recorded")
PIDS = re.compile(r"fetch processes \(pids ([\d, ]+)\)")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


async def read_until(proc: asyncio.subprocess.Process, pattern: re.Pattern[str],
                     seconds: float) -> tuple[re.Match[str], str]:
    """Read the daemon's output line by line until ``pattern`` matches (it keeps running)."""
    assert proc.stdout is not None
    seen: list[str] = []
    deadline = time.monotonic() + seconds
    while True:
        remaining = deadline - time.monotonic()
        assert remaining > 0, f"{pattern.pattern!r} not printed in {seconds}s:\n" + "".join(seen)
        line = (await asyncio.wait_for(proc.stdout.readline(), remaining)).decode()
        assert line, "the daemon exited:\n" + "".join(seen)
        seen.append(line)
        match = pattern.search(line)
        if match:
            return match, "".join(seen)


async def scrape(port: int) -> str:
    url = f"http://127.0.0.1:{port}/metrics"
    async with aiohttp.ClientSession() as http, http.get(url) as response:
        assert response.status == 200
        return await response.text()


def fetches_total(exposition: str) -> float:
    return sum(float(line.rsplit(" ", 1)[1]) for line in exposition.splitlines()
               if line.startswith("crawler_fetches_total{"))


async def test_two_processes_are_polite_and_share_one_metrics_endpoint(
    db_url: str, tmp_path: Path
) -> None:
    promtool = require_tool("promtool", "prometheus")
    delay = 0.05
    addresses = [f"127.0.0.{i}" for i in range(2, 22)]
    server = RecordingServer(addresses, handle_seconds=0.005)
    await server.start()
    urls = [(f"http://{a}:{server.port}/p{i}", 1.0) for a in addresses for i in range(40)]
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    await frontier.seed(pool, urls, time.time() - 1)
    await pool.close()
    metrics_port = free_port()
    env = daemon_env(
        db_url, processes="2", politeness_delay=str(delay), poll_interval="0.05",
        concurrency="4", claim_batch_hosts="2", claim_urls_per_host="10",
        default_interval="3600", min_interval="3600", metrics_port=str(metrics_port),
    )
    env["TMPDIR"] = str(tmp_path)  # where the parent makes its PROMETHEUS_MULTIPROC_DIR
    daemon = await start_daemon(env)
    output = ""
    try:
        _, output = await read_until(daemon, PIDS, 60)
        deadline = time.monotonic() + 150
        while server.pages_served() < len(urls):
            assert time.monotonic() < deadline, f"{server.pages_served()} of {len(urls)}"
            assert daemon.returncode is None
            await asyncio.sleep(0.2)
        # The last fetches are counted once their transactions commit.
        deadline = time.monotonic() + 30
        exposition = await scrape(metrics_port)
        while fetches_total(exposition) < len(urls):
            assert time.monotonic() < deadline, fetches_total(exposition)
            await asyncio.sleep(0.2)
            exposition = await scrape(metrics_port)
        assert list(tmp_path.glob("crawler-metrics-*")), "the parent's multiprocess directory"
    finally:
        output += await stop_daemon(daemon, timeout=60)
        await server.stop()
    assert daemon.returncode == 0, output[-3000:]

    # Politeness across processes: one request in flight per host, never a gap below the delay.
    assert server.pages_served() == len(urls)
    assert set(server.max_in_flight.values()) == {1}, server.max_in_flight
    for host, spans in server.spans.items():
        spans.sort()
        gaps = [b_start - a_end for (_, a_end), (b_start, _) in itertools.pairwise(spans)]
        assert min(gaps) >= delay - 0.01, (host, min(gaps))

    # Both processes fetched, and the one endpoint counted every fetch of both.
    per_process = [int(n) for n in STOPPED.findall(output)]
    assert len(per_process) == 2 and all(n > 0 for n in per_process), output[-3000:]
    assert sum(per_process) == len(urls) == fetches_total(exposition)
    assert 'crawler_page_stage_seconds_count{stage="parse"}' in exposition
    assert "crawler_event_loop_lag_seconds_count" in exposition
    assert exposition.count("# TYPE crawler_build_info") == 1
    assert not list(tmp_path.glob("crawler-metrics-*")), "the parent removes it on exit"

    lint = await asyncio.create_subprocess_exec(
        promtool, "check", "metrics", stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    lint_out, _ = await lint.communicate(exposition.encode())
    assert lint.returncode == 0 and not lint_out.strip(), lint_out.decode()


async def test_a_child_that_dies_stops_the_set_with_a_failure(db_url: str) -> None:
    daemon = await start_daemon(daemon_env(db_url, processes="2", poll_interval="0.1"))
    try:
        match, _ = await read_until(daemon, PIDS, 60)
        first, second = (int(pid) for pid in match.group(1).split(","))
        os.kill(first, signal.SIGKILL)
        out, _ = await asyncio.wait_for(daemon.communicate(), 60)
    finally:
        if daemon.returncode is None:
            daemon.kill()
            await daemon.wait()
    assert daemon.returncode not in (0, None), out.decode()[-2000:]
    with pytest.raises(ProcessLookupError):
        os.kill(second, 0)  # the other child was stopped (and reaped) too


async def test_children_refuse_an_unmigrated_database_and_the_parent_says_so(
    empty_db_url: str,
) -> None:
    daemon = await start_daemon(daemon_env(empty_db_url, processes="2"))
    output, _ = await asyncio.wait_for(daemon.communicate(), 120)  # exits by itself
    out = output.decode()
    assert daemon.returncode == 2, out[-2000:]
    assert "crawler db upgrade" in out


async def test_sigterm_right_after_start_is_a_clean_stop(db_url: str) -> None:
    """Children still setting up when the signal comes stop cleanly, and so does the parent."""
    daemon = await start_daemon(daemon_env(db_url, processes="2"))
    match, _ = await read_until(daemon, PIDS, 60)
    out = await stop_daemon(daemon, timeout=60)
    assert daemon.returncode == 0, out[-2000:]
    for pid in (int(pid) for pid in match.group(1).split(",")):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


async def test_a_stop_that_reaches_a_child_before_its_handlers_is_not_lost(db_url: str) -> None:
    """A child starts with the parent's handlers. A SIGTERM that reaches it right after the
    fork (here sent by the child to itself, as the parent's forward does under load) must stop
    it, not be swallowed by the parent's handler for early signals and leave the child running
    until the supervisor kills it."""
    script = (
        "import os, runpy, signal, sys\n"
        "os.register_at_fork(after_in_child=lambda: os.kill(os.getpid(), signal.SIGTERM))\n"
        "sys.argv = ['crawler', 'run']\n"
        "runpy.run_module('crawler', run_name='__main__')\n"
    )
    env = daemon_env(db_url, processes="2")
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", script, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    try:
        output, _ = await asyncio.wait_for(proc.communicate(), 60)
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    out = output.decode()
    # Nothing asked the set to stop, so the parent reports both deaths as failures; what
    # matters is that the children died at once instead of crawling on.
    assert proc.returncode == 1, out[-2000:]
    assert f"exited with -{int(signal.SIGTERM)} unasked" in out, out[-2000:]
    match = PIDS.search(out)
    assert match, out[-2000:]
    for pid in (int(pid) for pid in match.group(1).split(",")):
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)
