"""Frontier control from the command line (issue 15): pause and resume a host."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import asyncpg
import pytest
from test_cli_errors import assert_one_line, crawler

from crawler.db import frontier

pytestmark = pytest.mark.timeout(120)


def claimable_origins(db_url: str) -> list[str]:
    async def go() -> list[str]:
        conn = await asyncpg.connect(db_url)
        try:
            async with conn.transaction():
                claims = await frontier.claim(conn, "test", max_hosts=10, urls_per_host=10,
                                              lease_seconds=60)
                origins = sorted(c.origin for c in claims)
                raise _Rollback(origins)
        except _Rollback as done:
            return done.origins
        finally:
            await conn.close()

    return asyncio.run(go())


class _Rollback(Exception):
    def __init__(self, origins: list[str]) -> None:
        self.origins = origins


def test_a_paused_host_is_never_claimed_and_status_lists_it(db_url: str) -> None:
    assert crawler("seed", "http://a.example/1", "http://b.example/1", db_url=db_url
                   ).returncode == 0
    assert claimable_origins(db_url) == ["http://a.example", "http://b.example"]
    paused = crawler("pause", "--host", "http://A.example/", db_url=db_url)
    assert paused.returncode == 0 and "http://a.example paused" in paused.stdout
    assert claimable_origins(db_url) == ["http://b.example"]
    status = json.loads(crawler("status", "--json", db_url=db_url).stdout)
    assert status["hosts_paused"] == ["http://a.example"]
    assert "hosts paused" in crawler("status", db_url=db_url).stdout
    assert crawler("resume", "--host", "a.example", db_url=db_url).returncode == 0
    assert claimable_origins(db_url) == ["http://a.example", "http://b.example"]
    assert json.loads(crawler("status", "--json", db_url=db_url).stdout)["hosts_paused"] == []
    assert_one_line(crawler("pause", "--host", "http://nowhere.example", db_url=db_url),
                    "unknown host")


def test_urls_lists_any_url_paged_by_host_and_state(db_url: str) -> None:
    seeded = [f"http://a.example/{i}" for i in range(5)] + ["http://b.example/x"]
    assert crawler("seed", *seeded, db_url=db_url).returncode == 0
    page = crawler("urls", "--host", "a.example", "--limit", "3", "--json", db_url=db_url)
    assert [u["url"] for u in json.loads(page.stdout)] == seeded[:3]
    assert "--offset 3" in page.stderr
    rest = json.loads(crawler("urls", "--host", "http://a.example", "--limit", "3",
                              "--offset", "3", "--json", db_url=db_url).stdout)
    assert [u["url"] for u in rest] == seeded[3:5]
    assert len(json.loads(crawler("urls", "--state", "new", "--json", db_url=db_url).stdout)
               ) == 6
    assert json.loads(crawler("urls", "--state", "gone", "--json", db_url=db_url).stdout) == []
    assert_one_line(crawler("urls", "--state", "banana", db_url=db_url), "--state", "active")


def test_importance_and_remove(db_url: str, tmp_path: Path) -> None:
    assert crawler("seed", "http://a.example/1", "http://a.example/2", "http://b.example/1",
                   db_url=db_url).returncode == 0
    assert crawler("importance", "http://A.example/1", "5", db_url=db_url).returncode == 0
    weights = tmp_path / "weights.csv"
    weights.write_text("# url,weight\nhttp://a.example/2,0.25\nhttp://nowhere.example/,3\n")
    partial = crawler("importance", "--file", str(weights), db_url=db_url)
    assert partial.returncode == 1 and "1 unknown" in partial.stdout
    listed = {u["url"]: u["importance"]
              for u in json.loads(crawler("urls", "--json", db_url=db_url).stdout)}
    assert listed == {"http://a.example/1": 5.0, "http://a.example/2": 0.25,
                      "http://b.example/1": 1.0}
    assert_one_line(crawler("importance", "http://a.example/1", "-1", db_url=db_url),
                    "positive")

    removed = crawler("remove", "http://a.example/1", db_url=db_url)
    assert removed.returncode == 0 and "removed 1 URL " in removed.stdout
    assert_one_line(crawler("remove", "--host", "http://a.example", db_url=db_url), "--yes")
    assert len(json.loads(crawler("urls", "--json", db_url=db_url).stdout)) == 2
    gone = crawler("remove", "--host", "http://a.example", "--yes", db_url=db_url)
    assert gone.returncode == 0 and "removed 1 URL " in gone.stdout
    assert [u["url"] for u in json.loads(crawler("urls", "--json", db_url=db_url).stdout)
            ] == ["http://b.example/1"]


HEADERS = ["url,importance", "URL, weight", '"url","importance"', "\ufeffurl,importance",
           "# exported\nurl\tscore"]


def test_importance_file_may_start_with_a_header(db_url: str, tmp_path: Path) -> None:
    # A spreadsheet's CSV (BOM, CRLF, quoted header) as well as a hand-written one.
    assert crawler("seed", "http://a.example/1", "http://a.example/2", db_url=db_url
                   ).returncode == 0
    weights = tmp_path / "weights.csv"
    for n, header in enumerate(HEADERS, start=1):
        weights.write_bytes(f"{header}\r\nhttp://a.example/1,{n}.5\r\nhttp://a.example/2 {n}\r\n"
                            .encode())
        result = crawler("importance", "--file", str(weights), db_url=db_url)
        assert result.returncode == 0, (header, result.stderr)
        assert "set the importance of 2 URLs (0 unknown)" in result.stdout
        listed = {u["url"]: u["importance"]
                  for u in json.loads(crawler("urls", "--json", db_url=db_url).stdout)}
        assert listed == {"http://a.example/1": n + 0.5, "http://a.example/2": float(n)}, header


MALFORMED = [
    # Only the first row may be a header: a later one is a malformed row.
    ("url,importance\nhttp://a.example/1,2\nurl,importance\n", 3, "malformed URL 'url'"),
    ("url,importance\nhttp://a.example/1,two\n", 2, "importance 'two'"),
    ("http://a.example/1,weight\n", 1, "importance 'weight'"),  # a URL: data, not a header
    ("url,importance,rank\nhttp://a.example/1,2\n", 1, "expected 'url,weight'"),
    ("url,importance\n\n# a comment\nhttp://a.example/1,2,3\n", 4, "expected 'url,weight'"),
]


def test_importance_file_reports_malformed_rows_by_line(db_url: str, tmp_path: Path) -> None:
    assert crawler("seed", "http://a.example/1", db_url=db_url).returncode == 0
    weights = tmp_path / "weights.csv"
    for content, line, what in MALFORMED:
        weights.write_text(content)
        assert_one_line(crawler("importance", "--file", str(weights), db_url=db_url),
                        f"{weights}:{line}: ", what)
    # Nothing was set: a file with a malformed line is refused whole.
    assert [u["importance"] for u in json.loads(crawler("urls", "--json", db_url=db_url).stdout)
            ] == [1.0]
