"""What the benches that make a scratch database share (run as ``python bench/NAME.py``, so
this directory is on ``sys.path``)."""

from __future__ import annotations

import argparse
import os


def add_database_url(parser: argparse.ArgumentParser) -> None:
    """``--database-url``: a server where the bench may create and drop a scratch database
    (default ``CRAWLER_TEST_DATABASE_URL``, else the machine's PostgreSQL on 127.0.0.1)."""
    parser.add_argument(
        "--database-url",
        default=os.environ.get("CRAWLER_TEST_DATABASE_URL",
                               "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="A server where the bench may create and drop a scratch database.",
    )
