"""`crawler demo` (what `make run` starts) keeps to a data directory of its own (issue 35):
its hosts, events and demo settings stay out of the user's database, WARC directory and
webhook, whatever the environment names."""

from __future__ import annotations

import asyncio
import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import asyncpg
import pytest
from aiohttp import web

pytestmark = pytest.mark.timeout(240)


@pytest.fixture
def data_dir() -> Iterator[Path]:
    """A data directory outside pytest's temporary root: the embedded server runs as its own
    user, and pytest makes its root private to this one again whenever a session starts."""
    path = Path(tempfile.mkdtemp(prefix="crawler-test-demo-"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


async def test_the_demo_crawls_in_its_own_data_directory(db_url: str, data_dir: Path) -> None:
    posted: list[bytes] = []

    async def receive(request: web.Request) -> web.Response:
        posted.append(await request.read())
        return web.Response(status=204)

    app = web.Application()
    app.router.add_post("/hook", receive)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    # The user's own setup, in the environment: their database, WARC directory and webhook.
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url, "CRAWLER_DATA_DIR": str(data_dir),
           "CRAWLER_WARC_DIR": str(data_dir / "users-warc"),
           "CRAWLER_WEBHOOK_URL": f"http://127.0.0.1:{port}/hook",
           "CRAWLER_METRICS_PORT": "0", "CRAWLER_PROCESSES": "1"}
    try:
        proc = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "demo", "--sites", "1", "--pages", "3",
            "--duration", "4", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
        out, _ = await asyncio.wait_for(proc.communicate(), 180)
    finally:
        await runner.cleanup()
    text = out.decode()
    assert proc.returncode == 0, text
    demo_dir = data_dir / "demo"
    assert text.splitlines()[0] == (
        f"demo data in {demo_dir} (its own embedded PostgreSQL; other commands read it with "
        f"CRAWLER_DATA_DIR={demo_dir})")
    assert "seeded 3 new URLs" in text, text
    assert (demo_dir / "pg").is_dir() and (demo_dir / "warc").is_dir()
    assert not (data_dir / "users-warc").exists() and posted == []
    conn = await asyncpg.connect(db_url)
    try:
        assert await conn.fetchval("SELECT count(*) FROM hosts") == 0
        assert await conn.fetchval("SELECT count(*) FROM urls") == 0
    finally:
        await conn.close()
