"""``crawler run --processes N``: N fetch processes on one machine, one /metrics, one planner.

Every child is an ordinary daemon (``run_daemon``): children share the frontier through
PostgreSQL's host leases exactly as daemons on separate machines do, so politeness holds
across them with no extra coordination. Parsing stays on each child's event loop: with one
child per core every core already parses (lexbor and the simhash vote hold the GIL, so a
thread pool would not help).

Children are forked once everything is imported, before any event loop or thread exists:
they start at once and share the parent's code pages. The parent does only what must happen
once per machine:

- resolves the database once (starting the embedded server if needed) for all children;
- owns ``PROMETHEUS_MULTIPROC_DIR`` (a temporary directory) and serves the one /metrics,
  aggregated over the children by prometheus-client's multiprocess mode;
- lets only child 0 run the planner, the frontier sampler (whole-table queries, once) and the
  webhook delivery (the outbox is read without locks: one reader per machine);
- forwards SIGTERM/SIGINT to the children and returns 0 once they have drained;
- when a child exits without being asked to, stops the others and returns non-zero, so the
  service manager restarts the whole set (a half-running machine would hide the failure).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import platform
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import Any

from aiohttp import web
from prometheus_client import CollectorRegistry, Info, multiprocess

from crawler import __version__
from crawler.daemon import heap
from crawler.daemon.http import make_app
from crawler.daemon.indexnow import IndexNowReceiver
from crawler.daemon.logstats import log_stats
from crawler.daemon.run import metrics_port_error, run_daemon
from crawler.daemon.signals import die_with_parent, process_shutdown
from crawler.metrics import PingMetrics
from crawler.settings import Settings

log = logging.getLogger(__name__)

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CHILD_STOP_SECONDS_EXTRA = 30.0  # on top of shutdown_grace, before a child is killed
# A child stopped by the forwarded signal before its handlers were installed ends by that
# signal; it held no lease yet, so that is a clean stop too.
CLEAN_EXITS = frozenset({0, -signal.SIGTERM, -signal.SIGINT})
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
CGROUP_CPU_MAX = Path("/sys/fs/cgroup/cpu.max")


def cpu_quota(cpu_max: str) -> int | None:
    """CPUs a cgroup v2 ``cpu.max`` line ("QUOTA PERIOD", or "max PERIOD") allows, rounded up;
    None when unlimited or unreadable."""
    parts = cpu_max.split()
    if len(parts) != 2 or parts[0] == "max":
        return None
    try:
        quota, period = int(parts[0]), int(parts[1])
    except ValueError:
        return None
    return max(1, math.ceil(quota / period)) if quota > 0 and period > 0 else None


def default_processes() -> int:
    """One fetch process per CPU this process may run on: the CPUs it is pinned to, fewer when
    a container's CPU limit (cgroup v2 quota, as Kubernetes and Docker set it) says so."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not Linux
        cpus = os.cpu_count() or 1
    try:
        quota = cpu_quota(CGROUP_CPU_MAX.read_text())
    except OSError:
        return cpus
    return max(1, min(cpus, quota) if quota is not None else cpus)


def _fork_child(index: int, settings: Settings, url: str, metrics_dir: str,
                duration: float | None, metrics_socket: socket.socket) -> int:
    """Fork one fetch process; returns its pid in the parent, never returns in the child."""
    parent = os.getpid()
    pid = os.fork()
    if pid:
        return pid
    code = 1
    try:
        metrics_socket.close()  # the parent's: the port is free again once the parent is gone
        for sig in STOP_SIGNALS:  # the daemon installs its own handlers; until then, stop
            signal.signal(sig, signal.SIG_DFL)
        # Blocked by the parent across the fork (see run_processes): one that came since is
        # delivered now, to the default action, instead of to the parent's inherited handler.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        # Its own session: a terminal's Ctrl-C reaches only the parent, which forwards it once
        # (else every child would see it twice and skip its grace period).
        os.setsid()
        die_with_parent()  # no fetch process outlives its supervisor
        if os.getppid() != parent:  # the parent died before prctl took effect
            os.kill(os.getpid(), signal.SIGTERM)
        os.environ[MULTIPROC_ENV] = metrics_dir
        from prometheus_client import values

        values.ValueClass = values.MultiProcessValue()  # type: ignore[no-untyped-call]
        import uvloop

        code = uvloop.run(run_daemon(
            settings, url, duration=duration, supervised=True, plans=index == 0
        ))
    except BaseException:  # reported; the child then exits non-zero
        traceback.print_exc()
    finally:
        logging.shutdown()
        sys.stdout.flush()
        sys.stderr.flush()
        # Not sys.exit: the parent's atexit handlers (the embedded server's stop) are its own.
        os._exit(code)


def aggregated_registry(metrics_dir: str) -> CollectorRegistry:
    """The machine's registry: every child's samples from ``metrics_dir``, plus build info
    (prometheus-client's multiprocess mode cannot carry an Info metric)."""
    registry = CollectorRegistry()
    multiprocess.MultiProcessCollector(registry, path=metrics_dir)  # type: ignore[no-untyped-call]
    build = Info("crawler_build", "Build information.", registry=registry)
    build.info({"version": __version__, "python": platform.python_version()})
    return registry


def bind_metrics(settings: Settings) -> socket.socket:
    """The /metrics socket, bound before any child is forked: a port in use (a second daemon
    on the machine) stops the start at once, in one line, exit 2, as with one process."""
    try:
        return socket.create_server((settings.metrics_host, settings.metrics_port))
    except OSError as exc:
        reason = os.strerror(exc.errno) if exc.errno else str(exc)
        raise metrics_port_error(settings, reason) from None


def run_processes(settings: Settings, url: str, processes: int, *,
                  duration: float | None = None) -> int:
    """Run ``processes`` children until a signal (or ``duration``); see the module docstring.

    Synchronous on purpose: children are forked before any event loop or thread exists.
    """
    import uvloop

    metrics_socket = bind_metrics(settings)

    # No database check here: each child makes the daemon's own start-up checks (revision,
    # reachability) and a child that exits at start makes this return its exit code.
    # A signal that arrives before the supervisor's loop runs is remembered, not fatal: it
    # is forwarded to the children as soon as they are there.
    early: list[signal.Signals] = []
    for sig in STOP_SIGNALS:
        signal.signal(sig, lambda signum, _frame: early.append(signal.Signals(signum)))
    metrics_dir = tempfile.mkdtemp(prefix="crawler-metrics-")
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        # Blocked across the forks: a child starts with the parent's handler, which only
        # appends to the parent's ``early``; a stop forwarded before the child replaced it
        # would be swallowed, and the child would run until killed.
        signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS)
        heap.settle()  # what the children share, frozen before they copy it (daemon.heap)
        try:
            pids = [_fork_child(index, settings, url, metrics_dir, duration, metrics_socket)
                    for index in range(processes)]
        finally:
            signal.pthread_sigmask(signal.SIG_UNBLOCK, STOP_SIGNALS)
        code: int = uvloop.run(
            _supervise(settings, pids, metrics_dir, duration, early, metrics_socket, url))
        return code
    finally:
        metrics_socket.close()
        shutil.rmtree(metrics_dir, ignore_errors=True)


class _Child:
    """A forked fetch process, waited for in a thread (the loop did not spawn it)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None

    async def wait(self) -> int:
        _, status = await asyncio.to_thread(os.waitpid, self.pid, 0)
        self.returncode = os.waitstatus_to_exitcode(status)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


async def _supervise(settings: Settings, pids: list[int], metrics_dir: str,
                     duration: float | None, early: list[signal.Signals],
                     metrics_socket: socket.socket, url: str) -> int:
    children = [_Child(pid) for pid in pids]
    waits = {asyncio.create_task(child.wait()): child for child in children}

    async def ready() -> tuple[bool, str]:
        running = sum(child.returncode is None for child in children)
        return running == len(children), f"{running} of {len(children)} fetch processes running"

    registry = aggregated_registry(metrics_dir)
    pings = None
    if settings.indexnow:
        # /indexnow is served here, with the one /metrics: its pings are counted on this
        # process's registry (no child counts them, so the aggregate holds no copy).
        pings = IndexNowReceiver(settings, PingMetrics(registry))
        await pings.start(url)
    runner = web.AppRunner(make_app(registry, ready, pings), access_log=None)
    await runner.setup()
    await web.SockSite(runner, metrics_socket).start()
    port = metrics_socket.getsockname()[1]
    log.info("%d fetch processes (pids %s); metrics at http://%s:%d/metrics", len(pids),
             ", ".join(map(str, pids)), settings.metrics_host, port)

    stopping = asyncio.Event()

    def forward(sig: signal.Signals) -> Callable[[], None]:
        def handler() -> None:
            stopping.set()
            _signal_all(children, sig)
        return handler

    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, forward(sig))
    for sig in early:  # signals that came while the children were forked
        forward(sig)()
    if process_shutdown().requested and not early:  # ... or before that, at start-up
        forward(signal.SIGTERM)()
    stats = (asyncio.create_task(log_stats(registry, settings.log_stats_interval))
             if settings.log_stats_interval > 0 else None)
    started = time.monotonic()
    failed: int | None = None
    kill_at: float | None = None
    try:
        stop_task = asyncio.create_task(stopping.wait())
        pending: set[asyncio.Task[Any]] = set(waits)
        while pending:
            now = time.monotonic()
            if stopping.is_set() and kill_at is None:
                kill_at = now + settings.shutdown_grace + CHILD_STOP_SECONDS_EXTRA
            timeout = None if kill_at is None else max(0.0, kill_at - now)
            done, _ = await asyncio.wait(
                pending | ({stop_task} if not stop_task.done() else set()),
                timeout=timeout, return_when=asyncio.FIRST_COMPLETED,
            )
            for task in done & pending:
                pending.discard(task)
                child = waits[task]
                if duration is not None and child.returncode == 0:
                    continue  # done after --duration
                if not stopping.is_set():
                    log.error("fetch process %d exited with %s unasked; stopping the others",
                              child.pid, child.returncode)
                    stopping.set()
                    _signal_all(children, signal.SIGTERM)
                elif child.returncode in CLEAN_EXITS or failed is not None:
                    continue
                failed = child.returncode if (child.returncode or 0) > 0 else 1
            if done or not pending:
                continue
            if kill_at is not None:  # a stuck child must not keep the machine's daemon up
                log.error("%d fetch processes did not stop in time; killing them", len(pending))
                _signal_all(children, signal.SIGKILL)
                await asyncio.wait(pending)
                failed = failed or 1
                pending.clear()
        stop_task.cancel()
    finally:
        process_shutdown().detach(loop)  # signals stay counted, never fatal, until the exit
        if stats is not None:
            stats.cancel()
        for child in children:  # children still alive only if this task was cancelled
            if child.returncode is None:
                child.send_signal(signal.SIGKILL)
                await child.wait()
        if pings is not None:
            await pings.close()
        await runner.cleanup()
    log.info("%d fetch processes stopped after %.0fs", len(pids), time.monotonic() - started)
    return failed or 0


def _signal_all(children: list[_Child], sig: signal.Signals) -> None:
    for child in children:
        child.send_signal(sig)
