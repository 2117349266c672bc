"""What the benches that make a scratch database share (run as ``python bench/NAME.py``, so
this directory is on ``sys.path``)."""

from __future__ import annotations

import argparse
import os
from urllib.parse import urlsplit, urlunsplit


def add_database_url(parser: argparse.ArgumentParser) -> None:
    """``--database-url``: a server where the bench may create and drop a scratch database
    (default ``CRAWLER_TEST_DATABASE_URL``, else the machine's PostgreSQL on 127.0.0.1)."""
    parser.add_argument(
        "--database-url",
        default=os.environ.get("CRAWLER_TEST_DATABASE_URL",
                               "postgresql://postgres@127.0.0.1:5432/postgres"),
        help="A server where the bench may create and drop a scratch database.",
    )


def with_database(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead (its query, such as the embedded server's
    ``?host=`` socket directory, kept)."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))
