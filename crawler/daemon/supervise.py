"""Side tasks (planner, frontier sampler) watched: one that fails is logged with its traceback
and restarted with a backoff that doubles up to a cap; while a required one is down the daemon
is not ready (/readyz)."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

log = logging.getLogger(__name__)

RESTART_MIN_SECONDS = 1.0
RESTART_MAX_SECONDS = 60.0
# A run at least this long counts as healthy: the next failure waits the minimum again.
HEALTHY_RUN_SECONDS = 60.0
# How long ``Supervisor.stop`` waits for the side tasks to end.
STOP_SECONDS = 5.0


@dataclass(frozen=True, slots=True)
class SideTask:
    name: str
    run: Callable[[], Awaitable[None]]
    required: bool


class Supervisor:
    """Runs side tasks forever, restarting each one that raises or returns."""

    def __init__(self, tasks: list[SideTask], *,
                 restart_min_seconds: float = RESTART_MIN_SECONDS,
                 restart_max_seconds: float = RESTART_MAX_SECONDS) -> None:
        self.tasks = tasks
        self.restart_min_seconds = restart_min_seconds
        self.restart_max_seconds = restart_max_seconds
        self.restarts: dict[str, int] = {t.name: 0 for t in tasks}
        self._down: set[str] = set()
        self._runners: list[asyncio.Task[None]] = []

    def start(self) -> None:
        self._runners = [asyncio.create_task(self._keep(task), name=f"side task {task.name}")
                         for task in self.tasks]

    def required_down(self) -> list[str]:
        """Names of required side tasks that are not running now."""
        return [t.name for t in self.tasks if t.required and t.name in self._down]

    async def _keep(self, task: SideTask) -> None:
        wait = self.restart_min_seconds
        while True:
            started = time.monotonic()
            try:
                await task.run()
                log.error("side task %s returned", task.name)
            except asyncio.CancelledError:
                raise
            except Exception:
                log.exception("side task %s failed", task.name)
            self._down.add(task.name)
            if time.monotonic() - started >= HEALTHY_RUN_SECONDS:
                wait = self.restart_min_seconds
            log.warning("side task %s restarts in %.0fs", task.name, wait)
            await asyncio.sleep(wait)
            wait = min(2.0 * wait, self.restart_max_seconds)
            self.restarts[task.name] += 1
            self._down.discard(task.name)
            log.info("side task %s restarted (restart %d)", task.name, self.restarts[task.name])

    async def stop(self, timeout: float = STOP_SECONDS) -> None:
        """Cancel every side task and wait for them, cancelling again each second one that
        goes on (a task that swallowed its cancellation, say behind a database error, would
        otherwise hold the daemon's exit for good); after ``timeout`` seconds the rest are
        left behind, logged."""
        deadline = time.monotonic() + timeout
        pending = {runner for runner in self._runners if not runner.done()}
        while pending:
            for runner in pending:
                runner.cancel()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                log.error("side tasks still running at exit, left behind: %s",
                          ", ".join(sorted(runner.get_name() for runner in pending)))
                return
            _, pending = await asyncio.wait(pending, timeout=min(1.0, remaining))
        # Collect the outcomes so that none is reported as never retrieved.
        await asyncio.gather(*self._runners, return_exceptions=True)
