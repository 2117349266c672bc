"""`crawler simulate`: compare revisit policies in virtual time (no network, no database)."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict

from crawler.commands.options import (
    fraction,
    non_negative_float,
    non_negative_int,
    positive_float,
    positive_int,
)
from crawler.sim.hint_policies import HINT_POLICIES
from crawler.sim.hints import HintSpec, parse_hint_spec
from crawler.sim.policies import POLICIES
from crawler.sim.populations import POPULATIONS
from crawler.sim.simulator import SimulationResult, build_population, simulate

WARMUP_DAYS = 360.0


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "simulate",
        help="compare revisit policies on a synthetic population in virtual time",
        description="Time-averaged freshness, age and β-currency of each policy under the same "
        "fetch budget (pages / mean-interval fetches per day), after a warm-up.",
    )
    parser.add_argument("--population", choices=sorted(POPULATIONS), default="brewington")
    parser.add_argument(
        "--policy", choices=[*POLICIES, *(name for name in HINT_POLICIES if name not in POLICIES),
                             "all"],
        default="all",
        help="one policy, or all (with --hints: the four that hear hints, "
             f"{', '.join(HINT_POLICIES)}; `optimal` is then the hint-aware one)",
    )
    parser.add_argument("--pages", type=positive_int, default=20_000,
                        help="pages in the population (default 20000)")
    parser.add_argument("--days", type=positive_float, default=720.0,
                        help="virtual days simulated, warm-up included (default 720)")
    parser.add_argument("--mean-interval", type=positive_float, default=30.0, help="average "
                        "days between fetches of a page: the budget is pages / this per day")
    parser.add_argument("--warmup-days", type=non_negative_float, default=WARMUP_DAYS,
                        help=f"excluded from averages, less than --days (default {WARMUP_DAYS:g})")
    parser.add_argument("--seed", type=non_negative_int, default=1,
                        help="random seed, 0 or more (default 1)")
    parser.add_argument("--beta-days", type=positive_float, default=1.0,
                        help="grace of β-currency, above 0 (default 1)")
    parser.add_argument("--last-modified-share", type=fraction, default=0.0,
                        help="share of pages that send a truthful Last-Modified (0 to 1)")
    parser.add_argument(
        # Not dest `hints`: load_settings reads every argument named like a setting.
        "--hints", dest="hint_sources", type=_hint_spec, action="append", default=[],
        metavar="MODE:SHARE[,delay=S][,fp=R][,miss=S]",
        help="a change-hint source on SHARE of each site's pages (repeatable): MODE is accurate, "
             "lying-now or random; delay in seconds (default 300), fp false announcements per "
             "change, miss the share of changes never announced (docs/SIMULATOR.md)",
    )
    parser.add_argument("--json", action="store_true", help="one JSON object per policy per line")
    parser.set_defaults(func=run, check=lambda args: check(parser, args))


def _hint_spec(text: str) -> HintSpec:
    try:
        return parse_hint_spec(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def check(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """What one option's type cannot see: a usage error (`crawler simulate: ...`, exit 2)."""
    if args.warmup_days >= args.days:
        default = " (the default)" if args.warmup_days == WARMUP_DAYS else ""
        parser.error(f"--warmup-days {args.warmup_days:g}{default} must be less than "
                     f"--days {args.days:g}: lower --warmup-days or raise --days")


def _table(results: list[SimulationResult]) -> str:
    header = f"{'policy':<24}{'freshness':>10}{'age (d)':>10}{'β-current':>10}{'fetches':>10}"
    lines = [header, "-" * len(header)]
    for result in results:
        lines.append(
            f"{result.policy:<24}{result.freshness:>10.4f}{result.age_days:>10.3f}"
            f"{result.beta_currency:>10.4f}{result.fetches:>10d}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    if args.policy != "all":
        names = [args.policy]
    else:
        names = list(HINT_POLICIES) if args.hint_sources else list(POLICIES)
    population = build_population(args.population, args.pages, args.days, args.seed)
    results: list[SimulationResult] = []
    for name in names:
        result = simulate(population, name, days=args.days,
                          budget_per_day=args.pages / args.mean_interval,
                          warmup_days=args.warmup_days, beta_days=args.beta_days,
                          seed=args.seed, last_modified_share=args.last_modified_share,
                          hints=args.hint_sources)
        results.append(result)
        if args.json:
            print(json.dumps(asdict(result)), flush=True)
    if not args.json:
        print(
            f"population {args.population}: {args.pages} pages, {args.days:g} days "
            f"(warm-up {args.warmup_days:g}), one fetch per page per {args.mean_interval:g} days"
            + (f"; hints {', '.join(s.label for s in args.hint_sources)}"
               if args.hint_sources else "")
        )
        print(_table(results))
    return 0
