"""`crawler report` and `crawler plan --from-db` against a real, migrated PostgreSQL.

Databases are filled by inserting hosts, URLs and observations directly: pages whose mean
lifetimes are drawn from a known Weibull, fetched every two days for spans of 100–700 days.
"""

from __future__ import annotations

import asyncio
import base64
import json
import math
import re
from datetime import UTC, datetime, timedelta
from pathlib import Path

import asyncpg
import numpy as np
import pytest

from crawler.cli import main as cli_main
from crawler.commands.plan import load_observation_spans_from_db
from crawler.commands.report import main as report_main
from crawler.report.html import EMPTY_DATABASE_MESSAGE

pytestmark = pytest.mark.timeout(120)

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
SHAPE, SCALE_DAYS = 1.4, 152.2
FETCH_INTERVAL_DAYS = 2.0
EPOCH = datetime(2024, 1, 1, tzinfo=UTC)
OBSERVATION_COLUMNS = ("url_id", "fetched_at", "outcome", "status", "duration_seconds",
                       "changed", "last_modified")


async def copy_observations(conn: asyncpg.Connection, rows: list[tuple[object, ...]]) -> None:
    """COPY observation rows (OBSERVATION_COLUMNS), each given its URL's host_id."""
    columns = ", ".join(OBSERVATION_COLUMNS)
    await conn.execute(f"CREATE TEMPORARY TABLE observations_in AS SELECT {columns} "
                       "FROM observations WITH NO DATA")
    await conn.copy_records_to_table("observations_in", records=rows, columns=OBSERVATION_COLUMNS)
    await conn.execute(f"INSERT INTO observations ({columns}, host_id) "
                       f"SELECT o.*, u.host_id FROM observations_in AS o "
                       "JOIN urls AS u ON u.id = o.url_id")
    await conn.execute("DROP TABLE observations_in")


async def insert_url(
    conn: asyncpg.Connection, url: str, origin: str, *, change_rate: float | None = None,
    fetch_rate: float | None = None,
) -> int:
    host_id = await conn.fetchval(
        "INSERT INTO hosts (id, origin) VALUES (crawler_host_id($1), $1) "
        "ON CONFLICT (id) DO UPDATE "
        "SET origin = EXCLUDED.origin RETURNING id", origin,
    )
    url_id: int = await conn.fetchval(
        "INSERT INTO urls (url, host_id, next_fetch_at, state, change_rate_per_day, "
        "fetch_rate_per_day) VALUES ($1, $2, now(), 'active', $3, $4) RETURNING id",
        url, host_id, change_rate, fetch_rate,
    )
    return url_id


def page_rows(
    url_id: int, span_days: float, mean_lifetime_days: float, rng: np.random.Generator
) -> list[tuple[object, ...]]:
    """Observations of one Poisson page fetched every FETCH_INTERVAL_DAYS, as a server
    with exact Last-Modified would show it (304s when nothing changed)."""
    start = EPOCH + timedelta(days=float(rng.uniform(0.0, 30.0)))
    changes = np.sort(rng.uniform(0.0, span_days, int(rng.poisson(span_days / mean_lifetime_days))))
    fetches = np.arange(0.0, span_days + 1e-9, FETCH_INTERVAL_DAYS)
    rows: list[tuple[object, ...]] = []
    for k, at in enumerate(fetches):
        before = changes[changes <= at]
        last_modified = start + timedelta(days=float(before[-1])) if before.size else start
        fetched_at = start + timedelta(days=float(at))
        if k == 0:
            rows.append((url_id, fetched_at, "ok", 200, 0.01, None, last_modified))
            continue
        changed = bool(np.any((changes > fetches[k - 1]) & (changes <= at)))
        outcome, status = ("ok", 200) if changed else ("not_modified", 304)
        rows.append((url_id, fetched_at, outcome, status, 0.01, changed, last_modified))
    return rows


async def fill_synthetic(url: str, pages: int, seed: int = 7) -> None:
    rng = np.random.default_rng(seed)
    conn = await asyncpg.connect(url)
    try:
        rows: list[tuple[object, ...]] = []
        for k in range(pages):
            mean_lifetime = SCALE_DAYS * float(rng.weibull(SHAPE))
            url_id = await insert_url(
                conn, f"http://127.0.0.{2 + k % 5}:8700/p{k}", f"http://127.0.0.{2 + k % 5}:8700",
                change_rate=1.0 / mean_lifetime, fetch_rate=float(rng.uniform(0.05, 1.0)),
            )
            rows += page_rows(url_id, float(rng.uniform(100.0, 700.0)), mean_lifetime, rng)
        await copy_observations(conn, rows)
    finally:
        await conn.close()


def referenced_images(index: Path) -> list[str]:
    """The PNG files the page's images are copies of; each is embedded as a data: URI."""
    page = index.read_text(encoding="utf-8")
    embedded = re.findall(
        r'<img src="data:image/png;base64,([A-Za-z0-9+/=]+)" data-file="([^"]+)"', page
    )
    assert len(embedded) == page.count("<img ")
    for data, name in embedded:  # the embedded PNG is the file written beside the page
        assert base64.b64decode(data, validate=True) == (index.parent / name).read_bytes()
    return [name for _, name in embedded]


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data.startswith(PNG_MAGIC) and len(data) > 1000, path


def test_report_from_empty_database_says_so(db_url: str, tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "report"
    assert report_main(["--out", str(out), "--database-url", db_url]) == 0
    page = (out / "index.html").read_text(encoding="utf-8")
    assert 'id="empty"' in page and EMPTY_DATABASE_MESSAGE.split(":")[0] in page
    assert "too little data to fit" in page
    images = referenced_images(out / "index.html")
    # The capacity plots come from the paper's model; the observation plots are absent.
    assert set(images) == {"mean_lifetimes.png", "level_set.png"}
    for name in images:
        assert_png(out / name)
    assert "paper model" in capsys.readouterr().out


@pytest.mark.breaks_invariant(
    "hosts_due", reason="it fills the database by hand (fill_synthetic: hosts inserted with no due "
    "time)")
def test_report_from_filled_database_draws_every_plot(db_url: str, tmp_path: Path) -> None:
    asyncio.run(fill_synthetic(db_url, pages=120))
    out = tmp_path / "report"
    assert report_main(["--out", str(out), "--database-url", db_url, "--beta", "1w"]) == 0
    page = (out / "index.html").read_text(encoding="utf-8")
    assert 'id="empty"' not in page and "fitted to this crawler" in page
    # Drawn from the model itself: the fit is not called a misfit.
    assert 'id="misfit"' not in page and "does not describe" not in page
    images = referenced_images(out / "index.html")
    assert set(images) == {
        "lifetime_cdf.png", "mean_lifetimes.png", "level_set.png", "change_arrivals.png",
        "change_rates.png", "revisit_intervals.png",
    }
    for name in images:
        assert_png(out / name)
    # Self-contained: no src or href names a file or a server; every image is a data: URI.
    assert not re.search(r'(?:src|href)="(?!data:image/png;base64,)', page)
    # Per-host table: five hosts, fetches and changes that add up to the observations.
    hosts = re.findall(r"<tr><td>(http://127\.0\.0\.\d:8700)</td><td>(\d+)</td><td>(\d+)</td>"
                       r"<td>(\d+)</td>", page)
    assert len(hosts) == 5 and sum(int(h[1]) for h in hosts) == 120
    totals = re.search(r"(\d+) fetches, (\d+) changes detected", page)
    assert totals is not None
    assert sum(int(h[2]) for h in hosts) == int(totals.group(1))
    assert sum(int(h[3]) for h in hosts) == int(totals.group(2)) > 0


@pytest.mark.breaks_invariant(
    "hosts_due", reason="it fills the database by hand (insert_url: hosts inserted with no due "
    "time)")
async def test_observation_spans_from_db_follow_successful_fetches(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        url_id = await insert_url(conn, "http://127.0.0.2:8700/a", "http://127.0.0.2:8700")
        await insert_url(conn, "http://127.0.0.2:8700/never", "http://127.0.0.2:8700")
        day = timedelta(days=1)
        rows = [
            (url_id, EPOCH, "ok", 200, 0.01, None, None),
            # Last-Modified inside the bracket places the change.
            (url_id, EPOCH + day, "ok", 200, 0.01, True, EPOCH + 0.3 * day),
            # Last-Modified outside it (a server clock off): the midpoint stands in.
            (url_id, EPOCH + 2 * day, "ok", 200, 0.01, True, EPOCH - day),
            (url_id, EPOCH + 3 * day, "not_modified", 304, 0.01, False, None),
            # Failed fetches saw nothing: they neither extend the span nor count.
            (url_id, EPOCH + 5 * day, "network_error", None, 0.01, None, None),
        ]
        await copy_observations(conn, rows)
    finally:
        await conn.close()
    observations = await asyncio.to_thread(load_observation_spans_from_db, db_url)
    assert len(observations) == 1
    (page,) = observations
    assert page.span_days == pytest.approx(3.0)
    assert page.change_count == 2
    assert page.intervals_days == pytest.approx((1.5 - 0.3,))


@pytest.mark.breaks_invariant(
    "hosts_due", reason="it fills the database by hand (fill_synthetic: hosts inserted with no due "
    "time)")
def test_plan_from_db_fits_the_observed_weibull(db_url: str,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    asyncio.run(fill_synthetic(db_url, pages=400, seed=11))
    code = cli_main(["plan", "--from-db", "--database-url", db_url, "--alpha", "0.95",
                     "--beta", "1d", "--json"])
    assert code == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["fit_pages"] == 400
    # Fetches every 2 days of pages living ~140 days miss few changes: the fit recovers
    # the generating parameters (400 pages: sampling error ~10%).
    assert plan["weibull_shape"] == pytest.approx(SHAPE, rel=0.2)
    assert plan["weibull_scale_days"] == pytest.approx(SCALE_DAYS, rel=0.2)
    assert math.isfinite(plan["uniform_period_days"]) and plan["uniform_period_days"] > 1.0


def test_plan_from_db_on_empty_database_is_an_error_not_a_crash(
    db_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert cli_main(["plan", "--from-db", "--database-url", db_url]) == 1
    assert "cannot fit" in capsys.readouterr().err
