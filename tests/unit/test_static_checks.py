"""The checks the style guide asks for, enforced by the suite rather than by goodwill:
ruff clean, mypy --strict clean, and the pure core importing no I/O (import-linter)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent

pytestmark = pytest.mark.timeout(300)


def run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, timeout=280)


def test_ruff_is_clean() -> None:
    result = run(str(BIN / "ruff"), "check", "crawler", "tests", "bench", "migrations")
    assert result.returncode == 0, result.stdout + result.stderr


def test_pure_core_imports_no_io() -> None:
    result = run(str(BIN / "lint-imports"))
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy_strict_is_clean() -> None:
    result = run(str(BIN / "mypy"), "crawler")
    assert result.returncode == 0, result.stdout + result.stderr


def test_no_frontier_statement_takes_more_than_ten_parameters() -> None:
    # Issue 10: a statement's arguments are built from a typed value by one function; a batch
    # of records is one fetch_record[] parameter, not one array per column.
    from crawler.db.queries import CITUS_QUERIES, PLAIN_QUERIES

    counts = {
        name: max((int(n) for n in re.findall(r"\$(\d+)", sql)), default=0)
        for queries in (PLAIN_QUERIES, CITUS_QUERIES) for name, sql in queries.items()
    }
    assert max(counts.values()) <= 10, {k: v for k, v in counts.items() if v > 10}
    assert counts["record_fetches"] == 1
