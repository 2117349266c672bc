"""``crawler db upgrade``: apply the schema's migrations."""

from __future__ import annotations

import argparse
from typing import Any

from crawler.commands.context import load_settings, resolve_url
from crawler.commands.options import DB_OPTIONS, add_setting
from crawler.db import migrate
from crawler.db.connect import describe
from crawler.errors import UserError


def cmd_db_upgrade(args: argparse.Namespace) -> int:
    settings = load_settings(args)
    if settings.pgbouncer:
        # The migration lock (migrations/env.py) is a session-level advisory lock: behind
        # transaction pooling its unlock may reach another server connection and leave it held.
        raise UserError("crawler db upgrade needs a direct connection to PostgreSQL: unset "
                        "CRAWLER_PGBOUNCER and point CRAWLER_DATABASE_URL past PgBouncer")
    url = resolve_url(settings)
    migrate.upgrade_blocking(url, args.revision)
    print(f"database {describe(url)} at revision {migrate.head_revision()}")
    return 0


def register(subparsers: argparse._SubParsersAction[Any]) -> None:
    db = subparsers.add_parser("db", help="Database administration.")
    db_sub = db.add_subparsers(dest="db_command", required=True, metavar="DB_COMMAND")
    up = db_sub.add_parser("upgrade", help="Apply migrations (safe to repeat or run in parallel).")
    for field in DB_OPTIONS:
        add_setting(up, field)
    up.add_argument("--revision", default="head", help="Target revision (default head).")
    up.set_defaults(func=cmd_db_upgrade, needs_db="server")
