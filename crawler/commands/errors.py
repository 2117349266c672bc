"""Mistakes a user can fix become one line on stderr and exit status 2, never a traceback.

Exit statuses, as README.md documents them: 0 done; 1 done in part (some input rejected,
or interrupted with Ctrl-C after committing some of it); 2 nothing done because of a usage
or configuration error, the line naming the setting, option or command that fixes it; 4 a
stored record is missing or damaged (one line naming it; ``crawler verify`` finds them all).
"""

from __future__ import annotations

import asyncio
import socket
import tempfile
from pathlib import Path

from pydantic import ValidationError

from crawler.settings import Settings, env_name

USAGE = 2
PARTIAL = 1
# A stored record is missing or damaged (crawler.store.damage): get, diff, versions, verify.
DAMAGED = 4

DATABASE_HINT = ("set CRAWLER_DATABASE_URL (or --database-url) to a running PostgreSQL, "
                 "or unset it for the embedded server")


class UserError(Exception):
    """A one-line message for the user and the exit status that goes with it."""

    def __init__(self, message: str, code: int = USAGE) -> None:
        super().__init__(message)
        self.message = message
        self.code = code


# Settings with no command-line option of the same name (`seed --include` is a site's own).
_NO_OPTION = frozenset({"include", "exclude"})


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _setting_name(field: str) -> str:
    """The variable behind a setting, and its option when it has one."""
    if field in _NO_OPTION:
        return env_name(field)
    return f"{env_name(field)} ({option_name(field)})"


def settings_error(error: Exception) -> UserError:
    """The first bad setting of a pydantic (or pydantic-settings) error, named by variable."""
    if isinstance(error, ValidationError) and error.errors():
        first = error.errors()[0]
        field = str(first["loc"][0]) if first["loc"] else ""
        message = first["msg"].removeprefix("Value error, ")
        if field in Settings.model_fields:
            return UserError(f"invalid {_setting_name(field)}: {message}")
        return UserError(f"invalid configuration: {message}")
    text = " ".join(str(error).split())
    for field in Settings.model_fields:
        if f'"{field}"' in text:
            return UserError(f"invalid {_setting_name(field)}: {text}")
    return UserError(f"invalid configuration: {text}")


def _chain(error: BaseException) -> list[BaseException]:
    """The exception, its causes and contexts, and SQLAlchemy's wrapped driver errors."""
    seen: list[BaseException] = []
    todo: list[BaseException | None] = [error]
    while todo:
        item = todo.pop()
        if item is None or any(item is s for s in seen):
            continue
        seen.append(item)
        todo += [item.__cause__, item.__context__]
        orig = getattr(item, "orig", None)
        if isinstance(orig, BaseException):
            todo.append(orig)
        # SQLAlchemy's asyncpg adapter keeps the driver's exception here
        inner = getattr(orig, "__cause__", None)
        if isinstance(inner, BaseException):
            todo.append(inner)
    return seen


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split()) or type(error).__name__
    return text[:200]


def database_error(error: BaseException, where: str, *, connecting: bool = True
                   ) -> UserError | None:
    """A one-line explanation when ``error`` means the database is unreachable or unmigrated.

    ``connecting``: the error came from opening a connection, so any OS error is about the
    database; otherwise only connection errors are (a PermissionError is the user's file).
    """
    import asyncpg

    network_errors: tuple[type[BaseException], ...] = (
        (OSError, socket.gaierror, asyncio.TimeoutError, asyncpg.ClientConfigurationError,
         asyncpg.InterfaceError)
        if connecting else (ConnectionError, socket.gaierror, asyncpg.ConnectionDoesNotExistError)
    )

    for item in _chain(error):
        if isinstance(item, asyncpg.UndefinedTableError | asyncpg.UndefinedColumnError):
            return UserError(f"database {where} lacks the crawler's schema ({_one_line(item)}): "
                             "run `crawler db upgrade`")
        if isinstance(item, asyncpg.InvalidCatalogNameError | asyncpg.InvalidPasswordError
                      | asyncpg.InvalidAuthorizationSpecificationError
                      | asyncpg.CannotConnectNowError | asyncpg.TooManyConnectionsError):
            return UserError(f"cannot use database {where}: {_one_line(item)}; {DATABASE_HINT}")
        if isinstance(item, network_errors):
            return UserError(f"cannot connect to database {where}: {_one_line(item)}; "
                             f"{DATABASE_HINT}")
    return None


def describe_target(url: str | None) -> str:
    from crawler.db.connect import describe

    if url is None:
        return "(embedded server)"
    try:
        return describe(url)
    except ValueError:
        return repr(url)


async def _check(url: str, need_schema: bool) -> None:
    import asyncpg

    from crawler.db import migrate

    where = describe_target(url)
    try:
        from crawler.db.connect import connect as db_connect

        conn = await db_connect(url, timeout=15)
    except Exception as error:
        problem = database_error(error, where)
        if problem is None:
            raise
        raise problem from None
    try:
        if not need_schema:
            return
        try:
            current = await conn.fetchval("SELECT version_num FROM alembic_version")
        except asyncpg.UndefinedTableError:
            current = None
    finally:
        await conn.close()
    head = migrate.head_revision()
    if current != head:
        raise UserError(f"database {where} is at revision {current}, not {head}: "
                        "run `crawler db upgrade`")


def preflight(url: str, *, need_schema: bool = True) -> None:
    """Refuse with one line before a command starts when its database cannot serve it."""
    from crawler.db.connect import _run_blocking

    _run_blocking(_check(url, need_schema))


def data_dir_problem(data_dir: Path) -> str | None:
    """Why the embedded server cannot live under ``data_dir``, or None when it can."""
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=data_dir):
            pass
    except OSError as error:
        return error.strerror or str(error)
    return None


def resolve_database(settings: Settings) -> str:
    """The database URL, the embedded server started if need be; one line if that fails."""
    from crawler.db.connect import database_url

    try:
        return database_url(settings)
    except UserError:
        raise
    except Exception as error:
        if settings.database_url is None:
            unusable = data_dir_problem(settings.data_dir)
            if unusable is not None:  # not the database: the place the server would live
                raise UserError(f"the directory {settings.data_dir} is not writable "
                                f"({unusable}); set {_setting_name('data_dir')} to a "
                                "writable directory") from None
        target = describe_target(settings.database_url)
        problem = database_error(error, target)
        if problem is not None:
            raise problem from None
        if settings.database_url is None:
            raise UserError(f"cannot start the embedded PostgreSQL under "
                            f"{settings.data_dir}: {_one_line(error)}; set CRAWLER_DATA_DIR "
                            "or CRAWLER_DATABASE_URL") from None
        raise


def unexpected_database_error(error: BaseException, settings: Settings | None
                              ) -> UserError | None:
    """A UserError for a database failure raised mid-command, else None."""
    target = describe_target(settings.database_url if settings else None)
    return database_error(error, target, connecting=False)
