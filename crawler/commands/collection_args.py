"""What ``versions``, ``get``, ``diff`` and ``verify`` share: a URL's stored versions, the
collection's directory."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from pathlib import Path
from typing import Any

from crawler.commands.context import load_settings, normalized, with_conn
from crawler.commands.options import add_collection_options
from crawler.core.region import Region
from crawler.settings import warc_dir
from crawler.store.index import Version, versions_and_region


def add_url_command(subparsers: argparse._SubParsersAction[Any], name: str, *, help: str,
                    description: str | None, run: Callable[[argparse.Namespace], int],
                    arguments: Callable[[argparse.ArgumentParser], object]) -> None:
    """A subcommand about one URL's stored versions: URL, its own ``arguments``, then the
    collection's options."""
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.add_argument("url", metavar="URL")
    arguments(parser)
    add_collection_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


def stored_versions(args: argparse.Namespace) -> tuple[str, list[Version], Region]:
    """The command's URL (normalised), its stored versions, oldest first, and the watched
    region its text is read through (the URL's region now, for old versions too)."""
    url = normalized(args.url)
    stored, region = with_conn(args, lambda conn: versions_and_region(conn, url))
    return url, stored, region


def store_root(args: argparse.Namespace) -> Path:
    return warc_dir(load_settings(args))

