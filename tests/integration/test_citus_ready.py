"""The schema is ready to be distributed on host_id (issue 13, "A schema ready for Citus").

Checked from the live, migrated schema (pg_catalog) and from ``crawler/db/queries.sql``:

- every host-owned table (one that references hosts or urls, or is referenced by a table that
  does) carries host_id (hosts: its key ``id`` is the host_id);
- every primary key and unique index of a host-owned table includes host_id, and every foreign
  key between host-owned tables includes it on both sides;
- every statement that touches a host-owned table constrains host_id (one host, or an explicit
  batch), or is on a short allow-list of fleet-wide statements, each with its reason;
- host_id is the origin's hash, the same in SQL as in Python, and a collision between two
  origins is refused, never merged.

This is not a test on Citus (not installed here): it checks the properties Citus needs.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time

import asyncpg
import pytest

from crawler.core.hostid import HostIdCollision, host_id, url_host_id
from crawler.db import frontier
from crawler.db.queries import CITUS_QUERIES, PLAIN_QUERIES

HOST_OWNED = {
    "hosts": "id",  # the hosts table's own key is the host_id
    "urls": "host_id",
    "observations": "host_id",
    "links": "host_id",
    "stored_records": "host_id",
    "change_events": "host_id",
    "alerts": "host_id",
    "sitemaps": "host_id",
    "url_hints": "host_id",
    "sitemap_urls": "host_id",
    "hint_trust": "host_id",
    "url_hint_state": "host_id",
}
# Small tables every node needs whole (Citus reference tables), or the coordinator alone.
REFERENCE = {"sites", "planner_state", "plans", "daemons", "alembic_version", "webhooks",
             "delivery_lease", "schedule_rules", "warc_files", "watch_rules"}

# Statements that touch host-owned tables without naming their hosts, and why that is right.
FLEET_WIDE = {
    "status_host_list_totals": "crawler status: whole-table counts by design",
    "damaged_records_count": "crawler status: whole-table count by design (partial index)",
    "set_pattern_rule": "crawler watch --pattern: a regular expression over every known URL, "
                        "run by hand",
    "set_pattern_bounds": "crawler bound --pattern: a regular expression over every known "
                          "URL, run by hand",
    "claim_due_work": "picks the next ready hosts fleet-wide by hosts_ready_at_idx; each "
                      "picked host's URLs are then read by host_id (the LATERAL join)",
    "earliest_due": "the idle wake: the smallest ready_at over all hosts, one index entry",
    "release_owner": "shutdown: every lease one daemon holds, by owner (its lease indexes)",
    "status_counts": "crawler status / gauges: whole-table counts by design",
    "urls_by_state": "crawler status: whole-table counts by design",
    "hosts_health": "crawler status: whole-table counts by design",
    "most_overdue_hosts": "crawler status: the hosts due longest fleet-wide, by "
                          "hosts_unpaused_due_idx; their URLs are then read by host_id",
    "paused_host_ids": "gauge sampler and status: the paused hosts (hosts_paused_idx); their "
                       "due URLs are then counted by host_id",
    "hosts_in_backoff": "crawler status: listing",
    "hosts_refused": "crawler status: listing",
    "hosts_paused": "crawler status: listing",
    "hosts_leased_count": "gauge sampler (one per fleet): hosts under a live lease",
    "most_overdue_seconds": "gauge sampler: one entry of hosts_unpaused_due_idx fleet-wide",
    "fetches_since": "planner: fetch rate over the fleet",
    "fleet_host_rates": "planner: the budget counts every host",
    "planner_id_range": "planner sampling: the key range it samples from",
    "planner_sample": "planner sampling: stratified by URL key range, O(sample) rows",
    "reschedule_scan": "planner walk in URL key order, one small chunk per statement; the "
                       "rows found are rescheduled by (id, host_id)",
    "export_urls": "crawler export: reads the whole table by design",
    "export_observations": "crawler export: reads a time range of every host by design",
    "list_urls": "crawler urls: listing (by one host's key when --host is given)",
    "pending_events": "webhook sender (one per fleet): the outbox in id order",
    "mark_event_delivered": "webhook sender: the event by its id",
    "mark_event_failed": "webhook sender: the event by its id",
    "outbox_summary": "webhook gauge: whole-outbox count",
    "changes_page": "crawler changes: the outbox in time order across hosts",
    "webhook_start": "a webhook's start: the newest event id of the whole outbox",
    "replay_events": "crawler changes --replay-to-webhook: a time range of every host",
    "failing_now": "crawler status: listing",
    "sites_summary": "crawler sites: per-site counts over the sites' URLs",
    "claim_due_sitemaps": "the sitemap reader's claim: the next due files fleet-wide by "
                          "sitemaps_next_read_idx, as claim_due_work walks hosts",
    "sitemaps_next_due": "the sitemap reader's idle wake: one entry of sitemaps_next_read_idx",
    "sitemap_host_ids": "crawler sites: the hosts with sitemaps, a listing; their files are "
                        "then read by host_id (host_sitemaps)",
    "estimate_urls": "planned, never run: the planner's row estimate",
    "estimate_urls_in_state": "planned, never run",
    "estimate_urls_due": "planned, never run",
    "estimate_hosts_in_backoff": "planned, never run",
    "estimate_hosts_circuit_open": "planned, never run",
}

_TABLE_REF = re.compile(
    r"\b(?:FROM|JOIN|UPDATE|INTO|USING)\s+(" + "|".join(HOST_OWNED) + r")\b", re.IGNORECASE
)
# host_id compared with something (=, IN, = ANY), or something compared with a host_id.
_HOST_ID_CONDITION = re.compile(
    r"\bhost_id\s*(?:=|\bIN\b)|=\s*(?:\w+\.)?host_id\b", re.IGNORECASE
)
# hosts' own key: id = $n / = ANY(...) / = crawler_host_id(...) / = x.id or x.host_id
_HOSTS_KEY_CONDITION = re.compile(
    r"\b(?:h\.|hosts\.)?id\s*(?:=\s*(?:ANY|\$\d|crawler_host_id|\w+\.(?:host_)?id\b)|IN\s*\()",
    re.IGNORECASE,
)
_INSERT = re.compile(r"\bINSERT\s+INTO\s+(\w+)\s*\(([^)]*)\)", re.IGNORECASE)


def host_owned_tables(sql: str) -> set[str]:
    return {m.lower() for m in _TABLE_REF.findall(sql)}


def unconstrained(sql: str) -> list[str]:
    """Why ``sql`` does not confine itself to named hosts (empty when it does).

    A text check, not a parser: an INSERT must give every row its host key; every other
    reference to a host-owned table (FROM, JOIN, UPDATE, USING) needs a host_id condition in
    the statement (for hosts alone, a condition on its key).
    """
    code = "\n".join(line.split("--", 1)[0] for line in sql.splitlines())
    problems = [
        f"INSERT INTO {table} without {HOST_OWNED[table]}"
        for table, columns in ((t.lower(), c) for t, c in _INSERT.findall(code))
        if table in HOST_OWNED
        and HOST_OWNED[table] not in {c.strip().lower() for c in columns.split(",")}
    ]
    filters = _INSERT.sub("", code)  # an insert's target and column list are no condition
    tables = host_owned_tables(filters)
    if tables - {"hosts"}:
        if not _HOST_ID_CONDITION.search(filters):
            problems.append(f"no host_id condition on {sorted(tables - {'hosts'})}")
    elif tables and not (
        _HOSTS_KEY_CONDITION.search(filters) or _HOST_ID_CONDITION.search(filters)
    ):
        problems.append("no condition on hosts' key")
    return problems


def test_the_statement_check_can_fail() -> None:
    """The checker flags statements that would fan out to every shard."""
    assert unconstrained("UPDATE urls SET importance = 1 WHERE id = $1")
    assert unconstrained("SELECT * FROM observations WHERE url_id = $1")
    assert unconstrained("UPDATE hosts SET paused = true WHERE origin = $1")
    assert unconstrained("INSERT INTO links (from_url_id, to_url_id, position) VALUES (1, 2, 3)")
    assert unconstrained("DELETE FROM urls WHERE url = $1")
    assert not unconstrained("UPDATE urls SET importance = 1 WHERE id = $1 AND host_id = $2")
    assert not unconstrained("UPDATE hosts SET paused = true WHERE id = crawler_host_id($1)")
    assert not unconstrained(
        "SELECT * FROM urls AS u JOIN links AS l ON l.host_id = u.host_id "
        "WHERE u.host_id = ANY($1::bigint[])"
    )


def test_every_statement_on_host_owned_tables_names_its_hosts() -> None:
    offenders = {
        name: problems
        for name, sql in PLAIN_QUERIES.items()
        if name not in FLEET_WIDE and (problems := unconstrained(sql))
    }
    assert offenders == {}
    for name in FLEET_WIDE:  # the allow-list names real statements on host-owned tables
        assert name in PLAIN_QUERIES, name
        assert host_owned_tables(PLAIN_QUERIES[name]), name
    # The hot statements are not on the allow-list.
    hot = {"record_fetches", "recorded_fetches", "release_hosts", "window_rows",
           "window_out_links", "window_in_links", "window_summary", "window_members",
           "delete_out_links_to", "upsert_out_links",
           "seed_hosts_from_staging", "seed_urls_from_staging",
           "upsert_hosts", "insert_urls", "store_robots", "set_host_backoff",
           "refresh_host_due", "reschedule_records", "reschedule_urls", "discover_urls",
           "out_links", "site_graph",
           "site_members", "apply_window", "last_stored_response", "collection_rows"}
    assert hot <= set(PLAIN_QUERIES)
    assert not hot & set(FLEET_WIDE)


async def _catalog(conn: asyncpg.Connection) -> dict[str, list[asyncpg.Record]]:
    tables = await conn.fetch(
        "SELECT c.oid, c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND c.relkind IN ('r', 'p') "
        "AND NOT c.relispartition"
    )
    keys = await conn.fetch(
        "SELECT c.relname AS tbl, i.relname AS idx, i2.indisprimary AS is_primary, "
        "ARRAY(SELECT a.attname FROM unnest(i2.indkey) AS k(n) "
        "      JOIN pg_attribute a ON a.attrelid = c.oid AND a.attnum = k.n)::text[] AS cols "
        "FROM pg_index i2 JOIN pg_class c ON c.oid = i2.indrelid "
        "JOIN pg_class i ON i.oid = i2.indexrelid "
        "JOIN pg_namespace n ON n.oid = c.relnamespace "
        "WHERE n.nspname = current_schema() AND i2.indisunique AND NOT c.relispartition"
    )
    foreign = await conn.fetch(
        "SELECT con.conname, c.relname AS tbl, r.relname AS ref, "
        "ARRAY(SELECT a.attname FROM unnest(con.conkey) AS k(n) "
        "      JOIN pg_attribute a ON a.attrelid = con.conrelid AND a.attnum = k.n)::text[] "
        "  AS cols, "
        "ARRAY(SELECT a.attname FROM unnest(con.confkey) AS k(n) "
        "      JOIN pg_attribute a ON a.attrelid = con.confrelid AND a.attnum = k.n)::text[] "
        "  AS ref_cols "
        "FROM pg_constraint con JOIN pg_class c ON c.oid = con.conrelid "
        "JOIN pg_class r ON r.oid = con.confrelid "
        "WHERE con.contype = 'f' AND con.conparentid = 0 AND NOT c.relispartition"
    )
    columns = await conn.fetch(
        "SELECT table_name AS tbl, column_name AS col FROM information_schema.columns "
        "WHERE table_schema = current_schema()"
    )
    return {"tables": tables, "keys": keys, "foreign": foreign, "columns": columns}


async def test_live_schema_keys_every_host_owned_table_by_host_id(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        cat = await _catalog(conn)
    finally:
        await conn.close()
    tables = {r["relname"] for r in cat["tables"]}
    # Every table is classified: a new table must say whether it is host-owned.
    assert tables == set(HOST_OWNED) | REFERENCE, tables ^ (set(HOST_OWNED) | REFERENCE)
    columns = {(r["tbl"], r["col"]) for r in cat["columns"]}
    for table, key in HOST_OWNED.items():
        assert (table, key) in columns, table
    # A table referencing a host-owned one is host-owned (its rows belong to a host's URLs).
    for fk in cat["foreign"]:
        if fk["ref"] in HOST_OWNED:
            assert fk["tbl"] in HOST_OWNED, fk["conname"]
            assert HOST_OWNED[fk["tbl"]] in fk["cols"], fk["conname"]
            assert HOST_OWNED[fk["ref"]] in fk["ref_cols"], fk["conname"]
            # ...and pairs host_id with host_id: the row and its target are on one host.
            assert fk["ref_cols"][fk["cols"].index(HOST_OWNED[fk["tbl"]])] == HOST_OWNED[
                fk["ref"]], fk["conname"]
        else:
            assert fk["ref"] in REFERENCE, fk["conname"]  # distributed -> reference is fine
    primaries = set()
    for key in cat["keys"]:
        if key["tbl"] in HOST_OWNED:
            assert HOST_OWNED[key["tbl"]] in key["cols"], (key["tbl"], key["idx"], key["cols"])
        if key["is_primary"]:
            primaries.add(key["tbl"])
    assert set(HOST_OWNED) <= primaries
    # The month partitioning of the per-fetch tables stays: their keys hold fetched_at too.
    for key in cat["keys"]:
        if key["tbl"] in ("observations", "stored_records", "change_events"):
            assert "fetched_at" in key["cols"], key["idx"]


async def test_host_id_is_the_origins_hash_in_sql_and_python(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        for origin in ("http://a.example", "https://www.site1.example:8443",
                       "https://xn--bcher-kva.example", "http://[::1]:8080", "http://é.example"):
            assert await conn.fetchval("SELECT crawler_host_id($1)", origin) == host_id(origin)
        for url in ("http://a.example/", "https://b.example:81/x/y?z=http://q/",
                    "http://c.example/p://q"):
            assert await conn.fetchval("SELECT crawler_url_host_id($1)", url) == url_host_id(url)
        # Seeding keys hosts by it.
        await frontier.seed(conn, [("http://seeded.example/a", 1.0)], time.time())
        assert await conn.fetchval(
            "SELECT id FROM hosts WHERE origin = 'http://seeded.example'"
        ) == host_id("http://seeded.example")
    finally:
        await conn.close()
    assert host_id("http://a.example") != host_id("http://b.example")
    assert -(2**63) <= host_id("http://a.example") < 2**63


async def _inject_collision(conn: asyncpg.Connection, origin: str, other: str) -> None:
    """A host of ``other`` holding ``origin``'s key: what a real SHA-256 collision would
    leave (one cannot be produced on purpose)."""
    await conn.execute(
        "INSERT INTO hosts (id, origin, next_due_at) VALUES ($1, $2, now())",
        host_id(origin), other,
    )


async def test_a_colliding_origin_is_refused_not_merged(db_url: str) -> None:
    conn = await asyncpg.connect(db_url)
    try:
        await _inject_collision(conn, "http://victim.example", "http://holder.example")
        now = time.time()
        # A few URLs (the array path) and a bulk batch (COPY and staging).
        for urls in (["http://victim.example/a"],
                     [f"http://victim.example/p{i}" for i in range(500)]
                     + [f"http://fine.example/p{i}" for i in range(500)]):
            with pytest.raises(HostIdCollision) as refused:
                await frontier.seed(conn, [(u, 1.0) for u in urls], now, batch_size=2000)
            assert refused.value.origin == "http://victim.example"
            assert refused.value.existing == "http://holder.example"
            assert "collision" in str(refused.value)
        # Nothing was put under the other origin's host; the batch wrote nothing at all.
        assert await conn.fetchval("SELECT count(*) FROM urls") == 0
        assert await conn.fetchval("SELECT origin FROM hosts WHERE id = $1",
                                   host_id("http://victim.example")) == "http://holder.example"
        assert await conn.fetchval("SELECT count(*) FROM hosts") == 1
        # Other origins still seed.
        result = await frontier.seed(conn, [("http://fine.example/x", 1.0)], now)
        assert result.inserted == 1
    finally:
        await conn.close()


def test_seed_command_reports_a_collision(db_url: str) -> None:
    async def inject() -> None:
        conn = await asyncpg.connect(db_url)
        try:
            await _inject_collision(conn, "http://victim.example", "http://holder.example")
        finally:
            await conn.close()

    import asyncio

    asyncio.run(inject())
    env = {**os.environ, "CRAWLER_DATABASE_URL": db_url}
    done = subprocess.run(
        [sys.executable, "-m", "crawler", "seed", "http://victim.example/a"], env=env,
        capture_output=True, text=True, timeout=60,
    )
    assert done.returncode != 0
    assert "host_id collision" in done.stderr, done.stderr
    assert "http://holder.example" in done.stderr


def test_two_origins_of_one_batch_with_one_key_are_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(frontier, "_host_key", lambda origin: 7)
    with pytest.raises(HostIdCollision):
        frontier.seed_rows(["http://a.example/", "http://b.example/"], {
            "http://a.example/": 1.0, "http://b.example/": 1.0})


# The lock helpers of migration 0014 (called by the Citus variants) that are fleet-wide, and why.
FLEET_WIDE_FUNCTIONS = {
    "crawler_sample_strata": "planner sampling: one URL key range per statement, like "
                             "planner_sample",
}


def _row_lock_functions() -> dict[str, str]:
    """The helper functions' SQL, by name, as migration 0014 creates them."""
    import importlib.util
    from pathlib import Path

    path = Path(__file__).parents[2] / "migrations" / "versions" / "0014_citus_row_locks.py"
    spec = importlib.util.spec_from_file_location("citus_row_locks", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return {signature.split("(")[0]: sql for signature, sql in module.FUNCTIONS.items()}


def test_citus_variants_and_their_helpers_name_their_hosts() -> None:
    """The same check over crawler/db/queries_citus.sql and the functions it calls: a variant
    replaces a statement (same name, so the same place on the allow-list), and each helper
    locks one host (or URL of one host) per statement."""
    assert set(CITUS_QUERIES) <= set(PLAIN_QUERIES)
    offenders = {
        name: problems
        for name, sql in CITUS_QUERIES.items()
        if name not in FLEET_WIDE and (problems := unconstrained(sql))
    }
    assert offenders == {}
    functions = _row_lock_functions()
    assert functions.keys() >= FLEET_WIDE_FUNCTIONS.keys()
    offenders = {
        name: problems
        for name, sql in functions.items()
        if name not in FLEET_WIDE_FUNCTIONS and (problems := unconstrained(sql))
    }
    assert offenders == {}
    # Every helper is called by a variant, and only there.
    for name in functions:
        assert any(name in sql for sql in CITUS_QUERIES.values()), name
        assert not any(name in sql for sql in PLAIN_QUERIES.values()), name
