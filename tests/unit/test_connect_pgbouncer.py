"""CRAWLER_PGBOUNCER travels with the database URL and turns the statement caches off."""

from __future__ import annotations

from crawler.db.connect import (
    PGBOUNCER_PARAM,
    _options,
    database_url,
    is_pgbouncer,
    split_pgbouncer,
    sqlalchemy_url,
)
from crawler.settings import Settings

DIRECT = "postgresql://crawler@127.0.0.1:6432/crawler?sslmode=disable"


def settings(pgbouncer: bool) -> Settings:
    return Settings.model_validate({"database_url": DIRECT, "pgbouncer": pgbouncer})


def test_the_setting_marks_the_url_and_connections_strip_the_mark() -> None:
    assert database_url(settings(False)) == DIRECT
    marked = database_url(settings(True))
    assert is_pgbouncer(marked) and PGBOUNCER_PARAM in marked
    assert split_pgbouncer(marked) == (DIRECT, True)
    assert split_pgbouncer(DIRECT) == (DIRECT, False)
    assert _options(marked) == (DIRECT, {"statement_cache_size": 0})
    assert _options(DIRECT) == (DIRECT, {})


def test_sqlalchemy_url_turns_its_own_cache_off_behind_pgbouncer() -> None:
    assert sqlalchemy_url(DIRECT) == "postgresql+asyncpg://crawler@127.0.0.1:6432/crawler" \
        "?sslmode=disable"
    marked = sqlalchemy_url(database_url(settings(True)))
    assert PGBOUNCER_PARAM not in marked
    assert marked.endswith("?sslmode=disable&prepared_statement_cache_size=0")
