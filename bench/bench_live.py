"""Live freshness against ground truth: the real daemon, as deployed, on a web whose changes
are known. Not part of the suite (tests/acceptance/test_live_freshness.py runs a short one).

    python bench/bench_live.py [--seconds 300] [--pages 300] [--hosts 30]
        [--budget-per-day 518400] [--database-url postgresql://postgres@127.0.0.1:5432/postgres]
        [--hints]

Two daemons (``crawler run``, default --processes), one optimal and one uniform at the same
budget, crawl the same loopback web at the same time for ``--seconds``: Poisson pages with
mean change intervals spanning --fastest to --slowest seconds, clocked pages, and pages that
disappear and come back. Then it prints their true time-averaged freshness and age after the
warm-up, the simulator's prediction for the same pages and budget, the analytic oracle and
uniform schedule for the Poisson pages at the live daemons' own fetch rates, and the share of
the oracle's gain over uniform that the live optimal daemon captured.

With ``--hints`` the two daemons are both optimal at the same budget, one taking sitemap dates
as evidence (``CRAWLER_HINTS=on``) and one ignoring them (``off``), on the same web whose
sites all serve a sitemap: a third date their pages truthfully, a sixth at random moments, a
sixth with the moment of reading, and a third give no dates. It prints each one's true
freshness over all pages and per group, the difference, both fetch rates and sitemap read
rates, and how each site's dates ended up classified.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time

from scratch import add_database_url, server_url

from crawler.demo.harness import HintsRun, LiveConfig, LiveRun, run_hints, run_live
from crawler.sim.live import format_hint_table, format_table

DEFAULTS = LiveConfig()


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=DEFAULTS.seconds,
                        help="How long both daemons crawl (default %(default)s).")
    parser.add_argument("--warmup-seconds", type=float, default=None,
                        help="Left out of the measurement (default: a fifth of the run, at "
                             "most 60).")
    parser.add_argument("--pages", type=int, default=DEFAULTS.pages)
    parser.add_argument("--hosts", type=int, default=DEFAULTS.hosts,
                        help="Sites, each on its own loopback address (default %(default)s).")
    parser.add_argument("--budget-per-day", type=float, default=DEFAULTS.budget_per_day,
                        help="CRAWLER_BUDGET_PER_DAY of both daemons (default %(default)g, "
                             "6 fetches a second).")
    parser.add_argument("--fastest", type=float, default=DEFAULTS.fastest_seconds,
                        help="Shortest mean change interval, seconds (default %(default)s).")
    parser.add_argument("--slowest", type=float, default=DEFAULTS.slowest_seconds,
                        help="Longest mean change interval, seconds (default %(default)s).")
    parser.add_argument("--planner-interval", type=float, default=DEFAULTS.planner_interval,
                        help="CRAWLER_PLANNER_INTERVAL, seconds (default %(default)s).")
    parser.add_argument("--seed", type=int, default=DEFAULTS.seed)
    parser.add_argument("--hints", action="store_true",
                        help="Compare the optimal daemon taking sitemap dates as evidence with "
                             "the same daemon ignoring them (CRAWLER_HINTS=on/off).")
    parser.add_argument("--hints-budget-scale", type=float, default=None,
                        help="With --hints, also run the daemon taking hints at this share "
                             "of the budget (to compare at equal fetch rates).")
    parser.add_argument("--sitemap-max-interval", type=float, default=None,
                        help="CRAWLER_SITEMAP_MAX_INTERVAL of both daemons, seconds (default: "
                             "the daemon's).")
    add_database_url(parser)
    return parser.parse_args(argv)


def config_from(args: argparse.Namespace) -> LiveConfig:
    warmup = args.warmup_seconds
    if warmup is None:
        warmup = min(60.0, args.seconds / 5.0)
    if not 0 <= warmup < args.seconds:
        raise SystemExit("--warmup-seconds must be shorter than --seconds")
    return LiveConfig(
        seconds=args.seconds, warmup_seconds=warmup, pages=args.pages, hosts=args.hosts,
        budget_per_day=args.budget_per_day, seed=args.seed, fastest_seconds=args.fastest,
        slowest_seconds=args.slowest, planner_interval=args.planner_interval,
        compare="hints" if args.hints else "schedules",
        sitemap_max_interval=args.sitemap_max_interval,
        hints_budget_scale=args.hints_budget_scale,
    )


def report(run: LiveRun, config: LiveConfig, elapsed: float) -> str:
    lines = [
        format_table(run.evaluation),
        f"{config.pages} pages on {config.hosts} hosts, mean change intervals "
        f"{config.fastest_seconds:g}-{config.slowest_seconds:g} s; "
        f"{config.seconds:g} s crawled, measured after {config.warmup_seconds:g} s; "
        f"uniform interval {config.uniform_interval:.1f} s; run took {elapsed:.0f} s",
    ]
    state = run.planner_state["optimal"]
    shown = ", ".join(f"{key}={value:.4g}" for key, value in state.items())
    lines.append(f"optimal daemon's plan in force at the end: {shown or 'none stored'}")
    lines.append("optimal daemon's URLs still at the uniform fallback rate: "
                 f"{run.fallback_urls['optimal']} of {config.pages}")
    lines.append("pages never fetched: " + ", ".join(
        f"{schedule} {count}" for schedule, count in run.never_fetched.items()))
    return "\n".join(lines)


def hints_report(run: HintsRun, config: LiveConfig, elapsed: float) -> str:
    evaluation = run.evaluation
    lines = [format_hint_table(evaluation)]
    budget = config.budget_per_day / 86400.0
    lines.append(f"fetches/s (budget {budget:.2f}): " + ", ".join(
        f"{arm} {evaluation.fetches_per_second(arm):.2f}" for arm, _ in evaluation.arms))
    lines.append("sitemap reads/s: " + ", ".join(
        f"{arm} {rate:.2f}" for arm, rate in run.sitemap_reads_per_second.items()))
    lines.append("sites by sitemap dates and stored trust (sites: hits/false alarms/misses/"
                 "quiet):")
    for arm, trust in run.trust.items():
        shown = ", ".join(f"{dates} {cls} {sites}: {'/'.join(map(str, tests))}"
                          for (dates, cls), (sites, *tests) in sorted(trust.items()))
        lines.append(f"  {arm}: {shown}")
    off = evaluation.arms[-1][0]
    for on, _ in evaluation.arms[:-1]:
        difference = evaluation.freshness(on) - evaluation.freshness(off)
        lines.append(f"freshness {on} - {off}: {difference:+.4f}")
    lines.append(
        f"{config.pages} pages on {config.hosts} hosts, mean change intervals "
        f"{config.fastest_seconds:g}-{config.slowest_seconds:g} s; {config.seconds:g} s "
        f"crawled, measured after {config.warmup_seconds:g} s; seed {config.seed}; run took "
        f"{elapsed:.0f} s"
    )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    config = config_from(args)
    started = time.monotonic()
    with server_url(args.database_url) as url:
        if config.compare == "hints":
            hints = asyncio.run(run_hints(config, url))
            print(hints_report(hints, config, time.monotonic() - started), flush=True)
        else:
            run = asyncio.run(run_live(config, url))
            print(report(run, config, time.monotonic() - started), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
