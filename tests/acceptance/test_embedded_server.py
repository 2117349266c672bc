"""The zero-setup database: commands share the embedded server under CRAWLER_DATA_DIR.

`crawler status` run beside a running `crawler run` joins its server and leaves it running;
the last command to finish stops it; the data survives into the next start.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from crawler.demo.processes import PoissonProcess
from crawler.demo.sites import PageSpec, SiteSpec
from crawler.demo.web import DemoWeb

pytestmark = pytest.mark.timeout(180)


def env_for(data_dir: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "CRAWLER_DATABASE_URL"}
    env.update({
        "CRAWLER_DATA_DIR": str(data_dir),
        "CRAWLER_SCHEDULE": "uniform",
        "CRAWLER_DEFAULT_INTERVAL": "0.5",
        "CRAWLER_MIN_INTERVAL": "0.2",
        "CRAWLER_POLITENESS_DELAY": "0.05",
        "CRAWLER_METRICS_PORT": "0",
        "CRAWLER_ALLOW_NETWORKS": '["127.0.0.0/8"]',
    })
    return env


def crawler(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=90)


def server_running(data_dir: Path) -> bool:
    pid_file = data_dir / "pg" / "postmaster.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().split()[0])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_status_beside_run_shares_the_embedded_server(tmp_path: Path) -> None:
    data_dir = tmp_path / "data"
    env = env_for(data_dir)
    web = DemoWeb([SiteSpec("a", tuple(
        PageSpec(f"/p{i}", real=PoissonProcess(rate_per_second=0.5), seed=str(i))
        for i in range(5)
    ))])
    await web.start()
    try:
        upgrade = crawler(env, "db", "upgrade")
        assert upgrade.returncode == 0, upgrade.stderr
        seeded = crawler(env, "seed", *web.urls())
        assert seeded.returncode == 0, seeded.stderr
        assert not server_running(data_dir), "the last command out stops the server"

        daemon = await asyncio.create_subprocess_exec(
            sys.executable, "-m", "crawler", "run", "--duration", "120", env=env,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
        )

        async def status_once_fetched(more_than: int) -> subprocess.CompletedProcess[str]:
            """`crawler status` again until the daemon has recorded more than ``more_than``
            fetches: a loaded machine may take many seconds to start it."""
            deadline = asyncio.get_running_loop().time() + 90
            while True:
                done = await asyncio.to_thread(crawler, env, "status", "--json")
                assert done.returncode == 0, done.stderr
                if json.loads(done.stdout)["fetches_last_hour"] > more_than:
                    return done
                assert asyncio.get_running_loop().time() < deadline, "the daemon fetched nothing"
                await asyncio.sleep(0.5)

        first = await status_once_fetched(0)
        assert server_running(data_dir), "status must not stop the daemon's server"
        second = await status_once_fetched(json.loads(first.stdout)["fetches_last_hour"])
        daemon.send_signal(signal.SIGTERM)
        out, _ = await asyncio.wait_for(daemon.communicate(), 60)
    finally:
        await web.stop()
    assert daemon.returncode == 0, out.decode()[-2000:]
    assert "database unavailable" not in out.decode()
    before = json.loads(first.stdout)["fetches_last_hour"]
    after = json.loads(second.stdout)["fetches_last_hour"]
    assert 0 < before < after, (before, after)  # the daemon kept recording after status left
    await asyncio.sleep(1)
    assert not server_running(data_dir)
    # Restarted for the next command, with everything still there.
    final = json.loads(crawler(env, "status", "--json").stdout)
    assert final["urls"] == 5 and final["fetches_last_hour"] >= after
