"""Apply and inspect the Alembic revisions in ``migrations/``."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from alembic.script import ScriptDirectory
from sqlalchemy.ext.asyncio import create_async_engine

from crawler.db.connect import sqlalchemy_url


def migrations_dir() -> Path:
    """Where the Alembic scripts are: inside the package in a wheel (setup.py copies them to
    crawler/migrations), beside it in a source checkout or an editable install."""
    package = Path(__file__).resolve().parent.parent
    shipped = package / "migrations"
    return shipped if (shipped / "env.py").exists() else package.parent / "migrations"


MIGRATIONS_DIR = migrations_dir()


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", sqlalchemy_url(url).replace("%", "%%"))
    return config


_alembic_lock = threading.Lock()  # Alembic's context proxy is process-global


def upgrade_blocking(url: str, revision: str = "head") -> None:
    """Upgrade to ``revision``. Safe to run twice, or from two processes at once."""
    with _alembic_lock:
        command.upgrade(alembic_config(url), revision)


async def upgrade(url: str, revision: str = "head") -> None:
    # Alembic's env.py runs its own event loop, so it gets a thread of its own.
    await asyncio.to_thread(upgrade_blocking, url, revision)


def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql://x@/x")).get_current_head()


async def current_revision(url: str) -> str | None:
    engine = create_async_engine(sqlalchemy_url(url))
    try:
        async with engine.connect() as conn:
            return await conn.run_sync(
                lambda sync_conn: MigrationContext.configure(sync_conn).get_current_revision()
            )
    finally:
        await engine.dispose()
