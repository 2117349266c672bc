"""What every command's run shares: its settings, its database, and how it speaks.

A command resolves its settings from its options (``load_settings``), its database URL once
per process (``resolve_url``: the embedded server is started if need be), and talks to it on
one connection (``with_conn``). Before a command starts, ``preflight`` refuses in one line a
database that cannot serve it; ``check_dirs`` does the same for the directories `run` writes.

The database's modules are imported by the functions that use them: the command line loads
this module for every command, and `simulate` or `plan` never load the database's driver.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from crawler.commands.errors import database_error, describe_target, one_line, setting_name
from crawler.core.links import normalize_url
from crawler.errors import UserError
from crawler.settings import Settings, warc_dir

if TYPE_CHECKING:
    import asyncpg

T = TypeVar("T")


def load_settings(args: argparse.Namespace) -> Settings:
    """The settings: the environment's, overridden by the options given on the command line."""
    return Settings(**{name: getattr(args, name) for name in Settings.model_fields
                       if getattr(args, name, None) is not None})


# --- directories ----------------------------------------------------------------------------


def unwritable(directory: Path) -> str | None:
    """Why nothing can be written under ``directory`` (created if need be), None when it can."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=directory):
            pass
    except OSError as error:
        return error.strerror or str(error)
    return None


def check_writable(directory: Path, setting: str) -> None:
    """One line naming ``setting`` (exit 2) when ``directory`` is not writable."""
    problem = unwritable(directory)
    if problem is not None:
        raise UserError(f"the directory {directory} is not writable ({problem}); set "
                        f"{setting} to a writable directory")


def check_dirs(settings: Settings) -> None:
    """The directories the daemon writes to: the embedded server's, the WARC store's."""
    if not settings.database_url:
        check_writable(settings.data_dir, "CRAWLER_DATA_DIR")
    if settings.store_versions:
        check_writable(warc_dir(settings), "CRAWLER_WARC_DIR (or CRAWLER_DATA_DIR)")


# --- the database ---------------------------------------------------------------------------


def resolve_database(settings: Settings) -> str:
    """The database URL, the embedded server started if need be; one line if that fails."""
    from crawler.db.connect import database_url  # heavy: asyncpg

    try:
        return database_url(settings)
    except UserError:
        raise
    except Exception as error:
        if settings.database_url is None:  # not the database: the place the server would live
            check_writable(settings.data_dir, setting_name("data_dir"))
        target = describe_target(settings.database_url)
        unusable = database_error(error, target)
        if unusable is not None:
            raise unusable from None
        if settings.database_url is None:
            raise UserError(f"cannot start the embedded PostgreSQL under "
                            f"{settings.data_dir}: {one_line(error)}; set CRAWLER_DATA_DIR "
                            "or CRAWLER_DATABASE_URL") from None
        raise


_resolved: dict[tuple[str | None, Path], str] = {}


def resolve_url(settings: Settings) -> str:
    """``resolve_database``, once per process."""
    key = (settings.database_url, settings.data_dir)
    if key not in _resolved:
        _resolved[key] = resolve_database(settings)
    return _resolved[key]


async def _check(url: str, need_schema: bool) -> None:
    from crawler.db.connect import connect  # heavy: asyncpg
    from crawler.db.migrate import revision_problem, schema_revision  # heavy: asyncpg

    where = describe_target(url)
    try:
        conn = await connect(url, timeout=15)
    except Exception as error:
        problem = database_error(error, where)
        if problem is None:
            raise
        raise problem from None
    try:
        if not need_schema:
            return
        current = await schema_revision(conn)
    finally:
        await conn.close()
    stale = revision_problem(current, where)
    if stale is not None:
        raise UserError(stale)


def preflight(url: str, *, need_schema: bool = True) -> None:
    """Refuse with one line before a command starts when its database cannot serve it."""
    from crawler.db.connect import _run_blocking  # heavy: asyncpg

    _run_blocking(_check(url, need_schema))


def with_conn(args: argparse.Namespace, fn: Callable[[asyncpg.Connection], Awaitable[T]]) -> T:
    """``fn`` run on one connection to the command's database."""
    from crawler.db.connect import connect  # heavy: asyncpg

    # resolve_url, not database_url: a data directory or server that cannot be used is one
    # line naming the setting, not a traceback.
    url = resolve_url(load_settings(args))

    async def go() -> T:
        conn = await connect(url)
        try:
            return await fn(conn)
        finally:
            await conn.close()

    return asyncio.run(go())


def normalized(url: str) -> str:
    """A URL the user typed, normalised as the frontier keeps it (as typed when it is none)."""
    return normalize_url(url) or url


# --- output ---------------------------------------------------------------------------------


def plural(count: int, noun: str) -> str:
    """``1 URL``, ``2 URLs``: counts that read as English."""
    return f"{count} {noun if count == 1 else noun + 's'}"


def newline_if_tty() -> str:
    """End a progress line (drawn only on a terminal) before a message."""
    return "\n" if sys.stderr.isatty() else ""


def table(rows: Sequence[dict[str, Any]], columns: Sequence[str]) -> str:
    """Rows as aligned text columns, a header first ('-' for a missing value)."""
    cells = [[("-" if r[c] is None else str(r[c])) for c in columns] for r in rows]
    widths = [max([len(c)] + [len(row[i]) for row in cells]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths, strict=True))]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths, strict=True)) for row in cells]
    return "\n".join(lines)
