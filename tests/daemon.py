"""The real daemon (`python -m crawler run`) in a process of its own, as the tests run it."""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import sys
import tempfile
import uuid

LOOPBACK = '["127.0.0.0/8"]'
_WARC_ROOT: list[str] = []


def scratch_warc_dir() -> str:
    """A fresh WARC directory under one temporary root removed at exit: daemons in tests
    store versions there, never in the user's data directory."""
    if not _WARC_ROOT:
        _WARC_ROOT.append(tempfile.mkdtemp(prefix="crawler-test-warc-"))
        atexit.register(shutil.rmtree, _WARC_ROOT[0], True)
    return os.path.join(_WARC_ROOT[0], uuid.uuid4().hex[:12])


def daemon_env(db_url: str, **settings: str) -> dict[str, str]:
    """Environment for a daemon on ``db_url``: metrics on any free port, loopback allowed (the
    demo web and the test servers live there), one fetch process, and ``CRAWLER_<NAME>`` for
    each keyword."""
    env = {
        **os.environ,
        "CRAWLER_DATABASE_URL": db_url,
        "CRAWLER_METRICS_PORT": "0",
        "CRAWLER_ALLOW_NETWORKS": LOOPBACK,
        # One fetch process unless a test asks for more (the default is one per CPU); the
        # --processes supervisor has tests of its own (tests/integration/test_processes.py).
        "CRAWLER_PROCESSES": "1",
        "CRAWLER_WARC_DIR": scratch_warc_dir(),
    }
    env.update({f"CRAWLER_{name.upper()}": value for name, value in settings.items()})
    return env


async def start_daemon(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "run", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )


async def stop_daemon(proc: asyncio.subprocess.Process, timeout: float = 30.0) -> str:
    """SIGTERM (if it still runs), wait for the exit, and return what it printed."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    return out.decode()
