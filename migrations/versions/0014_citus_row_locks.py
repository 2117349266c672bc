"""Row locks one host at a time, for the statements Citus runs (crawler/db/queries_citus.sql).

Citus refuses ``FOR UPDATE`` (and ``SKIP LOCKED``) in a statement over several shards, and a
``LATERAL ... LIMIT`` whose outer side is not a distributed table; it accepts both in a
statement confined to one host (one shard). These functions take the row locks of the frontier's
statements one host (or URL) at a time, each lock a one-shard statement, in the order the
plain statements lock in, and return what they locked; the Citus variants of those statements
then write the locked rows in one multi-shard statement, in the same transaction. So the
variants keep the plain statements' guarantees (fenced by lease token, lock order by id, the
planner and claims never waiting on a locked row) at the cost of one statement per host inside
the database. ``crawler_due_urls`` reads each leased host's due URLs for the claim, and
``crawler_sample_strata`` each stratum of the planner's sample (pushed down to every shard,
``ORDER BY id LIMIT n``), by a statement of their own. Their row estimates are a batch's
(``ROWS``), so that the plans probe the keys they return.

Plain PostgreSQL does not call them (its statements are unchanged); the functions are made
here so that a database distributed later has them, and so that the tests can run the
variants on plain PostgreSQL.

Revision ID: 0014_citus_row_locks
Revises: 0013_out_links_read
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0014_citus_row_locks"
down_revision = "0013_out_links_read"
branch_labels = None
depends_on = None

FUNCTIONS = {
    # record_fetches, release_hosts, store_robots: lock each host whose lease token
    # (owner, epoch) is current and unexpired, in host id order (two daemons' batches never
    # deadlock), waiting for a lock held; the ids locked.
    "crawler_lock_leases(bigint[], text[], bigint[])": """
CREATE OR REPLACE FUNCTION crawler_lock_leases(host_ids bigint[], owners text[],
                                               epochs bigint[])
RETURNS SETOF bigint LANGUAGE plpgsql ROWS 10 AS $$
DECLARE
    item record;
    locked bigint;
BEGIN
    FOR item IN
        SELECT * FROM unnest(host_ids, owners, epochs) AS i(host_id, lease_owner, lease_epoch)
        ORDER BY host_id
    LOOP
        SELECT id INTO locked FROM hosts
        WHERE id = item.host_id AND lease_epoch = item.lease_epoch
          AND lease_owner IS NOT DISTINCT FROM item.lease_owner AND lease_expires_at > now()
        FOR UPDATE;
        IF FOUND THEN
            RETURN NEXT locked;
        END IF;
    END LOOP;
END
$$
""",
    # claim_due_work: of the candidates (in ready_at order), lock up to ``wanted`` hosts still
    # ready, skipping any another transaction holds (a claim never waits).
    "crawler_lock_ready_hosts(bigint[], bigint)": """
CREATE OR REPLACE FUNCTION crawler_lock_ready_hosts(candidates bigint[], wanted bigint)
RETURNS SETOF bigint LANGUAGE plpgsql ROWS 10 AS $$
DECLARE
    item record;
    locked bigint;
    taken bigint := 0;
BEGIN
    FOR item IN SELECT t.id FROM unnest(candidates) WITH ORDINALITY AS t(id, n) ORDER BY t.n
    LOOP
        EXIT WHEN taken >= wanted;
        SELECT id INTO locked FROM hosts
        WHERE id = item.id AND ready_at <= now()
        FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            taken := taken + 1;
            RETURN NEXT locked;
        END IF;
    END LOOP;
END
$$
""",
    # claim_due_work: up to ``per_host`` due URLs of each host, earliest first
    # (urls_host_next_fetch_idx), one statement per host: Citus refuses the LATERAL ... LIMIT
    # off the leased hosts, and a LATERAL off the hosts table runs on every shard.
    "crawler_due_urls(bigint[], bigint)": """
CREATE OR REPLACE FUNCTION crawler_due_urls(host_ids bigint[], per_host bigint)
RETURNS SETOF urls LANGUAGE plpgsql ROWS 100 AS $$
DECLARE
    item record;
BEGIN
    FOR item IN SELECT DISTINCT t.id FROM unnest(host_ids) AS t(id) ORDER BY t.id LOOP
        RETURN QUERY
        SELECT * FROM urls
        WHERE host_id = item.id AND next_fetch_at <= now()
        ORDER BY next_fetch_at
        LIMIT per_host;
    END LOOP;
END
$$
""",
    # refresh_host_due: lock the hosts no one holds locked, in id order, skipping the others
    # (the planner never waits for the fetch loop).
    "crawler_lock_free_hosts(bigint[])": """
CREATE OR REPLACE FUNCTION crawler_lock_free_hosts(host_ids bigint[])
RETURNS SETOF bigint LANGUAGE plpgsql ROWS 10 AS $$
DECLARE
    item record;
    locked bigint;
BEGIN
    FOR item IN SELECT DISTINCT t.id FROM unnest(host_ids) AS t(id) ORDER BY t.id LOOP
        SELECT id INTO locked FROM hosts WHERE id = item.id FOR UPDATE SKIP LOCKED;
        IF FOUND THEN
            RETURN NEXT locked;
        END IF;
    END LOOP;
END
$$
""",
    # seed_urls_from_staging: lock, in id order and waiting, the hosts due later than ``due``
    # (two seeders moving the same hosts wait for each other instead of deadlocking).
    "crawler_lock_hosts_due_after(bigint[], timestamptz)": """
CREATE OR REPLACE FUNCTION crawler_lock_hosts_due_after(host_ids bigint[], due timestamptz)
RETURNS SETOF bigint LANGUAGE plpgsql ROWS 10 AS $$
DECLARE
    item record;
    locked bigint;
BEGIN
    FOR item IN SELECT DISTINCT t.id FROM unnest(host_ids) AS t(id) ORDER BY t.id LOOP
        SELECT id INTO locked FROM hosts
        WHERE id = item.id AND (next_due_at IS NULL OR next_due_at > due)
        FOR NO KEY UPDATE;
        IF FOUND THEN
            RETURN NEXT locked;
        END IF;
    END LOOP;
END
$$
""",
    # reschedule_urls: lock, in id order, the URLs not fetched since the planner read them
    # (their last_fetched_at unchanged) whose host is not leased, skipping locked ones.
    "crawler_lock_free_urls(bigint[], bigint[], timestamptz[])": """
CREATE OR REPLACE FUNCTION crawler_lock_free_urls(url_ids bigint[], host_ids bigint[],
                                                  last_fetched timestamptz[])
RETURNS TABLE (id bigint, host_id bigint) LANGUAGE plpgsql ROWS 10 AS $$
DECLARE
    item record;
BEGIN
    FOR item IN
        SELECT * FROM unnest(url_ids, host_ids, last_fetched) AS t(url_id, host, fetched)
        ORDER BY url_id
    LOOP
        RETURN QUERY
        SELECT u.id, u.host_id FROM urls AS u
        WHERE u.id = item.url_id AND u.host_id = item.host
          AND u.last_fetched_at = item.fetched
          AND NOT EXISTS (
              SELECT 1 FROM hosts AS h WHERE h.id = item.host AND h.lease_expires_at > now()
          )
        FOR UPDATE OF u SKIP LOCKED;
    END LOOP;
END
$$
""",
    # planner_sample: from each stratum's start read up to ``per_stratum`` live URLs upward,
    # stopping at its end, with their host's Crawl-delay; one statement per stratum (on Citus,
    # each one's ORDER BY id LIMIT runs on every shard, and the coordinator merges them).
    "crawler_sample_strata(bigint[], bigint[], bigint)": """
CREATE OR REPLACE FUNCTION crawler_sample_strata(starts bigint[], ends bigint[],
                                                 per_stratum bigint)
RETURNS TABLE (stratum bigint, id bigint, host_id bigint, importance float8,
               change_rate_per_day float8, changed_intervals_days float8[],
               unchanged_days float8, intervals_observed integer,
               crawl_delay_seconds float8)
LANGUAGE plpgsql ROWS 1000 AS $$
DECLARE
    s record;
BEGIN
    FOR s IN
        SELECT * FROM unnest(starts, ends) WITH ORDINALITY AS t(start_id, end_id, n)
    LOOP
        RETURN QUERY
        SELECT s.n, u.id, u.host_id, u.importance, u.change_rate_per_day,
               u.changed_intervals_days, u.unchanged_days, u.intervals_observed,
               h.crawl_delay_seconds
        FROM urls AS u JOIN hosts AS h ON h.id = u.host_id
        WHERE u.id >= s.start_id AND u.id < s.end_id
          AND u.state IN ('new', 'active', 'error')
          AND (u.site_id IS NULL OR u.in_window)
        ORDER BY u.id
        LIMIT per_stratum;
    END LOOP;
END
$$
""",
}


def upgrade() -> None:
    for sql in FUNCTIONS.values():
        op.execute(sql)


def downgrade() -> None:
    for signature in FUNCTIONS:
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
