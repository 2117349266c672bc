"""What the benches that make a scratch database share (run as ``python bench/NAME.py``, so
this directory is on ``sys.path``)."""

from __future__ import annotations

import argparse
import contextlib
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit


def add_database_url(parser: argparse.ArgumentParser) -> None:
    """``--database-url``: a server where the bench may create and drop a scratch database
    (default ``CRAWLER_TEST_DATABASE_URL``, else the embedded server, started for the run)."""
    parser.add_argument(
        "--database-url",
        default=os.environ.get("CRAWLER_TEST_DATABASE_URL"),
        help="A server where the bench may create and drop a scratch database (default: "
             "CRAWLER_TEST_DATABASE_URL, else the embedded PostgreSQL in a temporary directory, "
             "as `make run` uses it).",
    )


@contextlib.contextmanager
def server_url(url: str | None) -> Iterator[str]:
    """``url``, or, when None, the maintenance URL of an embedded server started in a
    temporary directory and deleted when the run ends: the zero-setup default, so that the
    bench needs no PostgreSQL of the user's own."""
    if url is not None:
        yield url
        return
    from crawler.db.connect import embedded_server

    with tempfile.TemporaryDirectory(prefix="crawler-bench-pg-") as data:
        server = embedded_server(Path(data), cleanup_mode="delete")
        try:
            print(f"embedded PostgreSQL in {data} (--database-url for another server)",
                  flush=True)
            yield server.get_uri(database="postgres")
        finally:
            server.cleanup()  # stopped before its directory goes


def with_database(url: str, name: str) -> str:
    """``url`` naming database ``name`` instead (its query, such as the embedded server's
    ``?host=`` socket directory, kept)."""
    return urlunsplit(urlsplit(url)._replace(path="/" + name))
