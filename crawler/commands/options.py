"""Options shared by the commands: each overrides a setting and names its variable."""

from __future__ import annotations

import argparse
from typing import Any

from crawler.settings import Settings, env_name

DB_OPTIONS = ("database_url", "data_dir")


def add_setting(parser: argparse.ArgumentParser, field: str, **kwargs: Any) -> None:
    """An option that overrides a setting; its help names the variable and the default."""
    info = Settings.model_fields[field]
    default = info.get_default(call_default_factory=True)
    shown = "unset" if default is None else default
    parser.add_argument(
        "--" + field.replace("_", "-"),
        dest=field,
        default=None,
        help=f"{info.description} [env {env_name(field)}; default {shown}]",
        **kwargs,
    )


def add_common_options(parser: argparse.ArgumentParser, settings: tuple[str, ...] = DB_OPTIONS
                       ) -> None:
    """The database options and logging, as every database command has them."""
    for field in (*settings, "log_level"):
        add_setting(parser, field)
    parser.add_argument("--log-json", dest="log_json", action="store_const", const=True,
                        default=None, help=f"JSON-lines logs [env {env_name('log_json')}]")
