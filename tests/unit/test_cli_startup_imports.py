"""Commands start fast: each imports only what it needs (issue 35).

Checked by what is imported (``python -X importtime``), not by a timed assertion: the set of
modules is the same on a loaded machine, the time is not.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from crawler import cli
from crawler.db import migrate

# Each takes tens to hundreds of milliseconds to import.
HEAVY = ("numpy", "scipy", "aiohttp", "sqlalchemy", "alembic", "selectolax",
         "prometheus_client", "matplotlib", "asyncpg", "pydantic", "uvloop", "warcio")
SCRIPT = Path(sys.executable).with_name("crawler")


def imported(argv: list[str], env: dict[str, str] | None = None) -> tuple[set[str], str]:
    """The top-level packages a command imports, and what it printed."""
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", "crawler", *argv],
                          capture_output=True, text=True, timeout=120, env=env)
    modules = {line.split("|")[-1].strip().split(".")[0]
               for line in done.stderr.splitlines() if line.startswith("import time:")}
    return modules, done.stdout


def test_version_imports_nothing_heavy() -> None:
    modules, out = imported(["--version"])
    assert out.strip().startswith("crawler "), out
    assert not modules & set(HEAVY), sorted(modules & set(HEAVY))


def test_the_installed_script_answers_version_the_same_way() -> None:
    probe = ("import runpy, sys; sys.argv = ['crawler', '--version']\n"
             "from crawler.entry import main\n"
             "code = main()\n"
             f"heavy = [m for m in {HEAVY!r} if m in sys.modules]\n"
             "print(code, heavy)")
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True,
                          timeout=60, check=True)
    assert done.stdout.splitlines() == ["crawler 0.1.0", "0 []"], done.stdout
    if SCRIPT.exists():
        version = subprocess.run([str(SCRIPT), "--version"], capture_output=True, text=True,
                                 timeout=60, check=True)
        assert version.stdout.strip() == "crawler 0.1.0"


def test_status_imports_no_migration_tool_no_http_no_scipy(db_url: str) -> None:
    """`crawler status` against a running server: no Alembic or SQLAlchemy (its schema check
    reads the scripts' revisions), no HTTP stack, no metrics client, no scipy."""
    modules, out = imported(["status"], {**os.environ, "CRAWLER_DATABASE_URL": db_url})
    assert "URLs" in out
    unneeded = {"scipy", "aiohttp", "sqlalchemy", "alembic", "prometheus_client", "matplotlib",
                "uvloop", "warcio"}
    assert not modules & unneeded, sorted(modules & unneeded)


def test_help_of_one_command_imports_no_other_command_module() -> None:
    modules, _ = imported(["status", "--help"])
    assert not modules & {"numpy", "scipy", "sqlalchemy", "alembic", "aiohttp"}, modules


def test_command_modules_register_the_commands_the_table_says() -> None:
    """cli.COMMAND_MODULES decides which module a command loads: it must name every command
    each module registers (a command missing from it still works, loading every module)."""
    for module, names in cli.COMMAND_MODULES.items():
        parser = argparse.ArgumentParser()
        sub = parser.add_subparsers()
        __import__(f"crawler.commands.{module}", fromlist=["register"]).register(sub)
        assert tuple(sub.choices) == names, module
    everything = cli.build_parser()
    sub_actions = [a for a in everything._actions if isinstance(a, argparse._SubParsersAction)]
    registered = set(sub_actions[0].choices)
    listed = {n for names in cli.COMMAND_MODULES.values() for n in names}
    assert registered == listed


def subcommand(parser: argparse.ArgumentParser, name: str) -> argparse.ArgumentParser:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = action.choices[name]
    return found


@pytest.mark.parametrize("command", ["status", "watch", "pause", "diff", "seed", "run"])
def test_a_command_alone_is_the_command_among_all(command: str) -> None:
    """Built alone (as `crawler COMMAND` builds it), a command has the same options."""
    alone = subcommand(cli.build_parser(command), command)
    among_all = subcommand(cli.build_parser(), command)
    assert alone.format_help() == among_all.format_help()


def test_the_head_revision_read_from_the_scripts_is_alembics() -> None:
    assert migrate.head_revision() == migrate.alembic_head_revision()
