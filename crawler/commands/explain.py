"""``crawler explain URL [--json]``: why the URL is scheduled when it is.

Its rate estimate and the evidence behind it (fetches, changes, intervals, dated changes, an
update clock), the plan's version and multiplier, the fetch rate they give and the bound that
binds, its change hints (sitemap dates, feed dates, pings) and how far each source of them is
trusted on its host (the four counts, the posterior means, the classification and why), what
that makes of its schedule (its own, waiting for announcements, made due by one, brought
forward by a noisy one), the host's politeness, and the next fetch time: the one the daemon
stored, the one this account expects, and whether they agree (docs/USAGE.md,
docs/MODEL.md section 9).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from typing import Any

import asyncpg

from crawler.commands.context import load_settings, normalized, with_conn
from crawler.commands.options import add_collection_options, plain
from crawler.core.explain import HostState, PlanState, SourceEvidence, duration, explain
from crawler.core.hint_trust import HintCounts
from crawler.core.schedule import SchedulePolicy
from crawler.core.stored_plan import applied
from crawler.db.frontier import record_from_row
from crawler.db.status import explain_rows

HINTS_SHOWN = 20


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    text = "Why a URL is scheduled when it is: its rate, its hints and their trust, the plan."
    parser = subparsers.add_parser("explain", help=text, description=plain(__doc__),
                                   formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("url", metavar="URL")
    parser.add_argument("--json", action="store_true", help="Machine-readable output.")
    add_collection_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


def _finite(value: float | None) -> float | None:
    return None if value is None or not math.isfinite(value) else float(value)


async def gather(conn: asyncpg.Connection, url: str, settings: Any) -> dict[str, Any] | None:
    """The account of ``url`` (crawler.core.explain), None for an unknown URL."""
    found = await explain_rows(conn, url, HINTS_SHOWN)
    if found is None:
        return None
    row, plan, hints, sources = found.url, found.plan, found.hints, found.sources
    policy = applied(SchedulePolicy(settings), plan)
    record = record_from_row(row)
    evidence = [
        SourceEvidence(
            source=s["source"],
            counts=HintCounts(
                s["hits"] or 0, s["false_alarms"] or 0, s["misses"] or 0, s["quiet"] or 0,
                s["expected_hinted"] or 0.0, s["expected_silent"] or 0.0, s["dates"] or 0,
                s["stamped_now"] or 0),
            classification=s["classification"],
            tested_class=s["tested_class"],
            announced_at_fetch=int(s["announced_at_fetch"]),
            announced_since_fetch=bool(s["announced_since_fetch"]),
            first_seen_since_fetch=s["first_seen_since_fetch"],
            claims=int(s["claims"]),
        )
        for s in sources
    ]
    return explain(
        record,
        state=row["state"],
        next_fetch_at=row["next_fetch_at"],
        last_attempt_at=_finite(row["last_attempt_at"]),
        last_outcome=row["last_outcome"],
        fetch_rate_per_day=row["fetch_rate_per_day"],
        policy=policy,
        plan=None if plan is None or plan.solved_at is None else PlanState(
            version=plan.version, mu=plan.mu, objective=plan.solved_for.objective,
            mode=plan.solved_for.mode, complete_sampled=plan.complete_sampled,
            solved_at=plan.solved_at.timestamp()),
        hints=[{"kind": h["kind"], "claimed_at": h["claimed_at"].isoformat(),
                "source": h["source"], "seen_at": h["seen_at"].isoformat()} for h in hints],
        sources=evidence,
        hints_since=_finite(row["hints_since"]),
        planned_at=_finite(row["planned_at"]) if row["planned_at"] is not None else None,
        host=HostState(
            origin=row["origin"], next_request_at=_finite(row["host_next_request_at"]),
            backoff_until=_finite(row["host_backoff_until"]),
            crawl_delay_seconds=row["crawl_delay_seconds"],
            politeness_delay=settings.politeness_delay, paused=bool(row["paused"]),
            lease_owner=row["lease_owner"],
            lease_expires_at=_finite(row["host_lease_expires_at"])),
        now=time.time(),
    )


def render(shown: dict[str, Any]) -> str:
    """The account as text: one section per step of the decision."""
    lines = [f"{shown['url']}  ({shown['state']}, last fetch {shown['last_fetched_at'] or '-'},"
             f" last attempt {shown['last_attempt_at'] or '-'} {shown['last_outcome'] or ''})",
             ""]
    rate, evidence = shown["rate"], shown["rate"]["evidence"]
    prior, stored = rate["prior"], rate["change_rate_per_day"]
    lines += [
        "rate estimate",
        f"  change rate      {'-' if stored is None else f'{stored:.4g}'}/day stored at "
        f"the last fetch, {rate['estimate_now']:.4g}/day under the prior now",
        f"  prior            Gamma(shape {prior['shape']:.3g}, rate "
        f"{prior['rate_days']:.3g} days): {prior['mean_per_day']:.3g}/day before any evidence",
        f"  evidence         {evidence['fetches']} fetches, {evidence['changes']} "
        f"changes; {evidence['intervals_observed']} intervals observed, "
        f"{evidence['changed_intervals']} changed, "
        f"{evidence['unchanged_days']:.3g} days seen unchanged",
    ]
    if evidence["changed_interval_days"]:
        shown_days = ", ".join(duration(d * 86400) for d in evidence["changed_interval_days"])
        lines.append(f"  changed in       {shown_days} (newest last)")
    lm = evidence["last_modified"]
    if lm["fetches"]:
        lines.append(f"  Last-Modified    {lm['fetches']} dated fetches, {lm['changes']} "
                     f"changes, {lm['observed_days']:.3g} days")
    if evidence["update_clock"]:
        clock = evidence["update_clock"]
        lines.append(f"  update clock     every {duration(clock['period_days'] * 86400)}, "
                     f"jitter {duration(clock['jitter_days'] * 86400)}")
    plan = shown["plan"]
    lines += ["", "plan"]
    if plan is None:
        lines.append("  none solved yet: the uniform interval")
    else:
        mu = "-" if plan["mu"] is None else f"{plan['mu']:.4g}"
        complete = (f", {plan['complete_sampled']} sampled pages completely observed"
                    if plan["complete_sampled"] else "")
        lines.append(f"  version {plan['version']} ({plan['mode']}, {plan['objective']}), "
                     f"μ = {mu}{complete}, solved {plan['solved_at']}")
    rate_f = shown["fetch_rate_per_day"]
    if rate_f:
        lines.append(f"  fetch rate       {rate_f:.4g}/day: every {duration(86400 / rate_f)}")
    bounds = shown["bounds"]
    lines.append(f"  bounds           {duration(bounds['shortest_seconds'])} to "
                 f"{duration(bounds['longest_seconds'])}"
                 + (f", windows {bounds['windows']}" if bounds["windows"] else ""))
    lines += ["", "hints"]
    if not shown["sources"]:
        lines.append("  none")
    for s in shown["sources"]:
        lines += [
            f"  {s['source']:<10} {s['classification']}: {s['hits']} hits, "
            f"{s['false_alarms']} false alarms, {s['misses']} misses, "
            f"{s['quiet']} quiet; {s['dates']} dates read, {s['stamped_now']} stamped now",
            f"  {'':<10} precision {s['precision']:.2f}, recall {s['recall']:.2f}, "
            f"false alarms {s['false_alarm']:.2f} ({s['reason']})",
            f"  {'':<10} this URL: {s['claims']} claims, {s['announced']} "
            f"announcements ({s['announced_rate_per_day']:.3g}/day)"
            + ("; a change announced since its last fetch"
               if s["announced_since_last_fetch"] else ""),
        ]
        if s.get("pings"):
            lines.append(f"  {'':<10} pings {s['pings']}")
    for h in shown["hints"][:5]:
        lines.append(f"  claimed {h['claimed_at']}  {h['kind']:<9} seen {h['seen_at']}  "
                     f"{h['source']}")
    schedule, politeness, due = shown["schedule"], shown["politeness"], shown["due_in_seconds"]
    agrees = {True: "agrees", False: "DIFFERS", None: "not checked"}[schedule["agrees"]]
    lines += [
        "",
        "schedule",
        f"  {schedule['kind']}: {schedule['reason']}",
        f"  binding          {schedule['binding']}",
        f"  next fetch       {shown['next_fetch_at']} (stored); expected "
        f"{schedule['expected_next_fetch_at'] or '-'}: {agrees}",
        f"  politeness       {politeness['binding']}; delay "
        f"{duration(politeness['delay_seconds'])}"
        + (f", leased by {politeness['lease_owner']}" if politeness["lease_owner"] else ""),
        f"  request          not before {shown['request_not_before']}"
        + ("" if due is None else (f" (in {duration(due)})" if due > 0 else " (due now)")),
    ]
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    url = normalized(args.url)
    settings = load_settings(args)
    shown = with_conn(args, lambda conn: gather(conn, url, settings))
    if shown is None:  # as `crawler show` says it
        print(f"unknown URL: {url}", file=sys.stderr)
        return 1
    print(json.dumps(shown, indent=2) if args.json else render(shown))
    return 0
