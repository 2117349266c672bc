"""`crawler report --out DIR`: the change report, one HTML page with its PNG plots embedded.

What the crawler has observed (lifetime CDF, change arrivals, estimated rates, planned
revisit intervals, hosts) and what it implies for capacity (Brewington & Cybenko's (α, β)
level set, from the Weibull fitted to the observations or the paper's when there are too
few). Renders from an empty database too, saying so.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import asyncpg

from crawler.commands.context import load_settings, resolve_url, unwritable
from crawler.commands.options import add_common_options
from crawler.core import capacity
from crawler.errors import UserError
from crawler.report.data import load_report_data


def _duration(text: str) -> float:
    try:
        return capacity.parse_duration_days(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--out", required=True, type=Path, metavar="DIR",
                        help="directory for index.html and the PNGs (created if missing)")
    parser.add_argument("--alpha", type=float, default=0.95,
                        help="target fraction of pages β-current for the capacity figures "
                             "(default 0.95)")
    parser.add_argument("--beta", type=_duration, default=1.0,
                        help="grace period β with a unit: 1d, 1w, 6h (bare number: days; "
                             "default 1d)")
    add_common_options(parser)
    parser.set_defaults(func=run, needs_db="schema", check=check_arguments)


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse an unwritable --out before touching the database (one line, exit 2)."""
    problem = unwritable(args.out)
    if problem is not None:
        raise UserError(f"report: cannot write to {args.out}: {problem}; choose another --out")


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    parser = subparsers.add_parser(
        "report", help="HTML change report with plots (lifetimes, capacity, hosts).",
        description="The change report: a self-contained HTML page with plots of what the "
        "crawler observed (lifetimes, change arrivals, rates, revisit intervals, hosts) and "
        "what it implies for capacity (Brewington & Cybenko's (α, β) level set).",
    )
    add_arguments(parser)


def run(args: argparse.Namespace) -> int:
    """Write the report; 2 on a usage problem, 1 when the database cannot be read."""
    from crawler.report.html import write_report  # heavy: matplotlib

    if not 0.0 < args.alpha < 1.0:
        print("crawler report: --alpha must be between 0 and 1", file=sys.stderr)
        return 2
    problem = unwritable(args.out)
    if problem is not None:
        print(f"crawler report: cannot write to {args.out}: {problem}; choose another --out",
              file=sys.stderr)
        return 2
    url = resolve_url(load_settings(args))
    try:
        data = asyncio.run(load_report_data(url, datetime.now(UTC)))
    except (OSError, asyncpg.PostgresError) as error:
        print(f"crawler report: cannot read the database: {error}", file=sys.stderr)
        return 1
    report = write_report(data, args.out, alpha=args.alpha, beta_days=args.beta)
    print(f"wrote {report.index} and {len(report.images)} plots "
          f"({'fitted model' if report.model.fit else 'paper model'}: {report.model.reason})")
    if report.model.misfit is not None:
        print(f"warning: {report.model.misfit}.")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point without the top-level CLI: `python -m crawler.commands.report --out DIR`."""
    parser = argparse.ArgumentParser(prog="crawler report", description=__doc__)
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())
