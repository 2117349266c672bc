"""The admin CLI end to end, as an operator runs it, against a real database."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import asyncpg
import pytest

pytestmark = pytest.mark.timeout(120)


def crawler(db_url: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    return subprocess.run([sys.executable, "-m", "crawler", *args], env=env,
                          capture_output=True, text=True, timeout=60)


def test_seed_file_reports_bad_lines_and_seeds_the_rest(db_url: str, tmp_path: Path) -> None:
    seeds = tmp_path / "urls.txt"
    seeds.write_text(
        "# comment line\n"
        "http://Example.COM:80/a?b=2&a=1#frag\n"
        "htp:/not a url\n"
        "\n"
        "https://example.org/x   # trailing comment\n"
        "https://example.org/x\n"
    )
    result = crawler(db_url, "seed", "--file", str(seeds), "http://example.net/")
    assert result.returncode == 1
    assert f"{seeds}:3: malformed URL" in result.stderr
    assert "seeded 3 new URLs" in result.stdout
    again = crawler(db_url, "seed", "--file", str(seeds))
    assert "seeded 0 new URLs (2 already known" in again.stdout

    status = json.loads(crawler(db_url, "status", "--json").stdout)
    assert status["urls"] == 3 and status["hosts"] == 3
    assert status["urls_by_state"] == {"new": 3}
    for key in ("due_now", "fetches_last_hour", "changes_last_hour", "planner",
                "most_overdue", "hosts_in_backoff"):
        assert key in status
    human = crawler(db_url, "status")
    assert human.returncode == 0 and "estimated freshness" in human.stdout


async def test_show_json_has_the_documented_shape(db_url: str) -> None:
    assert crawler(db_url, "seed", "http://example.com/page").returncode == 0
    conn = await asyncpg.connect(db_url)
    url_id = await conn.fetchval("SELECT id FROM urls")
    await conn.execute(
        "INSERT INTO observations (url_id, fetched_at, outcome, status, bytes, "
        "duration_seconds, simhash, simhash_distance, changed, host_id) "
        "SELECT $1, t, 'ok', 200, b, 0.1, s, d, c, (SELECT host_id FROM urls WHERE id = $1) "
        "FROM (VALUES (now() - interval '1 minute', 10, -5, NULL::smallint, NULL::bool), "
        "             (now(), 12, 77, 9, true)) AS v(t, b, s, d, c)", url_id)
    await conn.close()
    shown = json.loads(crawler(db_url, "show", "http://EXAMPLE.com/page", "--json").stdout)
    assert shown["url"] == "http://example.com/page"
    assert [o["changed"] for o in shown["observations"]] == [True, None]  # newest first
    for item in shown["observations"]:
        assert {"fetched_at", "status", "changed", "simhash_distance"} <= set(item)
    assert shown["observations"][1]["simhash"] == f"{(-5) % (1 << 64):016x}"
    assert crawler(db_url, "show", "http://nowhere.example/").returncode == 1


def test_window_commands(db_url: str) -> None:
    assert crawler(db_url, "seed", "--window", "50", "http://example.com/").returncode == 0
    sites = json.loads(crawler(db_url, "sites", "--json").stdout)
    lifespans = sites[0].pop("lifespans")
    assert sites == [{"root_url": "http://example.com/", "window_size": 50, "in_window": 1,
                      "discovered": 1, "entered": 1, "left": 0, "include": [], "exclude": [],
                      "created_at": sites[0]["created_at"]}]
    assert lifespans["pages"] == 1 and lifespans["censored"] == 1
    assert set(lifespans["method1"]) == {"<=1w", "1w-1m", "1m-4m", ">4m"}
    urls = json.loads(crawler(db_url, "urls", "--site", "http://example.com/", "--json").stdout)
    assert urls[0]["url"] == "http://example.com/" and urls[0]["depth"] == 0
    assert urls[0]["in_window"] is True and urls[0]["status"] is None
    assert urls[0]["lifespan_censored"] is True  # the root existed before observation


@pytest.mark.parametrize("command", ["seed", "status", "show", "run", "sites", "urls", "demo"])
def test_help_names_environment_variables(command: str) -> None:
    result = subprocess.run([sys.executable, "-m", "crawler", command, "--help"],
                            capture_output=True, text=True, timeout=30)
    assert result.returncode == 0
    assert "CRAWLER_DATABASE_URL" in result.stdout
    if command == "run":
        for variable in ("CRAWLER_CONCURRENCY", "CRAWLER_POLITENESS_DELAY",
                         "CRAWLER_SIMHASH_THRESHOLD", "CRAWLER_DEFAULT_INTERVAL",
                         "CRAWLER_BUDGET_PER_DAY"):
            assert variable in result.stdout
