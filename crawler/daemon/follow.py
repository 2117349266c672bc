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
from crawler.core.stored_plan import Plan, applied
from crawler.db import fleet
from crawler.db.errors import retried_later
from crawler.db.planning import latest_plan, latest_plan_version
from crawler.settings import Settings

log = logging.getLogger(__name__)

# How often a fetch process asks for the newest plan's version: one primary-key lookup, so a
# new plan is in force everywhere within a couple of seconds of being stored.
PLAN_POLL_SECONDS = 2.0


class PlanFollower:
    """Keeps ``schedule``, the plan in force in this process, on the settings' policy under
    the newest stored plan (the worker and the sitemap reader read it for every decision)."""

    def __init__(self, pool: asyncpg.Pool, settings: Settings, owner: str) -> None:
        self.pool = pool
        self.owner = owner
        self.settings_policy = SchedulePolicy(settings)
        self.schedule: SchedulePolicy = self.settings_policy
        self.version: int | None = None  # the version in force here; None before any plan

    async def adopt_newest(self) -> bool:
        """Adopt the newest plan if its version moved; True when it did."""
        newest = await latest_plan_version(self.pool)
        if newest is None or newest == self.version:
            return False
        plan = await latest_plan(self.pool)
        if plan is None:  # pruned between the two statements: the next poll sees the newer
            return False
        self.adopt(plan)
        await fleet.adopted_plan(self.pool, self.owner, self.version)
        return True

    def adopt(self, plan: Plan) -> None:
        self.schedule = applied(self.settings_policy, plan)
        first = self.version is None
        self.version = plan.version
        log.log(logging.INFO if first else logging.DEBUG,
                "scheduling under plan %d (mu=%s, budget %.0f/day)", plan.version,
                "none" if self.schedule.mu is None else f"{self.schedule.mu:.4g}",
                plan.budget_per_day)

    async def run(self) -> None:
        """Side task: poll for a newer plan for as long as the daemon runs."""
        while True:
            with retried_later("the plan follower", log):
                await self.adopt_newest()
            await asyncio.sleep(PLAN_POLL_SECONDS)
