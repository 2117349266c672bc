"""What ``crawler status`` and ``crawler show`` report, as plain JSON-ready dicts.

The JSON shapes are documented in the README and kept stable.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import Any

import asyncpg

from crawler.core.region import Region, effective_region
from crawler.core.stored_plan import BUDGET_FROM_SETTING, Plan, plan_from_row
from crawler.db.estimates import most_overdue_seconds, urls_due_paused
from crawler.db.frontier import to_iso, to_unsigned64
from crawler.db.queries import QUERIES


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        return to_iso(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


LISTED = 5
# A daemon whose heartbeat is older than this is gone (three heartbeats, as the planner counts).
LIVE_DAEMON_SECONDS = 30.0


async def most_overdue_urls(conn: asyncpg.Connection, limit: int) -> list[asyncpg.Record]:
    """The ``limit`` most overdue URLs of hosts not paused: the most overdue URLs of the
    ``limit`` hosts due longest (by their next_due_at), one indexed read per host, so that
    no paused host's backlog is walked. (A host whose next_due_at is stale while leased may
    take a place of one due a little later.)"""
    found: list[asyncpg.Record] = []
    for host in await conn.fetch(QUERIES["most_overdue_hosts"], limit):
        found += await conn.fetch(QUERIES["host_most_overdue_urls"], host["id"], limit)
    return sorted(found, key=lambda r: r["next_fetch_at"])[:limit]


def budget_source(plan: Plan | None) -> str | None:
    """Where the budget in force came from, in words naming the setting."""
    if plan is None:
        return None
    if plan.budget_source == BUDGET_FROM_SETTING:
        return "CRAWLER_BUDGET_PER_DAY"
    return "default: uniform revisits at CRAWLER_DEFAULT_INTERVAL (set CRAWLER_BUDGET_PER_DAY)"


def _age(seconds: float) -> str:
    for unit, size in (("d", 86400.0), ("h", 3600.0), ("min", 60.0)):
        if seconds >= size:
            return f"{seconds / size:.0f} {unit}"
    return f"{seconds:.0f} s"


async def collect_status(url: str) -> dict[str, Any]:
    from crawler.db.connect import connect as db_connect

    conn = await db_connect(url)
    try:
        counts = await conn.fetchrow(QUERIES["status_counts"])
        states = {r["state"]: r["n"] for r in await conn.fetch(QUERIES["urls_by_state"])}
        plan_row = await conn.fetchrow(QUERIES["latest_plan"])
        applying = await conn.fetchrow(QUERIES["daemons_applying_plan"], LIVE_DAEMON_SECONDS)
        overdue = await most_overdue_urls(conn, LISTED)
        paused_due = await urls_due_paused(conn)
        overdue_seconds = await most_overdue_seconds(conn)
        backoff = await conn.fetch(QUERIES["hosts_in_backoff"], LISTED)
        refused = await conn.fetch(QUERIES["hosts_refused"], LISTED)
        paused = await conn.fetch(QUERIES["hosts_paused"], 1000)
    finally:
        await conn.close()
    assert counts is not None
    plan = None if plan_row is None else plan_from_row(plan_row)
    computed = None if plan_row is None else plan_row["solved_at"]
    budget = None if plan is None else plan.budget_per_day
    achieved = None if plan is None else plan.achieved_per_day
    return {
        "planner": {
            "version": None if plan is None else plan.version,
            "mu": None if plan is None else plan.mu,
            "budget_per_day": budget,
            "achieved_per_day": achieved,
            "budget_use": achieved / budget if budget and achieved is not None else None,
            "estimated_freshness": None if plan is None else plan.estimated_freshness,
            "estimated_beta_currency": None if plan is None else plan.estimated_beta_currency,
            "budget_source": budget_source(plan),
            "solved_for": None if plan is None else asdict(plan.solved_for),
            "host_priors": 0 if plan is None else len(plan.host_priors),
            "computed_at": _jsonable(computed),
            "age_seconds": (dt.datetime.now(dt.UTC) - computed).total_seconds()
            if computed is not None else None,
            "daemons_live": applying["live"] if applying else 0,
            "daemons_applying": applying["applying"] if applying else 0,
        },
        "most_overdue": [
            {"url": r["url"], "overdue_seconds": float(r["overdue_seconds"])} for r in overdue
        ],
        "hosts_in_backoff": [
            {"origin": r["origin"], "backoff_until": _jsonable(r["backoff_until"]),
             "consecutive_failures": r["consecutive_failures"],
             "robots_unreachable": r["robots_unreachable"],
             "last_error_kind": r["last_error_kind"],
             "last_error_at": _jsonable(r["last_error_at"])}
            for r in backoff
        ],
        "hosts_paused": [r["origin"] for r in paused],
        "hosts_refused": [
            {"origin": r["origin"], "reason": r["refused_reason"]} for r in refused
        ],
        "urls": counts["urls"],
        "urls_by_state": states,
        "due_now": max(0, counts["due_all"] - paused_due),
        "due_paused": paused_due,
        "hosts": counts["hosts"],
        "hosts_leased": counts["hosts_leased"],
        "fetches_last_hour": counts["fetches_last_hour"],
        "changes_last_hour": counts["changes_last_hour"],
        "most_overdue_seconds": overdue_seconds,
    }


def render_status(status: dict[str, Any]) -> str:
    rows = [
        ("URLs", status["urls"]),
        *((f"  {state}", n) for state, n in sorted(status["urls_by_state"].items())),
        ("due now", status["due_now"]),
        *((("due, hosts paused", status["due_paused"]),) if status["hosts_paused"] else ()),
        ("most overdue", f"{status['most_overdue_seconds']:.0f} s"),
        ("hosts", status["hosts"]),
        ("hosts leased", status["hosts_leased"]),
        ("fetches, last hour", status["fetches_last_hour"]),
        ("changes, last hour", status["changes_last_hour"]),
    ]
    planner = status["planner"]

    def number(value: float | None, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    if planner.get("computed_at"):
        rows.append(("plan in force", f"{planner['version']}, solved {planner['computed_at']} "
                     f"({_age(planner['age_seconds'])} ago)"))
        solved = planner["solved_for"]
        setting = solved["budget_setting_per_day"]
        rows.append(("  solved for", f"{solved['mode']} schedule, {solved['objective']}, budget "
                     + ("derived" if setting is None else f"{setting:.0f}/day")
                     + f", intervals {_age(solved['min_interval_seconds'])}"
                     f"..{_age(solved['max_interval_seconds'])}, default "
                     f"{_age(solved['default_interval_seconds'])}"))
        rows.append(("  applied by", f"{planner['daemons_applying']} of "
                     f"{planner['daemons_live']} live fetch processes"))
    rows += [
        ("estimated freshness", number(planner["estimated_freshness"], ".3f")),
        ("estimated β-currency", number(planner["estimated_beta_currency"], ".3f")),
        ("budget, fetches/day", number(planner["budget_per_day"], ".0f")
         + (f"  ({planner['budget_source']})" if planner.get("budget_source") else "")),
        ("achieved, fetches/day", number(planner["achieved_per_day"], ".0f")),
        ("budget use", number(planner["budget_use"], ".0%")),
        ("planner μ", number(planner["mu"], ".4g")),
    ]
    width = max(len(k) for k, _ in rows)
    lines = [f"{k:<{width}}  {v}" for k, v in rows]
    if status["most_overdue"]:
        lines += ["", "most overdue URLs"]
        lines += [f"  {o['overdue_seconds']:>10.0f} s  {o['url']}" for o in status["most_overdue"]]
    if status["hosts_in_backoff"]:
        lines += ["", "hosts in backoff"]
        lines += [
            f"  {h['origin']}  until {h['backoff_until']}  failures {h['consecutive_failures']}"
            + ("  (robots.txt unreachable)" if h["robots_unreachable"] else "")
            + (f"  last error {h['last_error_kind']}" if h["last_error_kind"] else "")
            for h in status["hosts_in_backoff"]
        ]
    if status["hosts_paused"]:
        lines += ["", "hosts paused (crawler resume --host ORIGIN)"]
        lines += [f"  {origin}" for origin in status["hosts_paused"]]
    if status["hosts_refused"]:
        lines += ["", "hosts refused (never fetched)"]
        lines += [f"  {h['origin']}  {h['reason']}" for h in status["hosts_refused"]]
    return "\n".join(lines)


URL_FIELDS = (
    "url", "origin", "state", "importance", "next_fetch_at", "host_lease_owner",
    "host_lease_expires_at",
    # The last fetch whatever its answer; last_fetched_at: the last that brought content.
    "last_attempt_at", "last_outcome", "last_fetched_at", "last_status", "last_simhash", "etag",
    "last_modified", "fetch_count", "change_count", "consecutive_failures",
    "change_rate_per_day", "fetch_rate_per_day", "changed_intervals_days", "unchanged_days",
    "intervals_observed", "redirect_to", "created_at",
)


async def collect_url(url: str, page_url: str, limit: int) -> dict[str, Any] | None:
    from crawler.db.connect import connect as db_connect

    conn = await db_connect(url)
    try:
        row = await conn.fetchrow(QUERIES["url_row"], page_url)
        if row is None:
            return None
        observations = await conn.fetch(QUERIES["url_observations"], row["id"], limit,
                                    row["host_id"])
    finally:
        await conn.close()
    shown = {name: _jsonable(row[name]) for name in URL_FIELDS}
    # A URL not fetched since migration 0015: its last content fetch is its last attempt known.
    shown["last_attempt_at"] = _jsonable(row["last_attempt_at"] or row["last_fetched_at"])
    shown["last_simhash"] = _hex64(row["last_simhash"])
    shown["region"] = region_shown(row)
    shown["site_patterns"] = site_patterns_shown(row)
    shown["observations"] = [
        {**{k: _jsonable(v) for k, v in o.items()}, "simhash": _hex64(o["simhash"])}
        for o in observations
    ]
    return shown


def _hex64(value: int | None) -> str | None:
    unsigned = to_unsigned64(value)
    return None if unsigned is None else f"{unsigned:016x}"


def region_shown(row: asyncpg.Record) -> str:
    """The watched region in effect (crawler.core.region) and where it comes from."""
    own = Region(row["watch_css"], row["ignore_css"])
    region = effective_region(
        row["watch_css"], row["ignore_css"], row["site_watch_css"], row["site_ignore_css"]
    )
    if region.whole_page:
        return "whole page"
    source = "the URL's own" if not own.whole_page else f"window of {row['site_root_url']}"
    return f"{region.describe()} ({source})"


def site_patterns_shown(row: asyncpg.Record) -> str | None:
    """The URL patterns of the URL's window (crawler.core.patterns); None outside a window."""
    if row["site_root_url"] is None:
        return None
    from crawler.core.patterns import describe

    patterns = describe(row["site_include"], row["site_exclude"]) or "none"
    return f"{patterns} (window of {row['site_root_url']})"


def _shown(value: Any) -> str:
    """A cell of `crawler show`: '-' for no value, as the other tables print it (not None)."""
    return "-" if value is None else str(value)


def render_url(shown: dict[str, Any]) -> str:
    lines = [f"{k:<24} {_shown(shown[k])}" for k in (*URL_FIELDS, "region")]
    if shown.get("site_patterns") is not None:
        lines.append(f"{'site_patterns':<24} {shown['site_patterns']}")
    lines.append("")
    lines.append(f"{'fetched_at':<33} {'outcome':<13} {'status':>6} {'bytes':>8} "
                 f"{'dist':>4} changed")
    for o in shown["observations"]:
        lines.append(
            f"{o['fetched_at']:<33} {o['outcome']:<13} {_shown(o['status']):>6} "
            f"{_shown(o['bytes']):>8} {_shown(o['simhash_distance']):>4} "
            f"{_shown(o['changed'])}"
        )
    return "\n".join(lines)
