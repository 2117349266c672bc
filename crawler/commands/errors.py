"""A failure the user can fix, said in one line naming the setting or command that fixes it.

Bad settings (pydantic's errors) and a database that is unreachable, refuses us or lacks the
schema become a ``UserError`` (exit 2, ``crawler.errors``), never a traceback.
"""

from __future__ import annotations

import asyncio
import socket

from pydantic import ValidationError

from crawler.errors import UserError
from crawler.settings import Settings, env_name

DATABASE_HINT = ("set CRAWLER_DATABASE_URL (or --database-url) to a running PostgreSQL, "
                 "or unset it for the embedded server")


# Settings with no command-line option of the same name (`seed --include` is a site's own).
_NO_OPTION = frozenset({"include", "exclude"})


def option_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def setting_name(field: str) -> str:
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
            return UserError(f"invalid {setting_name(field)}: {message}")
        return UserError(f"invalid configuration: {message}")
    text = " ".join(str(error).split())
    for field in Settings.model_fields:
        if f'"{field}"' in text:
            return UserError(f"invalid {setting_name(field)}: {text}")
    return UserError(f"invalid configuration: {text}")


def exception_chain(error: BaseException) -> list[BaseException]:
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


def one_line(error: BaseException) -> str:
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

    for item in exception_chain(error):
        if isinstance(item, asyncpg.UndefinedTableError | asyncpg.UndefinedColumnError):
            return UserError(f"database {where} lacks the crawler's schema ({one_line(item)}): "
                             "run `crawler db upgrade`")
        if isinstance(item, asyncpg.InvalidCatalogNameError | asyncpg.InvalidPasswordError
                      | asyncpg.InvalidAuthorizationSpecificationError
                      | asyncpg.CannotConnectNowError | asyncpg.TooManyConnectionsError):
            return UserError(f"cannot use database {where}: {one_line(item)}; {DATABASE_HINT}")
        if isinstance(item, network_errors):
            return UserError(f"cannot connect to database {where}: {one_line(item)}; "
                             f"{DATABASE_HINT}")
    return None


def describe_target(url: str | None) -> str:
    from crawler.db.connect import describe  # heavy: asyncpg, which its module loads

    if url is None:
        return "(embedded server)"
    try:
        return describe(url)
    except ValueError:
        return repr(url)


def unexpected_database_error(error: BaseException, settings: Settings | None
                              ) -> UserError | None:
    """A UserError for a database failure raised mid-command, else None."""
    target = describe_target(settings.database_url if settings else None)
    return database_error(error, target, connecting=False)
