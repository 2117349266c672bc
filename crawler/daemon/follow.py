"""Every fetch process schedules under the newest plan in the database.

The planner (one per fleet and round) stores what it solved as a versioned row of ``plans``.
Each fetch process, whichever daemon or ``--processes`` child it is, adopts the newest row at
start and whenever the version moves, and says which version it applies in its ``daemons``
row: the plan is data every process reads, never a message to one process.
"""

from __future__ import annotations

import asyncio
import logging

import asyncpg

from crawler.core.schedule import SchedulePolicy
from crawler.core.stored_plan import Plan, applied, plan_from_row
from crawler.daemon.worker import WorkerConfig
from crawler.db.errors import retried_later
from crawler.db.queries import QUERIES

log = logging.getLogger(__name__)

# How often a fetch process asks for the newest plan's version: one primary-key lookup, so a
# new plan is in force everywhere within a couple of seconds of being stored.
PLAN_POLL_SECONDS = 2.0


class PlanFollower:
    """Keeps ``config.schedule`` on the settings' policy under the newest stored plan."""

    def __init__(self, pool: asyncpg.Pool, config: WorkerConfig, owner: str) -> None:
        self.pool = pool
        self.config = config
        self.owner = owner
        self.settings_policy: SchedulePolicy = config.schedule
        self.version: int | None = None  # the version in force here; None before any plan

    async def adopt_newest(self) -> bool:
        """Adopt the newest plan if its version moved; True when it did."""
        newest = await self.pool.fetchval(QUERIES["latest_plan_version"])
        if newest is None or newest == self.version:
            return False
        row = await self.pool.fetchrow(QUERIES["latest_plan"])
        if row is None:  # pruned between the two statements: the next poll sees the newer
            return False
        self.adopt(plan_from_row(row))
        await self.pool.execute(QUERIES["daemon_plan_version"], self.owner, self.version)
        return True

    def adopt(self, plan: Plan) -> None:
        self.config.schedule = applied(self.settings_policy, plan)
        first = self.version is None
        self.version = plan.version
        log.log(logging.INFO if first else logging.DEBUG,
                "scheduling under plan %d (mu=%s, budget %.0f/day)", plan.version,
                "none" if self.config.schedule.mu is None else f"{self.config.schedule.mu:.4g}",
                plan.budget_per_day)

    async def run(self) -> None:
        """Side task: poll for a newer plan for as long as the daemon runs."""
        while True:
            with retried_later("the plan follower", log):
                await self.adopt_newest()
            await asyncio.sleep(PLAN_POLL_SECONDS)
