"""`crawler status` lists in full, a page at a time, and says what a page leaves out, in text
and in JSON (issue 35); hosts the address policy refuses are labelled as refused, not as never
fetched (a host fetched for months is refused once its address leaves the allowed networks)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import asyncpg

from crawler.db.connect import _run_blocking

HOSTS = [f"http://h{n:02d}.example/" for n in range(12)]


def crawler(db_url: str, *argv: str) -> subprocess.CompletedProcess[str]:
    done = subprocess.run([sys.executable, "-m", "crawler", *argv], capture_output=True,
                          text=True, timeout=120,
                          env={**os.environ, "CRAWLER_DATABASE_URL": db_url})
    assert done.returncode == 0, done.stderr
    return done


async def _sql(db_url: str, statement: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        await conn.execute(statement)
    finally:
        await conn.close()


def test_status_pages_every_list_and_counts_it(db_url: str) -> None:
    crawler(db_url, "seed", *HOSTS)
    for origin in HOSTS[:7]:
        crawler(db_url, "pause", "--host", origin.rstrip("/"))
    # What the daemon writes for a host in backoff and for one the address policy refuses
    # (a host that resolved to an allowed address for months, then did not).
    _run_blocking(_sql(db_url, """
        UPDATE hosts SET backoff_until = now() + interval '1 hour', consecutive_failures = 3
        WHERE origin < 'http://h09';
        UPDATE hosts SET refused_reason = 'address 10.0.0.1 is private (CRAWLER_ALLOW_NETWORKS)'
        WHERE origin >= 'http://h06';
    """))

    first = crawler(db_url, "status", "--limit", "4")
    assert "hosts in backoff (1-4 of 9; next: --offset 4)" in first.stdout, first.stdout
    assert "hosts paused (crawler resume --host ORIGIN) (1-4 of 7; next: --offset 4)" \
        in first.stdout
    assert "never fetched" not in first.stdout
    assert "hosts refused by the address policy, not fetched while refused (1-4 of 6; " \
        "next: --offset 4)" in first.stdout
    assert first.stderr.strip() == "more: crawler status --limit 4 --offset 4"

    last = crawler(db_url, "status", "--limit", "4", "--offset", "8")
    assert "hosts in backoff (9-9 of 9)" in last.stdout, last.stdout
    assert "hosts paused (crawler resume --host ORIGIN) (7; none from --offset 8)" \
        in last.stdout
    assert last.stderr == ""

    pages = [json.loads(crawler(db_url, "status", "--json", "--limit", "5", "--offset",
                                str(offset)).stdout) for offset in (0, 5, 10)]
    for key, total in (("hosts_in_backoff", 9), ("hosts_paused", 7), ("hosts_refused", 6)):
        assert all(page["lists"]["totals"][key] == total for page in pages)
        listed = [h["origin"] if isinstance(h, dict) else h for p in pages for h in p[key]]
        assert len(listed) == len(set(listed)) == total, (key, listed)
    assert pages[1]["lists"] | {"totals": None} == {"limit": 5, "offset": 5, "totals": None}

    whole = crawler(db_url, "status")
    assert "hosts in backoff (9)" in whole.stdout and whole.stderr == ""
    assert all(origin.rstrip("/") in whole.stdout for origin in HOSTS[:9])
