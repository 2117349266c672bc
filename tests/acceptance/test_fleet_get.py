"""A fleet whose daemons write to directories of their own (issue 34): the index records where
each WARC file lives, and ``crawler get`` on a machine that cannot see a file names the
machine and path that hold it, instead of calling it missing."""

from __future__ import annotations

import asyncio
import socket
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web
from daemon import daemon_env, scratch_warc_dir, start_daemon, stop_daemon

pytestmark = pytest.mark.timeout(180)

PAGE = "<html><body><p>Held by one machine.</p></body></html>"


@pytest.fixture
async def origin() -> AsyncIterator[str]:
    async def handle(request: web.Request) -> web.Response:
        if request.path == "/robots.txt":
            return web.Response(status=404)
        return web.Response(text=PAGE, content_type="text/html")

    app = web.Application()
    app.router.add_route("GET", "/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    await runner.cleanup()


async def cli(env: dict[str, str], *args: str) -> tuple[int, str, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), 60)
    assert proc.returncode is not None
    return proc.returncode, out.decode(), err.decode()


async def test_get_names_the_machine_and_path_holding_a_file(db_url: str, origin: str) -> None:
    url = f"{origin}/page"
    env = daemon_env(db_url, politeness_delay="0.05", poll_interval="0.1")
    assert (await cli(env, "seed", url))[0] == 0
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=2)
    proc = await start_daemon(env)
    try:
        deadline = time.monotonic() + 60
        while (row := await pool.fetchrow(
            "SELECT s.warc_file, f.machine, f.directory FROM stored_records AS s "
            "JOIN warc_files AS f ON f.name = s.warc_file")) is None:
            assert proc.returncode is None, "the daemon died"
            assert time.monotonic() < deadline, "nothing stored"
            await asyncio.sleep(0.1)
    finally:
        out = await stop_daemon(proc)
        await pool.close()
    assert proc.returncode == 0, out[-3000:]
    written = Path(env["CRAWLER_WARC_DIR"]).resolve()
    assert row["machine"] == socket.gethostname()
    assert Path(row["directory"]) == written

    # The machine that wrote it reads it.
    code, body, _ = await cli(env, "get", url)
    assert code == 0 and "Held by one machine." in body

    # Another directory (as on another machine): one line naming where the file is.
    elsewhere = {**env, "CRAWLER_WARC_DIR": scratch_warc_dir()}
    Path(elsewhere["CRAWLER_WARC_DIR"]).mkdir(parents=True)
    code, _, err = await cli(elsewhere, "get", url)
    assert code == 4, err
    assert f"is on machine {row['machine']} at {written / row['warc_file']}" in err, err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1
