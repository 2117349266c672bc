"""What ``crawler status`` and ``crawler show`` report, as plain JSON-ready dicts.

The JSON shapes are documented in docs/USAGE.md and kept stable.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import asdict
from typing import TYPE_CHECKING, Any, cast

from crawler.core.patterns import describe
from crawler.core.region import Region, effective_region
from crawler.db.connect import connect
from crawler.db.rules import UrlRegion
from crawler.db.status import status_rows, url_rows

# The plan's modules load numpy; `crawler status` imports them when it reads a plan (commands
# start fast, `crawler status --help` loads no numpy: tests/unit/test_cli_startup_imports.py).
if TYPE_CHECKING:
    import asyncpg

    from crawler.core.plan import Objective
    from crawler.core.stored_plan import Plan


def _jsonable(value: Any) -> Any:
    if isinstance(value, dt.datetime):
        # None for ±infinity (a parked URL), as crawler.db.frontier.to_iso writes it.
        return None if value.year in (1, 9999) else value.isoformat()
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value).hex()
    if isinstance(value, list):
        return [_jsonable(v) for v in value]
    return value


# Rows of each list `crawler status` shows per page (--limit), as `crawler urls` pages.
LISTED = 100
# A daemon whose heartbeat is older than this is gone (three heartbeats, as the planner counts).
LIVE_DAEMON_SECONDS = 30.0


def budget_source(plan: Plan | None) -> str | None:
    """Where the budget in force came from, in words naming the setting."""
    from crawler.core.stored_plan import BUDGET_FROM_SETTING  # heavy: numpy

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


async def collect_status(url: str, limit: int = LISTED, offset: int = 0) -> dict[str, Any]:
    """The summary, and one page of each list (``limit`` rows from ``offset``; the most
    overdue URLs are a ranking: its first ``limit``), with each list's full length."""
    conn = await connect(url)
    try:
        rows = await status_rows(conn, limit, offset, LIVE_DAEMON_SECONDS)
    finally:
        await conn.close()
    counts, plan, applying, totals = rows.counts, rows.plan, rows.applying, rows.totals
    computed = None if plan is None else plan.solved_at
    budget = None if plan is None else plan.budget_per_day
    achieved = None if plan is None else plan.achieved_per_day
    due_now = max(0, counts["due_all"] - rows.due_paused)
    return {
        "lists": {
            "limit": limit,
            "offset": offset,
            # Each list's full length: a page that shows fewer says so.
            "totals": {
                "most_overdue": due_now,
                "hosts_in_backoff": totals["hosts_in_backoff"],
                "hosts_paused": totals["hosts_paused"],
                "hosts_refused": totals["hosts_refused"],
                "failing": rows.failing[0]["total"] if rows.failing else 0,
            },
        },
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
            {"url": r["url"], "overdue_seconds": float(r["overdue_seconds"])}
            for r in rows.most_overdue
        ],
        "hosts_in_backoff": [
            {"origin": r["origin"], "backoff_until": _jsonable(r["backoff_until"]),
             "consecutive_failures": r["consecutive_failures"],
             "robots_unreachable": r["robots_unreachable"],
             "last_error_kind": r["last_error_kind"],
             "last_error_at": _jsonable(r["last_error_at"])}
            for r in rows.hosts_in_backoff
        ],
        "hosts_paused": [r["origin"] for r in rows.hosts_paused],
        "failing": [{"origin": r["origin"], **_failing(r)} for r in rows.failing[offset:]],
        # Daemons that cannot write their collection now (they claim no hosts meanwhile).
        "storage_faults": [
            {"daemon": r["owner"], "fault": r["storage_fault"]} for r in rows.storage_faults
        ],
        "damaged_records": rows.damaged_records,
        "hosts_refused": [
            {"origin": r["origin"], "reason": r["refused_reason"]} for r in rows.hosts_refused
        ],
        "urls": counts["urls"],
        "urls_by_state": rows.urls_by_state,
        "due_now": due_now,
        "due_paused": rows.due_paused,
        "hosts": counts["hosts"],
        "hosts_leased": counts["hosts_leased"],
        "fetches_last_hour": counts["fetches_last_hour"],
        "changes_last_hour": counts["changes_last_hour"],
        "most_overdue_seconds": rows.most_overdue_seconds,
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
    lists = status.get("lists") or {"limit": None, "offset": 0, "totals": {}}

    def heading(title: str, key: str, ranked: bool = False) -> str:
        """A list's title, with how much of it is shown when that is not all of it."""
        shown = len(status[key])
        total = lists["totals"].get(key, shown)
        first = 0 if ranked else lists["offset"]
        if shown >= total and first == 0:
            return f"{title} ({total})"
        if ranked:
            return f"{title} (the {shown} most overdue of {total} due; --limit for more)"
        if shown == 0:
            return f"{title} ({total}; none from --offset {first})"
        more = (f"; next: --offset {first + shown}" if first + shown < total else "")
        return f"{title} ({first + 1}-{first + shown} of {total}{more})"

    if status["most_overdue"]:
        lines += ["", heading("most overdue URLs", "most_overdue", ranked=True)]
        lines += [f"  {o['overdue_seconds']:>10.0f} s  {o['url']}" for o in status["most_overdue"]]
    if status["hosts_in_backoff"] or lists["totals"].get("hosts_in_backoff"):
        lines += ["", heading("hosts in backoff", "hosts_in_backoff")]
        lines += [
            f"  {h['origin']}  until {h['backoff_until']}  failures {h['consecutive_failures']}"
            + ("  (robots.txt unreachable)" if h["robots_unreachable"] else "")
            + (f"  last error {h['last_error_kind']}" if h["last_error_kind"] else "")
            for h in status["hosts_in_backoff"]
        ]
    if status.get("failing") or lists["totals"].get("failing"):
        lines += ["", heading("failing now (listed until they work again)", "failing")]
        lines += [
            f"  {f['origin'] if f['scope'] == 'host' else f['url']}  {f['scope']}  "
            f"{f['failures']} failures since {f['since']}  last {f['error_kind']}"
            + (f" ({f['url']})" if f["scope"] == "host" else "")
            for f in status["failing"]
        ]
    if status.get("storage_faults"):
        lines += ["", "collection not writable (no hosts claimed until it is)"]
        lines += [f"  {f['daemon']}  {f['fault']}" for f in status["storage_faults"]]
    if status.get("damaged_records"):
        lines += ["", f"damaged records marked: {status['damaged_records']} (crawler verify)"]
    if status["hosts_paused"] or lists["totals"].get("hosts_paused"):
        lines += ["", heading("hosts paused (crawler resume --host ORIGIN)", "hosts_paused")]
        lines += [f"  {origin}" for origin in status["hosts_paused"]]
    if status["hosts_refused"] or lists["totals"].get("hosts_refused"):
        # Refused now, whatever was fetched before: the address policy is checked at every lease.
        lines += ["", heading("hosts refused by the address policy, not fetched while refused",
                              "hosts_refused")]
        lines += [f"  {h['origin']}  {h['reason']}" for h in status["hosts_refused"]]
    return "\n".join(lines)


def more_hint(status: dict[str, Any]) -> str | None:
    """The command for the next page of the host lists, when a list goes on past this one
    (printed on stderr, as `crawler urls` does)."""
    lists = status["lists"]
    end = lists["offset"] + lists["limit"]
    if any(lists["totals"][key] > end
           for key in ("hosts_in_backoff", "hosts_paused", "hosts_refused", "failing")):
        return f"more: crawler status --limit {lists['limit']} --offset {end}"
    return None


URL_FIELDS = (
    "url", "origin", "state", "importance", "next_fetch_at", "host_lease_owner",
    "host_lease_expires_at",
    # The last fetch whatever its answer; last_fetched_at: the last that brought content.
    "last_attempt_at", "last_outcome", "last_fetched_at", "last_status", "last_simhash", "etag",
    "last_modified", "fetch_count", "change_count", "consecutive_failures",
    "change_rate_per_day", "fetch_rate_per_day", "changed_intervals_days", "unchanged_days",
    "intervals_observed", "redirect_to", "created_at",
    # When no sitemap of its host listed it any more; None while one does.
    "unlisted_at",
)


async def collect_url(url: str, page_url: str, limit: int) -> dict[str, Any] | None:
    conn = await connect(url)
    try:
        found = await url_rows(conn, page_url, limit)
    finally:
        await conn.close()
    if found is None:
        return None
    row = found.url
    shown = {name: _jsonable(row[name]) for name in URL_FIELDS}
    # A URL with no attempt recorded: its last content fetch is its last attempt known.
    shown["last_attempt_at"] = _jsonable(row["last_attempt_at"] or row["last_fetched_at"])
    shown["last_simhash"] = _hex64(row["last_simhash"])
    shown["region"] = region_shown(UrlRegion(row["watch_css"], row["ignore_css"],
                                             row["site_root_url"], row["site_watch_css"],
                                             row["site_ignore_css"]))
    shown["site_patterns"] = site_patterns_shown(row)
    # The newest plan's μ tells whether the URL's own bounds (crawler bound) bind.
    shown["schedule_bounds"] = bounds_shown(row, found.plan)
    shown["observations"] = [
        {**{k: _jsonable(v) for k, v in o.items()}, "simhash": _hex64(o["simhash"])}
        for o in found.observations
    ]
    shown["hints"] = [{k: _jsonable(v) for k, v in h.items()} for h in found.hints]
    # The URL's run of failures and its host's (robots.txt included), until they work again.
    shown["failing"] = [_failing(f) for f in found.failing]
    return shown


def _failing(row: Any) -> dict[str, Any]:
    """A run of failures (of a URL, or of its host: url_id 0), as status and show list it."""
    return {"scope": "host" if row["url_id"] == 0 else "url", "url": row["url"],
            "failures": row["failures"], "error_kind": row["error_kind"],
            "since": _jsonable(row["first_failed_at"]), "last": _jsonable(row["last_failed_at"]),
            "alerted": row["raised"]}


def _hex64(value: int | None) -> str | None:
    from crawler.db.frontier import to_unsigned64  # heavy: numpy (the fingerprints)

    unsigned = to_unsigned64(value)
    return None if unsigned is None else f"{unsigned:016x}"


def region_shown(row: UrlRegion) -> str:
    """The watched region in effect (crawler.core.region) and where it comes from."""
    own = Region(row.watch_css, row.ignore_css)
    region = effective_region(row.watch_css, row.ignore_css, row.site_watch_css,
                              row.site_ignore_css)
    if region.whole_page:
        return "whole page"
    source = "the URL's own" if not own.whole_page else f"window of {row.site_root_url}"
    return f"{region.describe()} ({source})"


def site_patterns_shown(row: asyncpg.Record) -> str | None:
    """The URL patterns of the URL's window (crawler.core.patterns); None outside a window."""
    if row["site_root_url"] is None:
        return None
    patterns = describe(row["site_include"], row["site_exclude"]) or "none"
    return f"{patterns} (window of {row['site_root_url']})"


def _shown(value: Any) -> str:
    """A cell of `crawler show`: '-' for no value, as the other tables print it (not None)."""
    return "-" if value is None else str(value)


def render_url(shown: dict[str, Any]) -> str:
    lines = [f"{k:<24} {_shown(shown[k])}" for k in (*URL_FIELDS, "region")]
    if shown.get("site_patterns") is not None:
        lines.append(f"{'site_patterns':<24} {shown['site_patterns']}")
    if shown.get("schedule_bounds") is not None:
        lines.append(f"{'schedule_bounds':<24} {bounds_line(shown['schedule_bounds'])}")
    for f in shown.get("failing", ()):
        lines.append(f"{'failing (' + f['scope'] + ')':<24} {f['failures']} failures since "
                     f"{f['since']}, last {f['error_kind']} ({f['url']})")
    lines.append("")
    lines.append(f"{'fetched_at':<33} {'outcome':<13} {'status':>6} {'bytes':>8} "
                 f"{'dist':>4} changed")
    for o in shown["observations"]:
        lines.append(
            f"{o['fetched_at']:<33} {o['outcome']:<13} {_shown(o['status']):>6} "
            f"{_shown(o['bytes']):>8} {_shown(o['simhash_distance']):>4} "
            f"{_shown(o['changed'])}"
        )
    if shown.get("hints"):
        lines.append("")
        lines.append(f"{'claimed_at':<33} {'kind':<10} {'seen_at':<33} source")
        for h in shown["hints"]:
            lines.append(f"{h['claimed_at']:<33} {h['kind']:<10} {h['seen_at']:<33} "
                         f"{h['source']}")
    return "\n".join(lines)


# --- a URL's own schedule bounds (crawler bound) ----------------------------------------


def rule_shown(min_seconds: float | None, max_seconds: float | None, windows: str) -> str:
    """A rule in the words of its options."""
    from crawler.core.url_bounds import duration_shown  # heavy: numpy

    parts = []
    if max_seconds is not None:
        parts.append(f"at least every {duration_shown(max_seconds)}")
    if min_seconds is not None:
        parts.append(f"at most every {duration_shown(min_seconds)}")
    if windows:
        parts.append(f"only in {windows} (UTC)")
    return ", ".join(parts) or "no bounds"


def bounds_shown(row: Any, plan: Plan | None) -> dict[str, Any] | None:
    """``crawler show``'s account of a URL's own schedule: its rule, the optimum's interval
    without it (under the newest plan's μ), and which bound is binding; None without a rule.

    ``row``: the URL's row (url_row); ``plan``: the newest plan or None."""
    min_seconds = row["own_min_interval_seconds"]
    max_seconds = row["own_max_interval_seconds"]
    windows = row["fetch_windows"] or ""
    if min_seconds is None and max_seconds is None and not windows:
        return None
    shown: dict[str, Any] = {
        "rule": rule_shown(min_seconds, max_seconds, windows),
        "own_min_interval_seconds": min_seconds,
        "own_max_interval_seconds": max_seconds,
        "windows": windows or None,
        "optimal_interval_seconds": None,
        "binding": None,
    }
    if plan is None or plan.mu is None:
        return shown
    from crawler.core.plan import fetch_rate_for  # heavy: numpy
    from crawler.core.url_bounds import binding_bound  # heavy: numpy

    rate = row["change_rate_per_day"]
    if rate is None:
        rate = plan.prior.mean_rate_per_day
    solved_for = plan.solved_for
    optimal = fetch_rate_for(
        rate, row["importance"], plan.mu, cast("Objective", solved_for.objective),
        solved_for.min_interval_seconds / 86400.0, solved_for.max_interval_seconds / 86400.0,
        beta_days=solved_for.beta_seconds / 86400.0,
    )
    shown["optimal_interval_seconds"] = 86400.0 / optimal if optimal > 0 else None
    shown["binding"] = binding_bound(optimal, min_seconds, max_seconds)
    return shown


def bounds_line(shown: dict[str, Any]) -> str:
    """One line for ``crawler show``: the rule, and whether it or the optimum decides."""
    from crawler.core.url_bounds import duration_shown  # heavy: numpy

    line = shown["rule"]
    optimal = shown["optimal_interval_seconds"]
    if shown["binding"] is None:
        return f"{line}; no plan yet"
    if optimal is None:
        return f"{line}; binding: {shown['binding']}"
    optimum = f"the optimum alone would fetch every {duration_shown(round(optimal, 1))}"
    if shown["binding"] == "none":
        return f"{line}; not binding ({optimum})"
    return f"{line}; binding: {shown['binding']} ({optimum})"
