"""Invariants any scenario can check: of the frontier once its daemons have stopped, and of
the plan while they run."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Sequence
from pathlib import Path

import asyncpg

from crawler.daemon.follow import PLAN_POLL_SECONDS

# A URL "has a next fetch time" when its next_fetch_at is a finite timestamp. The one
# exception is by design: a window page outside its window that is not gone is parked
# ('infinity') until the window takes it in again (crawler.db.windows), which makes it due.
UNSCHEDULED = """
SELECT u.url, u.state, u.next_fetch_at::text AS next_fetch_at, u.site_id, u.in_window
FROM urls AS u
WHERE NOT isfinite(u.next_fetch_at)
  AND NOT (u.next_fetch_at = 'infinity' AND u.site_id IS NOT NULL AND NOT u.in_window
           AND u.state <> 'gone')
ORDER BY u.url
"""

# A host not leased is due no later than its earliest scheduled URL: otherwise no daemon
# claims it when that URL comes due, and the URL's time is a time in name only.
HOSTS_DUE_LATE = """
SELECT h.origin, h.next_due_at::text AS next_due_at, min(u.next_fetch_at)::text AS earliest
FROM hosts AS h JOIN urls AS u ON u.host_id = h.id
WHERE isfinite(u.next_fetch_at) AND h.lease_owner IS NULL
GROUP BY h.id, h.origin, h.next_due_at
HAVING h.next_due_at IS NULL OR h.next_due_at > min(u.next_fetch_at)
ORDER BY h.origin
"""


async def unscheduled_urls(db_url: str) -> list[dict[str, object]]:
    """The URLs that are not removed yet have no next fetch time (none is the answer)."""
    conn = await asyncpg.connect(db_url)
    try:
        return [dict(r) for r in await conn.fetch(UNSCHEDULED)]
    finally:
        await conn.close()


async def hosts_due_after_their_urls(db_url: str) -> list[dict[str, object]]:
    """Hosts given back whose due time is later than their earliest URL's (none is the
    answer once the daemons have stopped)."""
    conn = await asyncpg.connect(db_url)
    try:
        return [dict(r) for r in await conn.fetch(HOSTS_DUE_LATE)]
    finally:
        await conn.close()


async def assert_every_url_scheduled(db_url: str) -> None:
    """Every URL that was not removed has a next fetch time (a window page parked outside
    its window excepted), and every host is due by its earliest URL's time."""
    unscheduled = await unscheduled_urls(db_url)
    assert not unscheduled, f"URLs with no next fetch time: {unscheduled}"
    late = await hosts_due_after_their_urls(db_url)
    assert not late, f"hosts due later than their earliest URL: {late}"


LIVE_SECONDS = 30.0


def pid_gone(pid: int) -> bool:
    """Process ``pid`` of this machine has exited (no such process, or a zombie)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat.rpartition(")")[2].split()[:1] == ["Z"]


def process_gone(owner: str) -> bool:
    """A daemon row's process (``host:pid:nonce``, crawler.daemon.run.owner_id) is known to
    have exited: it ran on this machine and its pid is gone or a zombie. Its row stays
    "live" until its heartbeat is old, but a killed process applies no plan."""
    host, _, rest = owner.partition(":")
    pid = rest.partition(":")[0]
    return host == socket.gethostname() and pid.isdigit() and pid_gone(int(pid))


async def assert_every_process_applies_the_newest_plan(
    pool: asyncpg.Pool | asyncpg.Connection,
    expected_processes: int | None = None,
    deadline_seconds: float = 15.0,
) -> None:
    """Every live fetch process applies the plan that was newest when the check began, or a
    later one (within a few polls: a plan stored a moment ago is adopted at each process's
    next poll). The target is fixed at the start because a planner solving every second
    stores plans faster than processes poll, so "equal to the newest right now" can lag by
    one forever without any process being wrong. A process of this machine that has exited
    (killed, its row not yet stale) is not a live one."""
    deadline = time.monotonic() + max(deadline_seconds, 3.0 * PLAN_POLL_SECONDS)
    newest = await pool.fetchval("SELECT max(version) FROM plans")
    while True:
        if newest is None:
            newest = await pool.fetchval("SELECT max(version) FROM plans")
        rows = [r for r in await pool.fetch(
            "SELECT owner, plan_version FROM daemons "
            "WHERE heartbeat_at > now() - make_interval(secs => $1)", LIVE_SECONDS,
        ) if not process_gone(r["owner"])]
        behind = [dict(r) for r in rows
                  if r["plan_version"] is None or newest is None or r["plan_version"] < newest]
        enough = expected_processes is None or len(rows) == expected_processes
        if newest is not None and not behind and enough:
            return
        if time.monotonic() > deadline:
            raise AssertionError(
                f"plan {newest}: processes behind {behind} of {len(rows)} live"
                f" (expected {expected_processes})"
            )
        await asyncio.sleep(0.2)


def assert_polite(
    server_log: Sequence[tuple[str, float]], delay: float, slack: float = 0.005
) -> None:
    """No host (origin) received two requests closer than ``delay`` seconds: ``server_log``
    holds (origin, arrival on the monotonic clock) for every request the server saw."""
    last: dict[str, float] = {}
    close: list[tuple[str, float]] = []
    for origin, at in sorted(server_log, key=lambda entry: entry[1]):
        if origin in last and at - last[origin] < delay - slack:
            close.append((origin, round(at - last[origin], 4)))
        last[origin] = at
    assert not close, f"requests closer than {delay} s to one host: {close[:20]}"


async def assert_index_rows_read_back(
    db_url: str,
    warc_dir: Path | None = None,
    *,
    elsewhere: Path | None = None,
    ends: dict[str, int] | None = None,
) -> int:
    """Every index row reads back a record whose payload digest (and record id) matches its
    row; how many rows were checked. A row's file is looked for in ``warc_dir``, then in
    ``elsewhere`` (a directory moved away under the daemon), where ``ends`` bounds what it may
    point to: the size of each file when it was moved (a record written after is in no one's
    directory).

    Without ``warc_dir``, each file is looked for where its ``warc_files`` row says the daemon
    that wrote it kept it (migration 0031): a file the index names with no such row, or
    whose directory is gone, does not read back. A file another machine wrote is that
    machine's to check, unless its directory is visible here too."""
    from crawler.db.collection import index_row
    from crawler.store.verify import check_row

    conn = await asyncpg.connect(db_url)
    try:
        rows = await conn.fetch(
            "SELECT s.*, u.url FROM stored_records s JOIN urls u "
            "ON u.id = s.url_id AND u.host_id = s.host_id ORDER BY s.id")
        homes = {} if warc_dir is not None or not rows else {
            r["name"]: (r["machine"], r["directory"])
            for r in await conn.fetch("SELECT name, machine, directory FROM warc_files")}
    finally:
        await conn.close()
    bad: list[str] = []
    checked = 0
    for row in rows:
        name = row["warc_file"]
        if warc_dir is None:
            home = homes.get(name)
            if home is None:
                bad.append(f"{name}:{row['warc_offset']}: no warc_files row says where "
                           f"{name} is (index row of {row['url']})")
                continue
            machine, directory = home
            root = Path(directory)
            if not directory or not root.is_dir():
                if machine != socket.gethostname():
                    continue
                bad.append(f"{name}:{row['warc_offset']}: its directory {directory!r} "
                           f"(warc_files) does not exist")
                continue
        else:
            root = warc_dir
            if not _present(warc_dir, name) and elsewhere is not None and _present(
                    elsewhere, name):
                root = elsewhere
                end = (ends or {}).get(name)
                if end is not None and row["warc_offset"] + row["warc_length"] > end:
                    bad.append(f"{name}:{row['warc_offset']} was written after its directory "
                               f"was moved away (the file had {end} bytes)")
                    continue
        checked += 1
        damage = check_row(root, index_row(row))
        if damage is not None:
            bad.append(damage.message)
    assert not bad, f"{len(bad)} of {len(rows)} index rows do not read back: {bad[:10]}"
    return checked


def _present(root: Path, name: str) -> bool:
    return (root / name).exists() or (root / (name + ".open")).exists()
