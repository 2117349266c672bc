"""Configuration that says no (issue 35): a misspelled variable is named with the setting it
was probably meant to be, every bad value is one line and exit 2, contradictory bounds are
refused, and hosts the WHATWG URL Standard rejects are not seeded."""

from __future__ import annotations

import os
import subprocess
import sys

import asyncpg
import pytest

from crawler.db.connect import _run_blocking


def crawler(env: dict[str, str], *argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "crawler", *argv], capture_output=True,
                          text=True, timeout=120, env={**os.environ, **env})


def test_an_unknown_variable_is_a_warning_naming_the_closest_setting(db_url: str) -> None:
    done = crawler({"CRAWLER_DATABASE_URL": db_url, "CRAWLER_CONCURENCY": "4",
                    "CRAWLER_TEST_ANYTHING": "1"}, "status")
    assert done.returncode == 0, done.stderr
    assert done.stderr.splitlines() == [
        "crawler: warning: CRAWLER_CONCURENCY is not a setting and is ignored "
        "(did you mean CRAWLER_CONCURRENCY?)"
    ]


@pytest.mark.parametrize(("variable", "value", "named"), [
    ("CRAWLER_LOG_LEVEL", "verbose", "CRAWLER_LOG_LEVEL"),
    ("CRAWLER_MIN_INTERVAL", "7200", "CRAWLER_MAX_INTERVAL=3600"),
    ("CRAWLER_BACKOFF_BASE_SECONDS", "100", "CRAWLER_BACKOFF_CAP_SECONDS=10"),
    ("CRAWLER_CONCURRENCY", "many", "CRAWLER_CONCURRENCY"),
    ("CRAWLER_LOG_JSON", "maybe", "CRAWLER_LOG_JSON"),
])
@pytest.mark.parametrize("command", ["status", "run"])
def test_every_bad_value_is_one_line_and_exit_2(
    db_url: str, variable: str, value: str, named: str, command: str
) -> None:
    env = {"CRAWLER_DATABASE_URL": db_url, "CRAWLER_MAX_INTERVAL": "3600",
           "CRAWLER_BACKOFF_CAP_SECONDS": "10", variable: value}
    if variable == "CRAWLER_BACKOFF_BASE_SECONDS":
        env.pop("CRAWLER_MAX_INTERVAL")
    else:
        env.pop("CRAWLER_BACKOFF_CAP_SECONDS")
    done = crawler(env, command)
    assert done.returncode == 2, done.stderr
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("crawler: invalid "), done.stderr
    assert named in lines[0] and "Traceback" not in done.stderr


def test_the_log_level_option_is_checked_too(db_url: str) -> None:
    done = crawler({"CRAWLER_DATABASE_URL": db_url}, "status", "--log-level", "loud")
    assert done.returncode == 2
    assert done.stderr.splitlines() == [
        "crawler: invalid CRAWLER_LOG_LEVEL (--log-level): 'loud' is not a log level; levels: "
        "DEBUG, INFO, WARNING, ERROR, CRITICAL"
    ]
    quiet = crawler({"CRAWLER_DATABASE_URL": db_url, "CRAWLER_LOG_LEVEL": "warning"}, "status")
    assert quiet.returncode == 0, quiet.stderr


def test_hosts_the_url_standard_rejects_are_not_seeded(db_url: str) -> None:
    bad = ["http://a b/", "http://a..b/", "http://exa%20mple.com/", "http://a<b/",
           "http://.example.com/", f"http://{'a' * 64}.example/"]
    good = ["http://example.com./x", "http://a_b.example/", "http://xn--mnchen-3ya.de/"]
    done = crawler({"CRAWLER_DATABASE_URL": db_url}, "seed", *bad, *good)
    assert done.returncode == 1, done.stderr  # done in part: the malformed lines are named
    for number, url in enumerate(bad, start=1):
        assert f"argument:{number}: malformed URL {url!r} (not seeded)" in done.stderr

    async def seeded() -> list[str]:
        conn = await asyncpg.connect(db_url)
        try:
            return [r["url"] for r in await conn.fetch("SELECT url FROM urls ORDER BY url")]
        finally:
            await conn.close()

    assert _run_blocking(seeded()) == sorted(good)
