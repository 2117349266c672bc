"""`crawler export`: CSV and JSON lines of a 100,000-URL frontier in constant memory."""

from __future__ import annotations

import asyncio
import csv
import io
import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest
from test_cli_errors import assert_one_line, crawler

pytestmark = pytest.mark.timeout(300)

# The 100,000-URL memory check is one of the long scenarios (about a minute on 2 cores).

URLS = 100_000


async def _fill(db_url: str) -> None:
    """100,000 URLs on 100 hosts; the newest tenth created in the last hour, the rest a week
    ago; one observation each for the first 1000."""
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute(
            "INSERT INTO hosts (id, origin, next_due_at, next_request_at) "
            "SELECT crawler_host_id(o), o, now(), now() "
            "FROM generate_series(0, 99) i, LATERAL (SELECT 'http://h' || i || '.example') "
            "AS t(o)")
        await conn.execute(
            "INSERT INTO urls (url, host_id, next_fetch_at, created_at) "
            "SELECT 'http://h' || (i % 100) || '.example/page/' || i || '?with,comma', "
            "       (SELECT id FROM hosts WHERE origin = 'http://h' || (i % 100) || '.example'), "
            "       now(), CASE WHEN i >= $1 * 9 / 10 THEN now() ELSE now() - interval '7 days' "
            "END FROM generate_series(0, $1 - 1) i", URLS)
        await conn.execute(
            "INSERT INTO observations (url_id, fetched_at, outcome, status, bytes, "
            "duration_seconds, host_id) SELECT id, now(), 'ok', 200, 100, 0.01, host_id FROM urls "
            "ORDER BY id LIMIT 1000")
    finally:
        await conn.close()


def _export_peak_rss_kib(db_url: str, out: Path, *args: str) -> int:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CRAWLER_")}
    env["CRAWLER_DATABASE_URL"] = db_url
    proc = subprocess.Popen([sys.executable, "-m", "crawler", "export", *args, "--out",
                             str(out)], env=env, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    proc.returncode = os.waitstatus_to_exitcode(status)
    assert proc.returncode == 0, proc.stderr.read() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    return int(usage.ru_maxrss)


@pytest.mark.slow
def test_export_streams_in_constant_memory(db_url: str, tmp_path: Path) -> None:
    asyncio.run(_fill(db_url))
    for fmt in ("csv", "jsonl"):
        small, large = tmp_path / f"small.{fmt}", tmp_path / f"all.{fmt}"
        small_rss = _export_peak_rss_kib(db_url, small, "urls", "--format", fmt,
                                         "--since", "1d")
        large_rss = _export_peak_rss_kib(db_url, large, "urls", "--format", fmt)
        if fmt == "csv":
            rows = list(csv.DictReader(large.open(newline="")))
            assert len(rows) == URLS and rows[0]["url"].endswith("?with,comma")
            assert len(list(csv.DictReader(small.open(newline="")))) == URLS // 10
        else:
            lines = large.read_text().splitlines()
            assert len(lines) == URLS and json.loads(lines[-1])["origin"].startswith("http://h")
            assert len(small.read_text().splitlines()) == URLS // 10
        # ten times the rows, the same memory (within 15 %): nothing accumulates
        print(f"{fmt}: peak RSS {small_rss} KiB for {URLS // 10} URLs, {large_rss} KiB for "
              f"{URLS}")
        assert large_rss < small_rss * 1.15, (small_rss, large_rss)


def test_export_observations_and_bad_since(db_url: str) -> None:
    assert crawler("seed", "http://a.example/", db_url=db_url).returncode == 0
    result = crawler("export", "observations", "--format", "csv", db_url=db_url)
    assert result.returncode == 0 and result.stdout.strip() == ""  # no fetches yet
    assert "exported 0 observations" in result.stderr
    urls = crawler("export", "urls", "--since", "2000-01-01", db_url=db_url)
    assert [json.loads(line)["url"] for line in io.StringIO(urls.stdout)] == [
        "http://a.example/"]
    assert_one_line(crawler("export", "urls", "--since", "yesterday", db_url=db_url),
                    "--since")
