"""The fleet's daemons in PostgreSQL: each one's row in ``daemons`` (the planner counts the
fleet's capacity from them), the jobs one daemon of the fleet does at a time, and the shared
figures of ``planner_state``."""

from __future__ import annotations

from collections.abc import Mapping

import asyncpg

from crawler.db.queries import QUERIES

# How often a daemon refreshes its row in ``daemons`` (the planner counts live daemons).
HEARTBEAT_SECONDS = 10.0


async def heartbeat(
    conn: asyncpg.Connection | asyncpg.Pool, owner: str, concurrency: int,
    plan_version: int | None,
) -> None:
    """Daemon ``owner`` is alive, fetches ``concurrency`` hosts at once and schedules under
    ``plan_version`` (None before it adopted a plan)."""
    await conn.execute(QUERIES["heartbeat"], owner, concurrency, plan_version)


async def stopped(conn: asyncpg.Connection | asyncpg.Pool, owner: str) -> None:
    """Daemon ``owner`` stopped: its row goes, and the planner stops counting it."""
    await conn.execute(QUERIES["daemon_stopped"], owner)


async def adopted_plan(conn: asyncpg.Connection | asyncpg.Pool, owner: str, version: int | None
                       ) -> None:
    """Daemon ``owner`` schedules under plan ``version`` (said at once, not at a heartbeat)."""
    await conn.execute(QUERIES["daemon_plan_version"], owner, version)


async def set_storage_fault(
    conn: asyncpg.Connection | asyncpg.Pool, owner: str, fault: str | None
) -> None:
    """Why daemon ``owner`` cannot write its collection now (None: it can again)."""
    await conn.execute(QUERIES["set_storage_fault"], owner, fault)


async def claim_job(conn: asyncpg.Connection | asyncpg.Pool, job: str, seconds: float) -> bool:
    """Whether this daemon does the fleet's ``job`` now: none claimed it in the last ``seconds``."""
    return await conn.fetchval(QUERIES["fleet_claim"], job, seconds) is not None


async def store_state(conn: asyncpg.Connection | asyncpg.Pool, state: Mapping[str, float]
                      ) -> None:
    """Shared figures (``planner_state``), by key."""
    await conn.execute(QUERIES["store_planner_state"], list(state), list(state.values()))


async def load_state(conn: asyncpg.Connection | asyncpg.Pool) -> dict[str, float]:
    """Every shared figure (``planner_state``), by key."""
    return {row["key"]: row["value"] for row in await conn.fetch(QUERIES["load_planner_state"])}
