"""The real daemon (`python -m crawler run`) in a process of its own, as the tests run it.

Every daemon ``start_daemon`` starts is remembered for the test (tests/conftest.py resets
the list before each): its politeness delay and User-Agent are declared to the loopback
servers' registry (tests/loopback.py), and ``stop_daemon`` checks, before it stops one that
still runs, that every live fetch process applies the newest plan (when there is one). A
check that fails is kept (``STARTED.plan_failures``) and fails the test at its teardown, once the
daemon is stopped and the test's own ``finally`` blocks ran; a daemon still running at the
teardown is a bug of the test, reported there too.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import shutil
import signal
import sys
import tempfile
import uuid
from dataclasses import dataclass, field

import asyncpg
from invariants import assert_every_process_applies_the_newest_plan
from loopback import declare_crawler

from crawler.settings import Settings

LOOPBACK = '["127.0.0.0/8"]'
_WARC_ROOT: list[str] = []
# How long a stopping daemon's processes get to adopt the newest plan: generous, since a
# process adopts it within a poll (crawler.daemon.follow) and a loaded machine is slow.
PLAN_DEADLINE_SECONDS = 30.0


@dataclass
class Started:
    """The daemons this test started, and the plan checks that failed when they stopped."""

    daemons: list[tuple[asyncio.subprocess.Process, dict[str, str]]] = field(
        default_factory=list)
    plan_failures: list[str] = field(default_factory=list)


STARTED = Started()


def reset_started() -> Started:
    """A fresh record for the next test; the previous one."""
    global STARTED
    previous, STARTED = STARTED, Started()
    return previous


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


def _option(args: tuple[str, ...], name: str) -> str | None:
    """The value of ``--name VALUE`` or ``--name=VALUE`` in ``args`` (the last one)."""
    found = None
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            found = args[i + 1]
        elif arg.startswith(name + "="):
            found = arg.split("=", 1)[1]
    return found


def _declared(env: dict[str, str], args: tuple[str, ...]) -> tuple[float, str]:
    """The politeness delay and User-Agent a daemon runs with: its option, else its
    variable, else the setting's default."""
    fields = Settings.model_fields
    delay = (_option(args, "--politeness-delay") or env.get("CRAWLER_POLITENESS_DELAY")
             or fields["politeness_delay"].default)
    agent = (_option(args, "--user-agent") or env.get("CRAWLER_USER_AGENT")
             or fields["user_agent"].default)
    return float(delay), str(agent)


async def start_daemon(env: dict[str, str], *args: str) -> asyncio.subprocess.Process:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "crawler", "run", *args, env=env,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )
    STARTED.daemons.append((proc, env))
    declare_crawler(*_declared(env, args))
    return proc


async def check_plan_applied(proc: asyncio.subprocess.Process) -> str | None:
    """Before ``proc`` stops: when a plan is stored, every live fetch process applies the
    newest (``assert_every_process_applies_the_newest_plan``); what failed, or None. None
    as well when the database cannot be reached (a test that stopped it or broke it)."""
    env = next((env for p, env in STARTED.daemons if p is proc), None)
    url = None if env is None else env.get("CRAWLER_DATABASE_URL")
    if not url:
        return None
    try:
        conn = await asyncpg.connect(url, statement_cache_size=0, timeout=10)
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return None
    try:
        if await conn.fetchval("SELECT to_regclass('plans') IS NULL OR NOT EXISTS "
                               "(SELECT 1 FROM plans)"):
            return None
        await assert_every_process_applies_the_newest_plan(
            conn, deadline_seconds=PLAN_DEADLINE_SECONDS)
    except AssertionError as exc:
        return f"daemon pid {proc.pid}: {exc}"
    except (TimeoutError, OSError, asyncpg.PostgresError):
        return None
    finally:
        await conn.close()
    return None


async def stop_daemon(proc: asyncio.subprocess.Process, timeout: float = 30.0) -> str:
    """SIGTERM (if it still runs), wait for the exit, and return what it printed. Before
    the signal, the plan check (``check_plan_applied``): a failure fails the test at its
    teardown, not here, so that the daemon stops and the test's cleanup runs all the same."""
    if proc.returncode is None:
        failed = await check_plan_applied(proc)
        if failed is not None:
            STARTED.plan_failures.append(failed)
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
    out, _ = await asyncio.wait_for(proc.communicate(), timeout)
    return out.decode()
