"""Options shared by the commands: each overrides a setting and names its variable."""

from __future__ import annotations

import argparse
import datetime as dt
import math
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from crawler.commands.errors import option_name
from crawler.settings import Settings, env_name

DB_OPTIONS = ("database_url", "data_dir")
# The commands that read the collection: its database and its WARC files.
COLLECTION_OPTIONS = ("database_url", "data_dir", "warc_dir")
# `run` and `demo`: every setting (logging's options are every command's).
DAEMON_OPTIONS = tuple(f for f in Settings.model_fields if f not in ("log_level", "log_json"))
N = TypeVar("N", int, float)


def _whole(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not math.isfinite(value):
        raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
    return value


def _checked(parse: Callable[[str], N], ok: Callable[[N], bool], must: str
             ) -> Callable[[str], N]:
    """An argparse type: ``parse``, then a value ``ok`` refuses is one line, exit 2."""

    def convert(text: str) -> N:
        value = parse(text)
        if not ok(value):
            raise argparse.ArgumentTypeError(f"{text!r} must {must}")
        return value

    return convert


# A page size must be at least 1: LIMIT 0 would page forever.
positive_int = _checked(_whole, lambda v: v > 0, "be at least 1")
# An offset or a random seed: SQL OFFSET and numpy refuse a negative one with a traceback.
non_negative_int = _checked(_whole, lambda v: v >= 0, "be 0 or more")
positive_float = _checked(_number, lambda v: v > 0, "be above 0")
non_negative_float = _checked(_number, lambda v: v >= 0, "be 0 or more")
fraction = _checked(_number, lambda v: 0.0 <= v <= 1.0, "be between 0 and 1")


TIME_FORMS = ("ISO 8601 (2026-11-22T10:00, UTC unless zoned), POSIX seconds, or a duration "
              "back from now (30m, 1h, 2d, 1w)")
# A number with a unit: a duration (a bare number is POSIX seconds).
_DURATION = re.compile(r"[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?\s*[a-zA-Z]+")


def parse_time(text: str, now: dt.datetime | None = None) -> dt.datetime:
    """A TIME option (changes --since, get --at, diff --from/--to, export --since): one
    grammar for all of them, so that what one accepts the others do. A duration counts back
    from ``now`` (the clock when None: when the command line is read)."""
    value = text.strip()
    try:
        try:
            return dt.datetime.fromtimestamp(float(value), dt.UTC)
        except ValueError:
            pass  # not a number (or NaN): another form
        if _DURATION.fullmatch(value):
            from crawler.core.capacity import parse_duration_days  # heavy: numpy

            days = parse_duration_days(value)
            return (now or dt.datetime.now(dt.UTC)) - dt.timedelta(days=days)
        parsed = dt.datetime.fromisoformat(value)
    except (ValueError, OverflowError, OSError):  # unknown unit, or out of range
        raise argparse.ArgumentTypeError(f"{text!r} is not a time: give {TIME_FORMS}") from None
    return parsed if parsed.tzinfo is not None else parsed.replace(tzinfo=dt.UTC)


def plain(doc: str | None) -> str | None:
    """A module docstring as --help text: RST's double backquotes are noise in a terminal."""
    return None if doc is None else doc.replace("``", "")


def add_setting(parser: argparse.ArgumentParser, field: str, **kwargs: Any) -> None:
    """An option that overrides a setting; its help names the variable and the default."""
    info = Settings.model_fields[field]
    default = info.get_default(call_default_factory=True)
    shown = "unset" if default is None else default
    parser.add_argument(
        option_name(field),
        dest=field,
        default=None,
        # argparse formats help with %: a description's own % must not be read as a format.
        help=f"{info.description} [env {env_name(field)}; default {shown}]".replace("%", "%%"),
        **kwargs,
    )


def add_common_options(parser: argparse.ArgumentParser, settings: tuple[str, ...] = DB_OPTIONS
                       ) -> None:
    """The database options and logging, as every database command has them."""
    for field in (*settings, "log_level"):
        add_setting(parser, field)
    parser.add_argument("--log-json", dest="log_json", action="store_const", const=True,
                        default=None, help=f"JSON-lines logs [env {env_name('log_json')}]")


def add_command(subparsers: argparse._SubParsersAction[Any], name: str,
                func: Callable[[argparse.Namespace], int], help: str,
                settings: Sequence[str] = DB_OPTIONS) -> argparse.ArgumentParser:
    """A command whose help is its description, with the options of ``settings`` and of
    logging; it needs the database at the schema's revision unless it says otherwise."""
    parser: argparse.ArgumentParser = subparsers.add_parser(name, help=help, description=help)
    add_common_options(parser, tuple(settings))
    parser.set_defaults(func=func, needs_db="schema")
    return parser


def add_collection_options(parser: argparse.ArgumentParser) -> None:
    """The options of the commands that read the collection (no logging options)."""
    for field in COLLECTION_OPTIONS:
        add_setting(parser, field)
