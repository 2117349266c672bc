"""`crawler report` says what the database holds: every per-host figure of the page is checked
against a query of the observations written here, and a lifetime fit that the data reject
says so in words.

Hosts are built to catch a row mixing sources: one with no change but an estimator rate set,
one with many changes whose URLs' rates are unset (as after a failed fetch), one fetched only
once, one never fetched, and two whose URLs share an id (urls are keyed by (id, host_id)).
"""

from __future__ import annotations

import asyncio
import html
import re
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import pytest

from crawler.cli import main as cli_main
from crawler.report.data import load_report_data

pytestmark = pytest.mark.timeout(120)

EPOCH = datetime(2024, 3, 1, tzinfo=UTC)


@dataclass(frozen=True)
class Fetch:
    day: float
    outcome: str = "ok"
    changed: bool | None = False


async def add_host(conn: asyncpg.Connection, origin: str) -> int:
    host_id: int = await conn.fetchval(
        "INSERT INTO hosts (id, origin) VALUES (crawler_host_id($1), $1) RETURNING id", origin
    )
    return host_id


async def add_url(
    conn: asyncpg.Connection, host_id: int, url: str, fetches: list[Fetch], *,
    url_id: int | None = None, change_rate: float | None = None,
) -> None:
    if url_id is None:
        url_id = await conn.fetchval(
            "INSERT INTO urls (url, host_id, next_fetch_at, state, change_rate_per_day) "
            "VALUES ($1, $2, now(), 'active', $3) RETURNING id", url, host_id, change_rate,
        )
    else:
        await conn.execute(
            "INSERT INTO urls (id, url, host_id, next_fetch_at, state, change_rate_per_day) "
            "VALUES ($1, $2, $3, now(), 'active', $4)", url_id, url, host_id, change_rate,
        )
    status = {"ok": 200, "not_modified": 304, "network_error": None, "http_error": 500}
    await conn.executemany(
        "INSERT INTO observations (url_id, host_id, fetched_at, outcome, status, "
        "duration_seconds, changed) VALUES ($1, $2, $3, $4, $5, 0.01, $6)",
        [(url_id, host_id, EPOCH + timedelta(days=f.day), f.outcome, status[f.outcome],
          f.changed) for f in fetches],
    )


def daily(days: int, changed_every: int) -> list[Fetch]:
    """A first fetch, then one a day; every changed_every-th sees a change (0: none does)."""
    return [Fetch(0.0, changed=None)] + [
        Fetch(float(d), changed=changed_every > 0 and d % changed_every == 0)
        for d in range(1, days + 1)
    ]


async def seed_hosts(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        # Many changes, both URLs' estimator rates unset, the last fetches failed.
        busy = await add_host(conn, "http://busy.test")
        for k in range(2):
            await add_url(conn, busy, f"http://busy.test/{k}",
                          [*daily(40, 1 + k), Fetch(40.5, "network_error", None)])
        # No change at all, yet an estimator rate that a prior or Last-Modified gave.
        calm = await add_host(conn, "http://calm.test")
        await add_url(conn, calm, "http://calm.test/", daily(30, 0), change_rate=38.45)
        await add_url(conn, calm, "http://calm.test/b",
                      [Fetch(0.0, changed=None), Fetch(3.0, "not_modified"),
                       Fetch(9.0, "http_error", None)], change_rate=38.45)
        # One successful fetch: no span to count changes over.
        once = await add_host(conn, "http://once.test")
        await add_url(conn, once, "http://once.test/", [Fetch(2.0, changed=None)])
        # Seeded, never fetched.
        never = await add_host(conn, "http://never.test")
        await add_url(conn, never, "http://never.test/", [])
        # The same URL id on two hosts: each host's figures are its own observations only.
        twin_a = await add_host(conn, "http://twin-a.test")
        twin_b = await add_host(conn, "http://twin-b.test")
        await add_url(conn, twin_a, "http://twin-a.test/", daily(10, 2), url_id=900_000)
        await add_url(conn, twin_b, "http://twin-b.test/", daily(20, 5), url_id=900_000)
    finally:
        await conn.close()


# Independent of the report's query: correlated subqueries per host, spans per URL in epoch
# seconds computed separately and summed, rates divided in SQL.
EXPECTED_HOSTS = """
WITH spans AS (
    SELECT u.host_id, u.id,
           (SELECT extract(epoch FROM max(o.fetched_at)) - extract(epoch FROM min(o.fetched_at))
            FROM observations AS o
            WHERE o.url_id = u.id AND o.host_id = u.host_id
              AND o.outcome IN ('ok', 'not_modified')) AS seconds
    FROM urls AS u
)
SELECT h.origin,
       (SELECT count(*) FROM urls AS u WHERE u.host_id = h.id) AS urls,
       (SELECT count(*) FROM observations AS o
        WHERE o.host_id = h.id
          AND EXISTS (SELECT 1 FROM urls AS u WHERE u.id = o.url_id AND u.host_id = h.id))
           AS fetches,
       (SELECT count(*) FROM observations AS o
        WHERE o.host_id = h.id AND o.changed IS TRUE) AS changes,
       (SELECT coalesce(sum(s.seconds), 0) FROM spans AS s WHERE s.host_id = h.id) / 86400.0
           AS watched_days
FROM hosts AS h
ORDER BY h.origin
"""


async def expected_hosts(db_url: str) -> dict[str, tuple[int, int, int, float, float | None]]:
    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch(EXPECTED_HOSTS)
    finally:
        await conn.close()
    expected = {}
    for row in rows:
        days = float(row["watched_days"])
        rate = int(row["changes"]) / days if days > 0 else None
        expected[row["origin"]] = (int(row["urls"]), int(row["fetches"]), int(row["changes"]),
                                   days, rate)
    return expected


HOST_ROW = re.compile(
    r"<tr><td>([^<]+)</td><td>(\d+)</td><td>(\d+)</td><td>(\d+)</td><td>([^<]+)</td>"
    r"<td>([^<]+)</td></tr>"
)


@pytest.mark.breaks_invariant(
    "hosts_due", reason="it fills the database by hand (hosts inserted with no due time)")
def test_every_host_figure_matches_the_observations(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(seed_hosts(db_url))
    expected = asyncio.run(expected_hosts(db_url))
    # What the seed says, so that the check query itself is checked once.
    assert expected["http://busy.test"][:3] == (2, 84, 60)
    assert expected["http://calm.test"][:4] == (2, 34, 0, 33.0)
    assert expected["http://calm.test"][4] == 0.0
    assert expected["http://once.test"][3:] == (0.0, None)
    assert expected["http://never.test"][:3] == (1, 0, 0)
    assert expected["http://twin-a.test"][1:3] == (11, 5)
    assert expected["http://twin-b.test"][1:3] == (21, 4)

    data = asyncio.run(load_report_data(db_url, datetime.now(UTC)))
    assert {h.origin for h in data.hosts} == set(expected)
    for host in data.hosts:
        urls, fetches, changes, days, rate = expected[host.origin]
        assert (host.urls, host.fetches, host.changes) == (urls, fetches, changes), host
        assert host.watched_days == pytest.approx(days, rel=1e-9), host
        assert host.changes_per_day == (None if rate is None else pytest.approx(rate)), host

    out = tmp_path / "report"
    assert cli_main(["report", "--out", str(out), "--database-url", db_url]) == 0
    capsys.readouterr()
    page = (out / "index.html").read_text(encoding="utf-8")
    shown = {html.unescape(m[0]): m[1:] for m in HOST_ROW.findall(page)}
    assert set(shown) == set(expected), page
    for origin, (urls, fetches, changes, days, rate) in expected.items():
        cells = shown[origin]
        assert (int(cells[0]), int(cells[1]), int(cells[2])) == (urls, fetches, changes), origin
        assert float(cells[3]) == pytest.approx(days, rel=1e-3), origin
        if rate is None:
            assert cells[4] == "–", origin
        else:
            assert float(cells[4]) == pytest.approx(rate, rel=1e-3), origin
    # Rows in order of fetches, busiest first.
    order = [m[0] for m in HOST_ROW.findall(page)]
    assert [int(shown[o][1]) for o in order] == sorted(
        (int(shown[o][1]) for o in order), reverse=True)


async def seed_clockwork_pages(db_url: str, pages: int) -> None:
    """Pages that change exactly every 10 days, watched 100 days and fetched daily: every
    page shows 10 changes, far less spread than Poisson pages of any lifetimes could."""
    conn = await asyncpg.connect(db_url)
    try:
        host = await add_host(conn, "http://clock.test")
        for k in range(pages):
            await add_url(conn, host, f"http://clock.test/{k}", daily(100, 10))
    finally:
        await conn.close()


@pytest.mark.breaks_invariant(
    "hosts_due", reason="it fills the database by hand (hosts inserted with no due time)")
def test_a_lifetime_fit_the_data_reject_says_so(
    db_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    asyncio.run(seed_clockwork_pages(db_url, pages=150))
    out = tmp_path / "report"
    assert cli_main(["report", "--out", str(out), "--database-url", db_url]) == 0
    printed = capsys.readouterr().out
    page = (out / "index.html").read_text(encoding="utf-8")
    assert "fitted to this crawler" in page
    warning = re.search(r'<p class="message" id="misfit">([^<]+)</p>', page)
    assert warning is not None, page
    words = html.unescape(warning.group(1))
    assert words.startswith("The fitted Weibull does not describe these lifetimes")
    p_value = re.search(r"p = ([0-9.e+-]+), below 0.01", words)
    assert p_value is not None and float(p_value.group(1)) < 0.01, words
    assert "warning: The fitted Weibull does not describe these lifetimes" in printed
