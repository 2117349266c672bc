"""Storage faults under the real daemon: a full disk, the directory deleted, the directory made
read-only, SIGKILL mid-write, an earlier version damaged on disk.

For each, against a test web that logs every request: no host ever receives two requests
closer than its politeness delay; every index row reads back a record whose digest matches;
no version committed before the fault is lost; the fault shows in `crawler status`, in the
metrics and in /readyz; the daemon recovers by itself within 10 s of the fault clearing.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import random
import signal
import time
from collections.abc import Callable
from pathlib import Path

import asyncpg
import pytest
from daemon import daemon_env
from invariants import assert_index_rows_read_back, assert_polite
from storagefaults import (
    LoggingWeb,
    RunningDaemon,
    crawler_cli,
    fill,
    logging_web,
    metric,
    poll,
    read_only,
    tiny_tmpfs,
)
from warctools import check_files

from crawler.db import frontier
from crawler.store.warc import OPEN_SUFFIX, SUFFIX

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]

DELAY = 0.4  # the politeness delay every host gets
RECOVERY_SECONDS = 10.0


def env_for(db_url: str, warc_dir: Path, max_bytes: int = 60000) -> dict[str, str]:
    return daemon_env(
        db_url, schedule="uniform", default_interval="0.5", min_interval="0.3",
        politeness_delay=str(DELAY), poll_interval="0.1", total_timeout="2",
        lease_seconds="8", warc_dir=str(warc_dir), warc_max_bytes=str(max_bytes),
    )


async def stored_rows(pool: asyncpg.Pool) -> list[asyncpg.Record]:
    return list(await pool.fetch("SELECT * FROM stored_records ORDER BY id"))


async def max_id(pool: asyncpg.Pool) -> int:
    return int(await pool.fetchval("SELECT coalesce(max(id), 0) FROM stored_records"))


async def seeded(db_url: str, web: LoggingWeb) -> asyncpg.Pool:
    pool = await asyncpg.create_pool(db_url, min_size=1, max_size=3)
    await frontier.seed(pool, [(u, 1.0) for u in web.urls()], time.time())
    return pool


async def fault_and_recovery(
    db_url: str,
    warc_dir: Path,
    web: LoggingWeb,
    inject: Callable[[], None],
    clear: Callable[[], None],
    kind: str,
) -> tuple[list[asyncpg.Record], float]:
    """Crawl, inject the fault, see it reported everywhere and no host claimed while it lasts,
    clear it, see the daemon resume within RECOVERY_SECONDS; the rows committed before the
    fault and the time it was cleared (monotonic)."""
    env = env_for(db_url, warc_dir)
    pool = await seeded(db_url, web)
    daemon = await RunningDaemon.start(env)
    try:
        await poll(lambda: _rows_at_least(pool, 15), "the first stored versions", 90)
        before = await stored_rows(pool)
        inject()
        await poll(lambda: _ready_says(daemon, 503, kind), f"/readyz 503 naming {kind}", 30)
        seen = time.monotonic()
        page = (await daemon.get("/metrics"))[1]
        assert metric(page, "crawler_storage_writable") == 0, page
        assert metric(page, f'crawler_storage_fault{{reason="{kind}"}}') == 1
        probes = metric(page, "crawler_storage_probes_total") or 0.0
        await poll(lambda: _status_says(env, "collection not writable", kind),
                   "crawler status naming the fault", 30)
        # Hold the fault over three more probes (about 3 s): no host may be claimed then.
        await poll(lambda: _probes_past(daemon, probes + 3), "three probes", 30)
        cleared_at = time.monotonic()
        clear()
        cleared_id = await max_id(pool)
        took = await poll(lambda: _recovered(daemon, pool, cleared_id),
                          "/readyz 200 and a version stored after the fault cleared", 30)
        assert took <= RECOVERY_SECONDS, f"recovered {took:.1f} s after the fault cleared"
        # Requests that started after the fault was seen (with a second for fetches already
        # in flight) and before it cleared: none, no host was claimed.
        during = [r for r in web.log if seen + 1.0 < r.at < cleared_at]
        assert not during, f"{len(during)} requests while the collection was not writable"
        await poll(lambda: _rows_at_least(pool, len(before) + 20), "more versions", 60)
        page = (await daemon.get("/metrics"))[1]
        assert metric(page, "crawler_storage_writable") == 1
    finally:
        output = await daemon.stop()
        await pool.close()
    assert daemon.proc.returncode == 0, output[-3000:]
    assert "Traceback" not in output, output[-5000:]
    assert_polite(web.arrivals(), DELAY)
    return before, cleared_at


async def _rows_at_least(pool: asyncpg.Pool, n: int) -> bool:
    return int(await pool.fetchval("SELECT count(*) FROM stored_records")) >= n


async def _ready_says(daemon: RunningDaemon, status: int, text: str) -> bool:
    code, body = await daemon.get("/readyz")
    return code == status and text in body


async def _status_says(env: dict[str, str], *texts: str) -> bool:
    status = await asyncio.to_thread(crawler_cli, env, "status")
    assert status.returncode == 0, status.stderr
    return all(text in status.stdout for text in texts)


async def _probes_past(daemon: RunningDaemon, n: float) -> bool:
    return (metric((await daemon.get("/metrics"))[1], "crawler_storage_probes_total")
            or 0.0) >= n


async def _recovered(daemon: RunningDaemon, pool: asyncpg.Pool, after_id: int) -> bool:
    return (await daemon.get("/readyz"))[0] == 200 and await max_id(pool) > after_id


async def check_collection(db_url: str, warc_dir: Path, before: list[asyncpg.Record],
                           **where: object) -> None:
    """Every row reads back; every row committed before the fault is still indexed; every
    closed file passes `warcio check` (no torn record mid-file)."""
    count = await assert_index_rows_read_back(db_url, warc_dir, **where)  # type: ignore[arg-type]
    conn = await asyncpg.connect(db_url)
    try:
        ids = {r["id"] for r in await conn.fetch("SELECT id FROM stored_records")}
    finally:
        await conn.close()
    lost = [r["id"] for r in before if r["id"] not in ids]
    assert not lost and count > len(before)
    check_files(sorted(warc_dir.glob("*" + SUFFIX)))


@pytest.mark.breaks_invariant(
    "index_rows", reason="its WARC directory is a tmpfs unmounted before the test ends (the "
    "test checks every row while it is mounted)")
async def test_a_full_disk_stops_claims_and_recovers(db_url: str, tmp_path: Path) -> None:
    warc_dir = tmp_path / "warc"
    with tiny_tmpfs(warc_dir, 4 * 1024 * 1024):
        filler: list[Path] = []
        async with logging_web() as web:
            before, _ = await fault_and_recovery(
                db_url, warc_dir, web, lambda: filler.append(fill(warc_dir)),
                lambda: filler[0].unlink(), "disk_full")
        await check_collection(db_url, warc_dir, before)


async def test_a_read_only_directory_stops_claims_and_recovers(
    db_url: str, tmp_path: Path
) -> None:
    warc_dir = tmp_path / "warc"
    warc_dir.mkdir()
    mounted: list[object] = []

    def inject() -> None:
        guard = read_only(warc_dir)
        guard.__enter__()
        mounted.append(guard)

    def clear() -> None:
        mounted[0].__exit__(None, None, None)  # type: ignore[attr-defined]

    async with logging_web() as web:
        before, _ = await fault_and_recovery(db_url, warc_dir, web, inject, clear, "read_only")
    await check_collection(db_url, warc_dir, before)
    assert not list(warc_dir.glob("*" + OPEN_SUFFIX)), "a stray .open file left behind"


@pytest.mark.breaks_invariant(
    "index_rows", reason="it moves WARC files out of the directory warc_files names (the "
    "test checks them where it moved them)")
async def test_a_deleted_directory_is_never_written_into(db_url: str, tmp_path: Path) -> None:
    """The directory vanishes (moved away, a file put in its place): records written into
    the vanished files are never indexed; once the path is free the daemon recreates the
    directory by itself and goes on there."""
    warc_dir = tmp_path / "warc"
    moved = tmp_path / "moved"
    ends: dict[str, int] = {}

    def inject() -> None:
        blocker = tmp_path / "blocker"
        blocker.write_text("not a directory")
        os.rename(warc_dir, moved)
        os.rename(blocker, warc_dir)
        for path in moved.iterdir():
            ends[path.name.removesuffix(OPEN_SUFFIX)] = path.stat().st_size

    async with logging_web() as web:
        before, _ = await fault_and_recovery(db_url, warc_dir, web, inject,
                                             lambda: warc_dir.unlink(), "directory_gone")
    assert warc_dir.is_dir(), "the daemon recreated its directory"
    await assert_index_rows_read_back(db_url, warc_dir, elsewhere=moved, ends=ends)
    conn = await asyncpg.connect(db_url)
    try:
        ids = {r["id"] for r in await conn.fetch("SELECT id FROM stored_records")}
        after = await conn.fetchval(
            "SELECT count(*) FROM stored_records WHERE NOT (warc_file = ANY($1::text[]))",
            list(ends))
    finally:
        await conn.close()
    assert all(r["id"] in ids for r in before)
    assert after > 0, "versions stored in the recreated directory"
    check_files(sorted(warc_dir.glob("*" + SUFFIX)))


KILLS = 10


async def test_sigkill_mid_write_ten_times(db_url: str, tmp_path: Path) -> None:
    rng = random.Random(34)
    warc_dir = tmp_path / "warc"
    env = env_for(db_url, warc_dir)
    async with logging_web() as web:
        pool = await seeded(db_url, web)
        committed: list[asyncpg.Record] = []
        try:
            for trial in range(KILLS):
                daemon = await RunningDaemon.start(env)
                target = len(committed) + 3
                await poll(lambda: _rows_at_least(pool, target),  # noqa: B023
                           f"versions stored in trial {trial}", 90)
                await poll(lambda: _ready_says(daemon, 200, "ready"),  # noqa: B023
                           "readiness", 30)
                # Kill it at a random moment while it writes.
                deadline = time.monotonic() + rng.uniform(0.0, 1.5)
                await poll(lambda: _after(deadline), "a random moment", 5)  # noqa: B023
                daemon.proc.send_signal(signal.SIGKILL)
                await daemon.proc.wait()
                await daemon._reader
                committed = await stored_rows(pool)
            daemon = await RunningDaemon.start(env)
            await poll(lambda: _rows_at_least(pool, len(committed) + 10), "after restarts", 90)
            output = await daemon.stop()
            assert daemon.proc.returncode == 0, output[-3000:]
        finally:
            await pool.close()
        assert_polite(web.arrivals(), DELAY)
    await check_collection(db_url, warc_dir, committed)
    assert not list(warc_dir.glob("*" + OPEN_SUFFIX))


async def _after(deadline: float) -> bool:
    return time.monotonic() >= deadline


def flip_byte(path: Path, offset: int) -> None:
    with path.open("r+b") as file:
        file.seek(offset)
        byte = file.read(1)
        file.seek(offset)
        file.write(bytes([byte[0] ^ 0x5A]))


def file_of(warc_dir: Path, name: str) -> Path:
    closed = warc_dir / name
    return closed if closed.exists() else warc_dir / (name + OPEN_SUFFIX)


@pytest.mark.breaks_invariant(
    "index_rows", reason="it flips a byte, truncates and deletes WARC files on purpose (the "
    "test checks the rows not marked damaged itself)")
async def test_a_damaged_earlier_version_and_verify(db_url: str, tmp_path: Path) -> None:
    """A changing page's stored version is damaged between two runs of the daemon: its next
    versions are stored all the same (the diff goes without), the damage is marked and
    reported.
    Then, daemon stopped, `crawler verify` finds a flipped byte, a truncated file and a
    deleted file, each with its own message, and `--repair` makes the next fetch of the
    affected URLs store full responses."""
    warc_dir = tmp_path / "warc"
    env = env_for(db_url, warc_dir, max_bytes=12000)
    async with logging_web() as web:
        pool = await seeded(db_url, web)
        try:
            daemon = await RunningDaemon.start(env)
            await poll(lambda: _closed_files_at_least(warc_dir, 5), "five closed files", 90)
            # Stopped while the damage is made: the damaged response is then surely the one the
            # next diff of its page reads (a running daemon could store a newer one first), and
            # the restarted daemon reads it from disk (a running one diffs against the text it
            # keeps in memory).
            restart_output = await daemon.stop()
            assert daemon.proc.returncode == 0, restart_output[-3000:]
            row = await pool.fetchrow(
                "SELECT s.*, u.url FROM stored_records s JOIN urls u ON u.id = s.url_id "
                "WHERE u.url LIKE '%/c0' AND record_type = 'response' "
                "ORDER BY s.fetched_at DESC LIMIT 1")
            assert row is not None
            before = await stored_rows(pool)
            flip_byte(file_of(warc_dir, row["warc_file"]),
                      row["warc_offset"] + row["warc_length"] // 2)
            daemon = await RunningDaemon.start(env)
            # The damage shows once the page is fetched again and diffed against the damaged
            # record: on a loaded machine that fetch can wait for leases and the plan.
            await poll(lambda: _ready_says(daemon, 200, "damaged"),
                       "/readyz naming the damage", 90)
            newer = await pool.fetchval(
                "SELECT count(*) FROM stored_records WHERE url_id = $1 AND fetched_at > $2",
                row["url_id"], row["fetched_at"])
            assert newer >= 1, "the damaged version stopped no new one"
            page = (await daemon.get("/metrics"))[1]
            assert (metric(page, 'crawler_warc_damaged_records_total{kind="corrupt"}') or 0) \
                + (metric(page, 'crawler_warc_damaged_records_total{kind="digest"}') or 0) >= 1
            status = await asyncio.to_thread(crawler_cli, env, "status")
            assert "damaged records marked: 1" in status.stdout, status.stdout
            got = await asyncio.to_thread(crawler_cli, env, "get", row["url"], "--at",
                                          row["fetched_at"].isoformat())
            assert got.returncode == 4 and "Traceback" not in got.stderr, got.stderr
            assert len(got.stderr.strip().splitlines()) == 1, got.stderr
            output = await daemon.stop()
            assert daemon.proc.returncode == 0, output[-3000:]
            assert_polite(web.arrivals(), DELAY)
            # The damaged row is marked and nothing else committed before was lost.
            marked = await pool.fetchval("SELECT damaged FROM stored_records WHERE id = $1",
                                         row["id"])
            assert marked in ("corrupt", "digest")
            ids = {r["id"] for r in await stored_rows(pool)}
            assert all(r["id"] in ids for r in before)

            # Three damages in three closed files: a static page's response flipped, a file
            # cut in the middle of a record, a file deleted.
            responses = await pool.fetch(
                "SELECT s.*, u.url FROM stored_records s JOIN urls u ON u.id = s.url_id "
                "WHERE s.record_type = 'response' AND s.damaged IS NULL "
                "ORDER BY u.url ~ '/s[0-9]$' DESC, s.fetched_at")
            picked: list[asyncpg.Record] = []
            for candidate in responses:
                if (warc_dir / candidate["warc_file"]).exists() and \
                        candidate["warc_file"] not in {r["warc_file"] for r in picked}:
                    picked.append(candidate)
            assert len(picked) >= 3, picked
            flipped, truncated, deleted = picked[:3]
            assert "/s" in flipped["url"]
            flip_byte(warc_dir / flipped["warc_file"],
                      flipped["warc_offset"] + flipped["warc_length"] // 2)
            cut = warc_dir / truncated["warc_file"]
            os.truncate(cut, truncated["warc_offset"] + truncated["warc_length"] // 2)
            (warc_dir / deleted["warc_file"]).unlink()
            checked = await asyncio.to_thread(crawler_cli, env, "verify")
            assert checked.returncode == 4, checked.stdout + checked.stderr
            assert "Traceback" not in checked.stderr
            lines = checked.stderr.splitlines()
            assert any(flipped["warc_file"] in x and ("corrupt" in x or "digest" in x)
                       for x in lines), lines
            assert any(truncated["warc_file"] in x and "truncated" in x for x in lines), lines
            assert any(deleted["warc_file"] in x and "missing" in x for x in lines), lines
            repaired = await asyncio.to_thread(crawler_cli, env, "verify", "--repair")
            assert repaired.returncode == 0, repaired.stdout + repaired.stderr
            affected = {r["url"] for r in await pool.fetch(
                "SELECT DISTINCT u.url FROM stored_records s JOIN urls u ON u.id = s.url_id "
                "WHERE s.damaged IS NOT NULL")}
            assert {flipped["url"], truncated["url"], deleted["url"]} <= affected
            validators = await pool.fetchval(
                "SELECT count(*) FROM urls WHERE url = ANY($1::text[]) AND etag IS NOT NULL",
                list(affected))
            assert validators == 0, "repaired URLs are fetched without validators"
            again = await asyncio.to_thread(crawler_cli, env, "verify", "--repair")
            assert "marked 0 records" in again.stdout, again.stdout

            # Next fetches of the affected URLs: unconditional, stored as full responses.
            restart = time.monotonic()
            restarted_at = dt.datetime.now(dt.UTC)
            daemon = await RunningDaemon.start(env)
            await poll(lambda: _full_responses_after(pool, affected, restarted_at),
                       "full responses of the repaired URLs", 60)
            output = await daemon.stop()
            assert daemon.proc.returncode == 0, output[-3000:]
        finally:
            await pool.close()
        first = {}
        for r in web.log:
            url = r.origin + r.path
            if r.at > restart and url in affected and url not in first:
                first[url] = r
        assert first and all(not r.conditional for r in first.values()), first
        assert_polite(web.arrivals(), DELAY)
    await assert_index_rows_read_back_unmarked(db_url, warc_dir, restarted_at)


async def _closed_files_at_least(warc_dir: Path, n: int) -> bool:
    return len(list(warc_dir.glob("*" + SUFFIX))) >= n


async def _full_responses_after(
    pool: asyncpg.Pool, urls: set[str], since: dt.datetime
) -> bool:
    n = await pool.fetchval(
        "SELECT count(DISTINCT u.url) FROM stored_records s JOIN urls u ON u.id = s.url_id "
        "WHERE u.url = ANY($1::text[]) AND s.record_type = 'response' AND s.damaged IS NULL "
        "AND s.fetched_at > $2", list(urls), since)
    return int(n) == len(urls)


async def assert_index_rows_read_back_unmarked(
    db_url: str, warc_dir: Path, repaired_at: dt.datetime
) -> None:
    """Every row not marked damaged reads back (the marked ones are known damage), and no
    revisit stored after the repair refers to a damaged record."""
    from crawler.db.collection import index_row
    from crawler.store.verify import check_row

    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch(
            "SELECT s.*, u.url FROM stored_records s JOIN urls u "
            "ON u.id = s.url_id AND u.host_id = s.host_id WHERE s.damaged IS NULL")
        revisits_of_damaged = [dict(x) for x in await conn.fetch(
            "SELECT r.id, r.url_id, r.fetched_at, o.id AS oid, o.fetched_at AS ofa, o.damaged, "
            "o.warc_file FROM stored_records r JOIN stored_records o "
            "ON o.record_id = r.refers_to WHERE o.damaged IS NOT NULL "
            "AND r.fetched_at > $1", repaired_at)]
    finally:
        await conn.close()
    bad = [d.message for d in (check_row(warc_dir, index_row(r)) for r in rows)
           if d is not None]
    assert not bad, bad[:10]
    assert not revisits_of_damaged, \
        f"revisits stored after the repair refer to damage: {revisits_of_damaged}"
