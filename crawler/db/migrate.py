"""Apply and inspect the Alembic revisions in ``migrations/``."""

from __future__ import annotations

import ast
import asyncio
import threading
from pathlib import Path
from typing import TYPE_CHECKING

import asyncpg

from crawler.db.connect import sqlalchemy_url

if TYPE_CHECKING:
    from alembic.config import Config

# Alembic and SQLAlchemy are imported where a migration runs: every command checks the
# schema's revision (head_revision) before it starts, and their import is slow.


def migrations_dir() -> Path:
    """Where the Alembic scripts are: inside the package in a wheel (setup.py copies them to
    crawler/migrations), beside it in a source checkout or an editable install."""
    package = Path(__file__).resolve().parent.parent
    shipped = package / "migrations"
    return shipped if (shipped / "env.py").exists() else package.parent / "migrations"


MIGRATIONS_DIR = migrations_dir()


def alembic_config(url: str) -> Config:
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return config


_alembic_lock = threading.Lock()  # Alembic's context proxy is process-global


def upgrade_blocking(url: str, revision: str = "head") -> None:
    """Upgrade to ``revision``. Safe to run twice, or from two processes at once."""
    from alembic import command

    with _alembic_lock:
        command.upgrade(alembic_config(url), revision)


async def upgrade(url: str, revision: str = "head") -> None:
    # Alembic's env.py runs its own event loop, so it gets a thread of its own.
    await asyncio.to_thread(upgrade_blocking, url, revision)


def _revision_links(path: Path) -> tuple[str, tuple[str, ...]] | None:
    """A script's ``revision`` and the revisions it follows (``down_revision``), read from
    its assignments without running it; None when they are not plain literals."""
    found: dict[str, object] = {}
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1:
            target, value = node.targets[0], node.value
        elif isinstance(node, ast.AnnAssign) and node.value is not None:
            target, value = node.target, node.value
        else:
            continue
        if isinstance(target, ast.Name) and target.id in ("revision", "down_revision"):
            try:
                found[target.id] = ast.literal_eval(value)
            except ValueError:
                return None
    revision, down = found.get("revision"), found.get("down_revision")
    downs = [down] if isinstance(down, str) else [] if down is None else down
    if not isinstance(revision, str) or not isinstance(downs, tuple | list):
        return None
    return (revision, tuple(downs)) if all(isinstance(d, str) for d in downs) else None


def head_revision() -> str | None:
    """The newest revision of ``migrations/``: the one revision no other one follows. Read
    from the scripts' text; Alembic decides when that is not one plain answer (branches)."""
    links = [_revision_links(path) for path in (MIGRATIONS_DIR / "versions").glob("*.py")]
    known = [link for link in links if link is not None]
    if known and len(known) == len(links):
        followed = {down for _, downs in known for down in downs}
        heads = [revision for revision, _ in known if revision not in followed]
        if len(heads) == 1:
            return heads[0]
    return alembic_head_revision()


def alembic_head_revision() -> str | None:
    from alembic.script import ScriptDirectory

    return ScriptDirectory.from_config(alembic_config("postgresql://x@/x")).get_current_head()


async def schema_revision(conn: asyncpg.Connection | asyncpg.Pool) -> str | None:
    """The schema's Alembic revision, None before the first migration. Read with asyncpg, not
    SQLAlchemy, which logs a traceback for a connect cancelled by a signal."""
    try:
        revision: str | None = await conn.fetchval("SELECT version_num FROM alembic_version")
    except asyncpg.UndefinedTableError:
        return None
    return revision


def revision_problem(current: str | None, where: str) -> str | None:
    """Why a database at revision ``current`` cannot serve this code (one line naming the
    command that fixes it), None when it is at the scripts' head."""
    head = head_revision()
    if current == head:
        return None
    return f"database {where} is at revision {current}, not {head}: run `crawler db upgrade`"
