"""The frontier's gauges without counting whole tables: PostgreSQL's own row estimates.

A count over 10^7 URLs every 30 s in every daemon is real load for a dashboard figure. Above
``EXACT_BELOW_ROWS`` rows each figure is the query planner's row estimate (``EXPLAIN``);
small tables are counted exactly, as their statistics may be missing or stale. One daemon
per fleet samples and stores the figures in ``planner_state``; every daemon publishes them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, cast

import asyncpg

from crawler.db import fleet
from crawler.db.queries import QUERIES

EXACT_BELOW_ROWS = 100_000
# Paused hosts' due URLs are counted exactly up to this many (an index-only range scan per
# paused host, ~0.1 s at the cap), then estimated: a pause is rare, its backlog bounded.
PAUSED_DUE_COUNTED_UP_TO = 1_000_000
FIGURE_PREFIX = "figure:"


@dataclass(frozen=True, slots=True)
class FrontierFigures:
    urls_by_state: dict[str, int]
    due_now: int  # due URLs of hosts not paused: the backlog
    most_overdue_seconds: float  # the most overdue URL of a host not paused
    hosts_leased: int
    hosts_in_backoff: int
    hosts_circuit_open: int
    estimated: bool
    due_paused: int = 0  # due URLs of paused hosts: never fetched until resumed, no backlog

    def as_state(self) -> dict[str, float]:
        """The figures as planner_state rows (key, value)."""
        values = {f"state:{s}": float(n) for s, n in self.urls_by_state.items()}
        values.update(
            due_now=self.due_now, due_paused=self.due_paused,
            most_overdue_seconds=self.most_overdue_seconds, hosts_leased=self.hosts_leased,
            hosts_in_backoff=self.hosts_in_backoff, hosts_circuit_open=self.hosts_circuit_open,
            estimated=float(self.estimated),
        )
        return {FIGURE_PREFIX + k: float(v) for k, v in values.items()}

    @classmethod
    def from_state(cls, state: dict[str, float]) -> FrontierFigures | None:
        figures = {k.removeprefix(FIGURE_PREFIX): v for k, v in state.items()
                   if k.startswith(FIGURE_PREFIX)}
        if "due_now" not in figures:
            return None
        return cls(
            {k[len("state:") :]: int(v) for k, v in figures.items() if k.startswith("state:")},
            int(figures["due_now"]),
            figures["most_overdue_seconds"],
            int(figures["hosts_leased"]),
            int(figures["hosts_in_backoff"]),
            int(figures["hosts_circuit_open"]),
            bool(figures["estimated"]),
            # Absent from figures a daemon older than due_paused stored.
            int(figures.get("due_paused", 0.0)),
        )


def _distributed_job(node: dict[str, Any]) -> dict[str, Any] | None:
    """The Citus job in a plan tree (its ``Distributed Query``), if there is one."""
    job = node.get("Distributed Query", {}).get("Job")
    if job is not None:
        return cast(dict[str, Any], job)
    for child in node.get("Plans", ()):
        found = _distributed_job(child)
        if found is not None:
            return found
    return None


def plan_rows(explained: list[dict[str, Any]]) -> int:
    """The row estimate of an ``EXPLAIN (FORMAT JSON)``. On Citus the coordinator's node
    carries a placeholder (always 100,000) and the real estimates are the shards': those shown
    (one of N by default) are scaled to all N, each shard holding about as many rows."""
    top = explained[0]["Plan"]
    job = _distributed_job(top)
    if job is None or not job.get("Tasks"):
        return int(top["Plan Rows"])
    shown = [int(task["Remote Plan"][0][0]["Plan"]["Plan Rows"]) for task in job["Tasks"]]
    return round(sum(shown) * int(job.get("Task Count", len(shown))) / len(shown))


async def estimated_rows(conn: asyncpg.Connection | asyncpg.Pool, query: str, *args: object) -> int:
    """The query planner's row estimate for ``query`` (it is planned, not run)."""
    plan = await conn.fetchval("EXPLAIN (FORMAT JSON) " + query, *args)
    return plan_rows(json.loads(plan) if isinstance(plan, str) else plan)


async def urls_due_paused(conn: asyncpg.Connection | asyncpg.Pool) -> int:
    """Due URLs of paused hosts (no backlog: kept out of "due now"), exact up to
    PAUSED_DUE_COUNTED_UP_TO, estimated beyond; counted host by host from the few paused
    hosts, never found by walking the due URLs of every host."""
    paused = [r["id"] for r in await conn.fetch(QUERIES["paused_host_ids"])]
    if not paused:
        return 0
    counted = int(await conn.fetchval(QUERIES["urls_due_paused"], paused,
                                      PAUSED_DUE_COUNTED_UP_TO))
    if counted < PAUSED_DUE_COUNTED_UP_TO:
        return counted
    return max(counted, await estimated_rows(conn, QUERIES["estimate_urls_due_paused"], paused))


async def most_overdue_seconds(conn: asyncpg.Connection | asyncpg.Pool) -> float:
    """How late the most overdue URL of a host not paused is (0 when none is due)."""
    return float(await conn.fetchval(QUERIES["most_overdue_seconds"]) or 0.0)


async def frontier_figures(
    conn: asyncpg.Connection | asyncpg.Pool, breaker_failure_threshold: int
) -> FrontierFigures:
    """The gauges' figures: estimates on a large frontier, exact counts on a small one.
    Paused hosts' due URLs are counted apart (``due_paused``), not in the backlog."""
    overdue = await most_overdue_seconds(conn)
    leased = int(await conn.fetchval(QUERIES["hosts_leased_count"]))
    paused_due = await urls_due_paused(conn)
    total = await estimated_rows(conn, QUERIES["estimate_urls"])
    if total < EXACT_BELOW_ROWS:
        counts = await conn.fetchrow(QUERIES["status_counts"])
        states = {r["state"]: r["n"] for r in await conn.fetch(QUERIES["urls_by_state"])}
        health = await conn.fetchrow(QUERIES["hosts_health"], breaker_failure_threshold)
        assert counts is not None and health is not None
        return FrontierFigures(
            states, max(0, counts["due_all"] - paused_due), overdue, leased,
            health["in_backoff"], health["circuit_open"], estimated=False,
            due_paused=paused_due,
        )
    from crawler.db.schema import URL_STATES  # heavy: sqlalchemy, which `crawler status` skips

    states = {
        state: await estimated_rows(conn, QUERIES["estimate_urls_in_state"], state)
        for state in URL_STATES
    }
    return FrontierFigures(
        {s: n for s, n in states.items() if n > 1},  # 1 is the planner's floor: none seen
        max(0, await estimated_rows(conn, QUERIES["estimate_urls_due"]) - paused_due),
        overdue,
        leased,
        await estimated_rows(conn, QUERIES["estimate_hosts_in_backoff"]),
        await estimated_rows(conn, QUERIES["estimate_hosts_circuit_open"],
                             breaker_failure_threshold),
        estimated=True,
        due_paused=paused_due,
    )


async def fleet_figures(
    pool: asyncpg.Pool, breaker_failure_threshold: int, claim_seconds: float
) -> FrontierFigures | None:
    """The figures a daemon publishes: sampled here and stored when no daemon of the fleet
    sampled in the last ``claim_seconds`` (one samples for all), else the stored ones (None
    before the first sample)."""
    if await fleet.claim_job(pool, "sampler", claim_seconds):
        figures = await frontier_figures(pool, breaker_failure_threshold)
        await fleet.store_state(pool, figures.as_state())
        return figures
    return FrontierFigures.from_state(await fleet.load_state(pool))
