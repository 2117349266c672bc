"""What ``versions``, ``get``, ``diff`` and ``changes`` share: options, times, the index."""

from __future__ import annotations

import argparse
import asyncio
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import asyncpg

if TYPE_CHECKING:
    from crawler.core.region import Region
    from crawler.store.index import Version

from crawler.settings import Settings, warc_dir

T = TypeVar("T")

COLLECTION_OPTIONS = ("database_url", "data_dir", "warc_dir")


def add_options(parser: argparse.ArgumentParser) -> None:
    from crawler.commands.options import add_setting

    for field in COLLECTION_OPTIONS:
        add_setting(parser, field)


def add_url_command(
    subparsers: argparse._SubParsersAction[Any],
    name: str,
    *,
    help: str,
    description: str | None,
    run: Callable[[argparse.Namespace], int],
    arguments: Callable[[argparse.ArgumentParser], object] | None = None,
) -> None:
    """A subcommand about one URL's stored versions: URL, its own ``arguments``, then the
    collection's options."""
    parser = subparsers.add_parser(name, help=help, description=description)
    parser.add_argument("url", metavar="URL")
    if arguments is not None:
        arguments(parser)
    add_options(parser)
    parser.set_defaults(func=run, needs_db="schema")


def stored_versions(args: argparse.Namespace) -> tuple[str, list[Version], Region]:
    """The command's URL (normalised), its stored versions, oldest first, and the watched
    region its text is read through (the URL's region now, for old versions too)."""
    from crawler.store.index import versions_and_region

    url = normalized(args.url)
    stored, region = with_conn(args, lambda conn: versions_and_region(conn, url))
    return url, stored, region


def settings_of(args: argparse.Namespace) -> Settings:
    from crawler.cli import load_settings

    return load_settings(args)


def store_root(args: argparse.Namespace) -> Path:
    return warc_dir(settings_of(args))


def with_conn(args: argparse.Namespace, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
    from crawler.cli import resolve_url
    from crawler.db.connect import connect

    # resolve_url, not database_url: a data directory or server that cannot be used is one
    # line naming the setting, not a traceback.
    url = resolve_url(settings_of(args))

    async def go() -> T:
        conn = await connect(url)
        try:
            return await fn(conn)
        finally:
            await conn.close()

    return asyncio.run(go())


def normalized(url: str) -> str:
    from crawler.core.links import normalize_url

    return normalize_url(url) or url
