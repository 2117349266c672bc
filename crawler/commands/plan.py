"""`crawler plan`: how often must the collection be re-fetched to stay (α, β)-current?
(Brewington & Cybenko (2000) section 6, computed by crawler.core.capacity.)"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

import asyncpg

from crawler.commands.context import load_settings, resolve_url
from crawler.commands.options import add_common_options
from crawler.core import capacity
from crawler.core.lifetime_fit import PageObservation, fit_lifetimes
from crawler.core.model import SECONDS_PER_DAY
from crawler.db.connect import _run_blocking
from crawler.report.data import load_url_histories, page_observations


def load_observation_spans_from_db(database_url: str) -> list[PageObservation]:
    """Per-page observations for the lifetime fit (crawler.report.data.page_observations)."""
    return page_observations(_run_blocking(load_url_histories(database_url)))


def _parsed(parse: Callable[[str], float], what: str) -> Callable[[str], float]:
    """Wrap a unit parser so argparse reports bad input as a usage error."""

    def convert(text: str) -> float:
        try:
            return parse(text)
        except ValueError as error:
            raise argparse.ArgumentTypeError(f"{what}: {error}") from None

    convert.__name__ = what
    return convert


def _check(args: argparse.Namespace) -> None:
    """Only --from-db needs the database: check it first, as the other commands do."""
    args.needs_db = "schema" if args.from_db else None


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "plan",
        help="Re-fetch period, bandwidth and (α, β)-currency of a collection.",
        description="How often must a collection be re-fetched to stay (α, β)-current? "
        "Brewington & Cybenko (2000) section 6: the uniform re-fetch period for a target "
        "(α, β), the α of a given period, the fetch rate and bandwidth for a collection size, "
        "and what the optimal per-page schedule reaches with the same budget.",
    )
    duration = _parsed(capacity.parse_duration_days, "duration")
    parser.add_argument("--weibull-shape", type=float, default=None, help="shape σ of the "
                        "Weibull distribution of mean change intervals (paper: 1.4)")
    parser.add_argument("--weibull-scale", type=duration, default=None, help="scale θ of that "
                        "distribution, with a unit: 152.2d, 5w (bare number: days)")
    parser.add_argument("--from-db", action="store_true",
                        help="fit the Weibull to the crawler's own change observations instead")
    parser.add_argument("--alpha", type=float, default=0.95,
                        help="target fraction of pages β-current (default 0.95)")
    parser.add_argument("--beta", type=duration, default=1.0, help="grace period β with a "
                        "unit: 1d, 1w, 6h, 30m (bare number: days; default 1d)")
    parser.add_argument("--period", type=duration, default=None,
                        help="evaluate this re-fetch period T (e.g. 7d) instead of solving for it")
    parser.add_argument("--pages", type=_parsed(capacity.parse_count, "count"), default=None,
                        help="pages in the collection, e.g. 800e6")
    parser.add_argument("--page-size", type=_parsed(capacity.parse_size_bytes, "size"),
                        default=None, help="mean page size: 12KB (KB = 1000 bytes, KiB = 1024)")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    add_common_options(parser)  # the database of --from-db, as every command names it
    parser.set_defaults(check=_check, func=run)


def compute_plan(*, shape: float, scale_days: float, alpha: float, beta_days: float,
                 period_days: float | None = None, pages: float | None = None,
                 page_size_bytes: float | None = None) -> dict[str, Any]:
    """The figures `crawler plan` prints, as a JSON-ready dict (days unless named)."""
    required = capacity.required_period(alpha, beta_days, shape, scale_days)
    period = required if period_days is None else period_days
    optimal = capacity.optimal_alpha(period, beta_days, shape, scale_days)
    result: dict[str, Any] = {
        "weibull_shape": shape,
        "weibull_scale_days": scale_days,
        "alpha_target": alpha,
        "beta_days": beta_days,
        "uniform_period_days": required,
        "period_days": period,
        "alpha_at_period": capacity.alpha_for_period(period, beta_days, shape, scale_days),
        "optimal_alpha_at_period": optimal.alpha,
        "optimal_fraction_not_fetched": optimal.fraction_not_fetched,
        "optimal_mean_period_days": capacity.optimal_required_period(
            alpha, beta_days, shape, scale_days),
    }
    if pages is not None:
        per_day = capacity.fetch_rate_per_day(pages, period)
        result.update(pages=pages, fetches_per_day=per_day,
                      fetches_per_second=per_day / SECONDS_PER_DAY)
        if page_size_bytes is not None:
            bits = capacity.bandwidth_bits_per_second(pages, page_size_bytes, period)
            optimal_bits = capacity.bandwidth_bits_per_second(
                pages, page_size_bytes, result["optimal_mean_period_days"])
            result.update(page_size_bytes=page_size_bytes, bandwidth_mbit_per_second=bits / 1e6,
                          optimal_bandwidth_mbit_per_second=optimal_bits / 1e6)
    return result


def _format_text(plan: dict[str, Any]) -> str:
    beta = plan["beta_days"]
    lines = [
        f"mean change intervals ~ Weibull(shape {plan['weibull_shape']:g}, "
        f"scale {plan['weibull_scale_days']:g} d)",
        f"uniform schedule: ({plan['alpha_target']:g}, {beta:g} d)-currency needs a re-fetch "
        f"period of {plan['uniform_period_days']:.2f} days",
        f"at a period of {plan['period_days']:.2f} days: α = {plan['alpha_at_period']:.4f} "
        f"uniform, {plan['optimal_alpha_at_period']:.4f} with the optimal schedule "
        f"({100 * plan['optimal_fraction_not_fetched']:.2f}% of pages never fetched)",
        f"optimal schedule: α = {plan['alpha_target']:g} with a mean period of "
        f"{plan['optimal_mean_period_days']:.2f} days",
    ]
    if "fetches_per_day" in plan:
        lines.append(f"fetch rate: {plan['fetches_per_day']:.4g} pages/day "
                     f"({plan['fetches_per_second']:.4g} pages/s)")
    if "bandwidth_mbit_per_second" in plan:
        lines.append(f"bandwidth: {plan['bandwidth_mbit_per_second']:.1f} Mbit/s at this period; "
                     f"{plan['optimal_bandwidth_mbit_per_second']:.1f} Mbit/s for the target α "
                     "with the optimal schedule")
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    """Print the plan; 2 on a usage problem."""
    shape, scale = args.weibull_shape, args.weibull_scale
    fit_note: dict[str, Any] = {}
    if args.from_db:
        try:
            observations = load_observation_spans_from_db(resolve_url(load_settings(args)))
        except (OSError, asyncpg.PostgresError) as error:
            print(f"crawler plan: cannot read the database: {error}", file=sys.stderr)
            return 1
        try:
            fit = fit_lifetimes(observations)
        except ValueError as error:
            print(f"crawler plan: cannot fit the database's observations ({len(observations)} "
                  f"pages): {error}", file=sys.stderr)
            return 1
        shape, scale = fit.shape, fit.scale_days
        fit_note = {"fit_pages": fit.pages_used, "fit_chi_square_p_value": fit.chi_square_p_value}
    if shape is None or scale is None:
        print("crawler plan: give --weibull-shape and --weibull-scale, or --from-db",
              file=sys.stderr)
        return 2
    if not 0.0 < args.alpha < 1.0:
        print("crawler plan: --alpha must be between 0 and 1", file=sys.stderr)
        return 2
    try:
        plan = compute_plan(shape=shape, scale_days=scale, alpha=args.alpha, beta_days=args.beta,
                            period_days=args.period, pages=args.pages,
                            page_size_bytes=args.page_size)
    except ValueError as error:
        print(f"crawler plan: {error}", file=sys.stderr)
        return 2
    plan.update(fit_note)
    print(json.dumps(plan, indent=2) if args.json else _format_text(plan))
    return 0
