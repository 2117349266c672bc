-- Every statement the frontier runs, each under a "-- name: <key>" header.
-- Parsed once by crawler/db/queries.py; the db layer says QUERIES["upsert_hosts"], or, for a
-- statement with a Citus variant (queries_citus.sql), queries.fetch(conn, "claim_due_work").
-- Statements take arrays (unnest) where they act on many rows: one round trip per batch.

-- name: upsert_hosts
-- Register origins under their host_id ($1, crawler.core.hostid); a host's next_due_at only
-- ever moves earlier here. A key already held by another origin (a hash collision) is left
-- alone and not returned: the caller refuses it.
INSERT INTO hosts (id, origin, next_due_at)
SELECT id, origin, due
FROM unnest($1::bigint[], $2::text[], $3::timestamptz[]) AS t(id, origin, due)
ON CONFLICT (id) DO UPDATE
    SET next_due_at = LEAST(hosts.next_due_at, EXCLUDED.next_due_at)
    WHERE hosts.origin = EXCLUDED.origin
RETURNING id, origin;

-- name: insert_urls
-- Seed URLs; a URL already known keeps its state and schedule.
INSERT INTO urls (url, host_id, importance, next_fetch_at)
SELECT url, host_id, importance, due
FROM unnest($1::text[], $2::bigint[], $3::float8[], $4::timestamptz[])
    AS t(url, host_id, importance, due)
ON CONFLICT (url, host_id) DO NOTHING
RETURNING id;

-- name: seed_staging
-- Bulk seeding: rows arrive by COPY into this session's staging tables, emptied at commit:
-- the URLs with their host_id (computed by the seeder from the origin, crawler.core.hostid),
-- and the batch's distinct hosts.
CREATE TEMPORARY TABLE IF NOT EXISTS seed_staging (
    url text NOT NULL,
    host_id bigint NOT NULL,
    importance float8 NOT NULL
) ON COMMIT DELETE ROWS;
CREATE TEMPORARY TABLE IF NOT EXISTS seed_staging_hosts (
    host_id bigint NOT NULL,
    origin text NOT NULL
) ON COMMIT DELETE ROWS;

-- name: seed_hosts_from_staging
-- New hosts of the staged URLs, due at $1 (known hosts are not rewritten), in one insert.
-- One probe of hosts_pkey per staged host finds the known ones: they are skipped (an insert
-- that conflicts costs twice the probe), and one whose origin differs is returned (a hash
-- collision: the caller refuses the batch, so no URL is ever put under another origin's
-- host). The known hosts are locked FOR KEY SHARE, in id order, until the batch commits: the
-- lock urls_host_id_fkey's check would take for each of their URLs, taken once per host, so
-- that no host can be deleted under the URLs about to be inserted even when that check is
-- skipped (skip_redundant_checks). ON CONFLICT stays for a host another session adds
-- meanwhile; keys go in sorted order so that two seeders wait on each other's new hosts in
-- one order.
WITH known AS (
    SELECT h.id, h.origin
    FROM hosts AS h
    WHERE h.id IN (SELECT host_id FROM seed_staging_hosts)
    ORDER BY h.id
    FOR KEY SHARE
),
staged AS (
    SELECT s.host_id, s.origin, k.origin AS existing
    FROM seed_staging_hosts AS s
    LEFT JOIN known AS k ON k.id = s.host_id
),
inserted AS (
    INSERT INTO hosts (id, origin, next_due_at)
    SELECT host_id, origin, $1::timestamptz
    FROM staged
    WHERE existing IS NULL
    ORDER BY host_id
    ON CONFLICT (id) DO NOTHING
)
SELECT host_id, origin, existing FROM staged WHERE existing <> origin;

-- name: skip_redundant_checks
-- For the rest of the transaction, row-level triggers do not fire (session_replication_role
-- = replica, the way pg_restore --disable-triggers loads data), when the role may set that:
-- a superuser, or one granted SET ON PARAMETER session_replication_role. The schema has no
-- triggers but its foreign keys' checks, and a caller runs this only before a statement whose
-- every key is already held: a seed batch's URLs reference hosts the batch has just inserted
-- or locked FOR KEY SHARE (seed_hosts_from_staging) and no site. Those checks would cost a
-- lookup and lock of the host per URL, plus one queued trigger per URL for the NULL site,
-- each checking what the batch already holds. Without the privilege it does nothing and the
-- checks run. Returns whether they are skipped. PostgreSQL 15 and later only
-- (has_parameter_privilege): frontier._seed_batch does not run it on an older server.
-- The only other triggers, crawler_schedule_rules_for_new_urls and _watch_ (migration 0032),
-- are ENABLE ALWAYS: they fire in replica mode too, each only while its rules exist.
SELECT coalesce((
    SELECT set_config('session_replication_role', 'replica', true) = 'replica'
    WHERE current_setting('is_superuser')::boolean
       OR has_parameter_privilege('session_replication_role', 'SET')
), false) AS skipped;

-- name: seed_urls_from_staging
-- The staged URLs not yet known, due at $1, in one insert; a known host that gained a URL has
-- its next_due_at moved earlier. Returns how many URLs were new.
WITH inserted AS (
    INSERT INTO urls (url, host_id, importance, next_fetch_at)
    SELECT url, host_id, importance, $1::timestamptz
    FROM seed_staging
    -- In key order: urls_host_id_url_key, urls_host_next_fetch_idx and the foreign key's
    -- probes of hosts_pkey all sweep their indexes once, in step (hash keys in any other order
    -- would land at random pages); and two seeders that stage the same URLs wait on each other
    -- in one order.
    ORDER BY host_id, url
    ON CONFLICT (url, host_id) DO NOTHING
    RETURNING host_id
),
to_move AS (
    -- Locked in id order: two seeders moving the same hosts wait instead of deadlocking.
    SELECT id FROM hosts
    WHERE id = ANY(ARRAY(SELECT DISTINCT host_id FROM inserted))
      AND (next_due_at IS NULL OR next_due_at > $1::timestamptz)
    ORDER BY id
    FOR NO KEY UPDATE
),
moved AS (
    UPDATE hosts
    SET next_due_at = $1::timestamptz
    WHERE id IN (SELECT id FROM to_move)
)
SELECT count(*) FROM inserted;

-- name: claim_due_work
-- Lease up to $1 ready hosts: hosts_ready_at_idx walked in order, stopping after $1 entries.
-- hosts.ready_at (a generated column, migration 0009_readiness) is already the latest of the
-- host's due work, politeness clock, backoff and live lease, and NULL when it is paused, so no
-- leased, backed-off or waiting host is stepped over on the heap. Then read up to $3 of each
-- host's due URLs, earliest first (urls_host_next_fetch_idx). A host is the unit of work:
-- while one daemon holds it no other daemon sends it a request (its ready_at moves to the
-- lease's expiry) nor writes its URLs (every write is fenced by the host's lease), so the URLs
-- themselves are not leased, and not written: a claim writes one row per host, whatever the
-- batch of URLs. Returns one row per due URL, and one row with
-- NULL url_id for a leased host whose due URLs are gone, so that it is released and its
-- ready_at recomputed.
-- $2 owner, $4 lease seconds. Each claim increments the host's fencing epoch: the lease token
-- is (owner, epoch), and the lease's remaining seconds are measured by the database's now() so
-- that the daemon times its lease by the database's clock alone.
-- Times come as POSIX seconds (date_part, float8: bit for bit what datetime.timestamp() gives
-- for the same microseconds), ±Infinity for ±infinity: a timestamptz costs the client five
-- times a float8 to decode, and every claimed row carries several.
WITH ready_hosts AS (
    SELECT id
    FROM hosts
    WHERE ready_at <= now()
    ORDER BY ready_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
leased_hosts AS (
    UPDATE hosts AS h
    SET lease_owner = $2,
        lease_expires_at = now() + make_interval(secs => $4),
        lease_epoch = h.lease_epoch + 1
    FROM ready_hosts AS r
    WHERE h.id = r.id
    RETURNING h.id, h.origin, h.crawl_delay_seconds, h.lease_expires_at, h.lease_epoch,
              h.consecutive_failures AS host_failures, h.backoff_until, h.robots_body,
              h.robots_status, h.robots_fetched_at, h.robots_good_at, h.robots_expires_at,
              h.robots_unreachable_since
)
SELECT lh.id AS host_id, lh.origin, lh.crawl_delay_seconds,
       date_part('epoch', lh.lease_expires_at - now()) AS lease_seconds, lh.lease_epoch,
       lh.host_failures, date_part('epoch', lh.backoff_until) AS backoff_until,
       -- The robots.txt body (up to 500 KiB) on each host's first row only, not once per
       -- URL: the client reads it from that row (crawler.db.frontier.claim).
       CASE WHEN row_number() OVER (PARTITION BY lh.id ORDER BY lu.next_fetch_at, lu.id) = 1
            THEN lh.robots_body END AS robots_body,
       lh.robots_status, date_part('epoch', lh.robots_fetched_at) AS robots_fetched_at,
       date_part('epoch', lh.robots_good_at) AS robots_good_at,
       date_part('epoch', lh.robots_expires_at) AS robots_expires_at,
       date_part('epoch', lh.robots_unreachable_since) AS robots_unreachable_since,
       lu.id AS url_id, lu.url, lu.state, lu.importance,
       date_part('epoch', lu.last_fetched_at) AS last_fetched_at, lu.last_status,
       lu.last_simhash, lu.last_content_hash, lu.etag,
       date_part('epoch', lu.last_modified) AS last_modified,
       lu.fetch_count, lu.change_count, lu.consecutive_failures, lu.changed_intervals_days,
       lu.unchanged_days, lu.intervals_observed, lu.change_rate_per_day,
       lu.change_brackets_days, lu.update_period_days, lu.update_phase_days,
       lu.update_jitter_days, lu.site_id, lu.depth, lu.lm_fetches, lu.lm_changes,
       lu.lm_observed_days, lu.lm_evidence_days, lu.watch_css, lu.ignore_css,
       lu.fingerprint_region, lu.out_links_read, lu.watch_exact, lu.last_text_hash,
       lu.own_min_interval_seconds, lu.own_max_interval_seconds, lu.fetch_windows,
       s.watch_css AS site_watch_css, s.ignore_css AS site_ignore_css,
       s.watch_exact AS site_watch_exact,
       -- Whether the URL has change hints (its fetch then tests them,
       -- crawler.db.hints): one probe of url_hint_state's key per URL, so that recording a
       -- batch of fetches of URLs without hints costs nothing more.
       EXISTS (SELECT 1 FROM url_hint_state AS hs
               WHERE hs.host_id = lu.host_id AND hs.url_id = lu.id) AS hinted
FROM leased_hosts AS lh
LEFT JOIN LATERAL (
    SELECT *
    FROM urls
    WHERE host_id = lh.id AND next_fetch_at <= now()
    ORDER BY next_fetch_at
    LIMIT $3
) AS lu ON true
LEFT JOIN sites AS s ON s.id = lu.site_id
ORDER BY lh.id, lu.next_fetch_at, lu.id;

-- name: record_fetches
-- Many fetches of many hosts in one statement (hence one transaction, one round trip): what
-- a fetch writes, for each item whose lease still holds. $1 is one fetch_record per fetch
-- (migration 0011_fetch_record), built by crawler.db.frontier.record_row: the lease token
-- (host, owner, epoch), the observation, the URL's row after the fetch and the host's clocks.
-- Fenced per item: a host row is locked (in host id order, so that two daemons' batches
-- never deadlock on each other) only if its token is current and unexpired by the database's
-- clock, and stays locked until commit; an item whose lease is gone writes nothing and is absent
-- from the result. One row per item written: its url_id, and whether its observation is new
-- (unique on (url_id, fetched_at): a batch retried after a lost acknowledgement changes
-- nothing). At most one item per host. An item with ``release`` set is the host's last fetch
-- of the lease: the host is given back in the same update (as release_hosts would).
-- Each host is probed by primary key, one item after the other in host id order (the LATERAL
-- with LIMIT keeps the planner from turning the probes into a scan of hosts or of
-- hosts_lease_owner_idx, whatever the cached generic plan estimates), and locked as it is
-- found; the items whose host was found and locked are the ones written (``held``), in the
-- same pass. Owners are compared with IS NOT DISTINCT FROM (never NULL here, so the same as =).
WITH item AS MATERIALIZED (
    SELECT i.*,
           -- Times come as microseconds (migration 0020_fetch_record_micros).
           crawler_micros_time(i.fetched_at_us) AS fetched_at,
           crawler_micros_time(i.obs_last_modified_us) AS obs_last_modified,
           crawler_micros_time(i.next_fetch_at_us) AS next_fetch_at,
           crawler_micros_time(i.last_fetched_at_us) AS last_fetched_at,
           crawler_micros_time(i.last_modified_us) AS last_modified,
           crawler_micros_time(i.next_request_at_us) AS next_request_at,
           crawler_micros_time(i.backoff_until_us) AS backoff_until
    FROM unnest($1::fetch_record[]) AS i ORDER BY host_id
),
held AS MATERIALIZED (
    SELECT i.*
    FROM item AS i
    CROSS JOIN LATERAL (
        SELECT 1 FROM hosts
        WHERE id = i.host_id AND lease_epoch = i.lease_epoch
          AND lease_owner IS NOT DISTINCT FROM i.lease_owner AND lease_expires_at > now()
        LIMIT 1
        FOR UPDATE
    ) AS h
),
url AS (
    UPDATE urls AS u
    SET state = n.state,
        next_fetch_at = n.next_fetch_at,
        last_fetched_at = n.last_fetched_at,
        last_attempt_at = n.fetched_at,
        last_outcome = n.outcome,
        last_status = n.last_status,
        last_simhash = n.last_simhash,
        last_content_hash = n.last_content_hash,
        fingerprint_region = n.fingerprint_region,
        etag = n.etag,
        last_modified = n.last_modified,
        fetch_count = n.fetch_count,
        change_count = n.change_count,
        consecutive_failures = n.consecutive_failures,
        changed_intervals_days = coalesce(n.changed_intervals_days, '{}'),  -- NULL: empty (record_row)
        unchanged_days = n.unchanged_days,
        intervals_observed = n.intervals_observed,
        change_rate_per_day = n.change_rate_per_day,
        fetch_rate_per_day = n.fetch_rate_per_day,
        redirect_to = n.redirect_to,
        change_brackets_days = coalesce(n.change_brackets_days, '{}'),  -- NULL: empty (record_row)
        update_period_days = n.update_period_days,
        update_phase_days = n.update_phase_days,
        update_jitter_days = n.update_jitter_days,
        lm_fetches = n.lm_fetches,
        lm_changes = n.lm_changes,
        lm_observed_days = n.lm_observed_days,
        lm_evidence_days = coalesce(n.lm_evidence_days, '{}'),  -- NULL: empty (record_row)
        out_links_read = n.out_links_read,
        last_text_hash = n.last_text_hash
    FROM held AS n
    WHERE u.id = n.url_id AND u.host_id = n.host_id
    RETURNING u.id
),
observation AS (
    INSERT INTO observations (
        url_id, host_id, fetched_at, outcome, status, bytes, duration_seconds, simhash,
        content_hash, simhash_distance, changed, content_changed, last_modified, error_kind,
        truncated
    )
    -- Only for a URL row the update above found and locked (no foreign key checks it):
    -- a URL removed meanwhile gets no observation.
    SELECT n.url_id, n.host_id, n.fetched_at, n.outcome, n.status, n.bytes,
           n.duration_seconds, n.simhash, n.content_hash, n.simhash_distance, n.changed,
           n.content_changed, n.obs_last_modified, n.error_kind, n.truncated
    FROM held AS n
    JOIN url ON url.id = n.url_id
    ON CONFLICT (url_id, fetched_at, host_id) DO NOTHING
    RETURNING url_id
),
host AS (
    UPDATE hosts AS h
    SET next_request_at = n.next_request_at,
        consecutive_failures = n.host_failures,
        backoff_until = n.backoff_until,
        lease_owner = CASE WHEN n.release THEN NULL ELSE h.lease_owner END,
        lease_expires_at = CASE WHEN n.release THEN NULL ELSE h.lease_expires_at END,
        -- Released: the earliest due time among its URLs, this one at its new time (the
        -- statement's snapshot still holds its old row).
        next_due_at = CASE WHEN n.release THEN LEAST(n.next_fetch_at, (
            SELECT min(next_fetch_at) FROM urls
            WHERE host_id = h.id AND id <> n.url_id
        )) ELSE h.next_due_at END
    FROM held AS n
    WHERE h.id = n.host_id
)
-- A join, hashed (a batch's hundreds of items), not `IN (SELECT ...)`: with the few rows a
-- generic plan expects of unnest, that subplan would scan every observation once per item.
SELECT n.url_id, o.url_id IS NOT NULL AS written
FROM held AS n
LEFT JOIN observation AS o ON o.url_id = n.url_id;

-- name: release_hosts
-- Give hosts back in one statement: for each (host, owner, epoch) of $1, $2, $3 whose lease
-- still holds, drop the lease and recompute its earliest due time (and so its ready_at), its
-- host row locked in id order like record_fetches.
-- Returns the ids released; a host absent from the result was not ours to release. Hosts are
-- probed and locked as in record_fetches.
WITH item AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::bigint[])
        AS i(host_id, lease_owner, lease_epoch)
    ORDER BY host_id
),
lease AS MATERIALIZED (
    SELECT h.id, h.lease_owner
    FROM item AS i
    CROSS JOIN LATERAL (
        SELECT id, lease_owner FROM hosts
        WHERE id = i.host_id AND lease_epoch = i.lease_epoch
          AND lease_owner IS NOT DISTINCT FROM i.lease_owner AND lease_expires_at > now()
        LIMIT 1
        FOR UPDATE
    ) AS h
)
UPDATE hosts AS h
SET lease_owner = NULL,
    lease_expires_at = NULL,
    next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id)
FROM lease
WHERE h.id = lease.id
RETURNING h.id;

-- name: recorded_fetches
-- Which of these fetches ($1 url ids, $2 host ids, $3 fetched_at) have their observation
-- (observations' primary key): a record that released its host, retried after a lost
-- acknowledgement, has no lease left to check.
SELECT o.url_id
FROM observations AS o
JOIN unnest($1::bigint[], $2::bigint[], $3::timestamptz[]) AS t(url_id, host_id, fetched_at)
    ON o.url_id = t.url_id AND o.host_id = t.host_id AND o.fetched_at = t.fetched_at
WHERE o.host_id = ANY($2::bigint[]);

-- name: release_owner
-- Shutdown: give back every host this owner still holds (hosts_lease_owner_idx); the count.
WITH released AS (
    UPDATE hosts AS h
    SET lease_owner = NULL,
        lease_expires_at = NULL,
        next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id)
    WHERE h.lease_owner = $1
    RETURNING h.id
)
SELECT count(*) FROM released;

-- name: refresh_host_due
-- Recompute next_due_at (and so ready_at) of hosts whose URLs were rescheduled in bulk (the
-- planner), one chunk of hosts at a time, in a statement of its own after the URLs' commit.
-- A host a fetcher holds locked (claim, record, release) is skipped, never waited for: the
-- planner then can never be part of a lock cycle with the fetch loop. Returns the hosts
-- updated; the caller retries the others.
UPDATE hosts AS h
SET next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id)
FROM (
    SELECT id FROM hosts WHERE id = ANY($1::bigint[]) ORDER BY id FOR UPDATE SKIP LOCKED
) AS free
WHERE h.id = free.id
RETURNING h.id;

-- name: earliest_due
-- When the next claim can succeed: the smallest readiness time (hosts_ready_at_idx, one
-- entry). A host leased by a daemon counts at its lease's expiry: a dead daemon's hosts are
-- picked up then.
SELECT min(ready_at) FROM hosts WHERE ready_at IS NOT NULL;

-- name: status_counts
-- due_all counts paused hosts' due URLs too: the caller takes urls_due_paused from it. The
-- most overdue URL's lateness is most_overdue_seconds. Both URL counts in one scan of urls (no
-- index on next_fetch_at alone).
SELECT
    u.urls, u.due_all,
    (SELECT count(*) FROM hosts) AS hosts,
    (SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL
        AND lease_expires_at > now()) AS hosts_leased,
    (SELECT count(*) FROM observations
        WHERE fetched_at > now() - interval '1 hour') AS fetches_last_hour,
    (SELECT count(*) FROM observations
        WHERE fetched_at > now() - interval '1 hour' AND changed) AS changes_last_hour
FROM (SELECT count(*) AS urls, count(*) FILTER (WHERE next_fetch_at <= now()) AS due_all
      FROM urls) AS u;

-- name: paused_host_ids
-- The paused hosts' keys (hosts_paused_idx, a partial index: few rows).
SELECT id FROM hosts WHERE paused;

-- name: urls_due_paused
-- Due URLs of the paused hosts $1 (urls_host_next_fetch_idx, host by host), counted up to $2:
-- the cost is bounded however large a paused host's backlog.
SELECT count(*) FROM (
    SELECT 1 FROM urls WHERE host_id = ANY($1::bigint[]) AND next_fetch_at <= now() LIMIT $2
) AS due;

-- name: urls_by_state
SELECT state, count(*) AS n FROM urls GROUP BY state ORDER BY state;

-- name: url_row
SELECT u.*, h.origin, h.lease_owner AS host_lease_owner,
       h.lease_expires_at AS host_lease_expires_at, s.root_url AS site_root_url, s.watch_css AS site_watch_css,
       s.ignore_css AS site_ignore_css, s.include_patterns AS site_include,
       s.exclude_patterns AS site_exclude
FROM urls AS u JOIN hosts AS h ON h.id = u.host_id
LEFT JOIN sites AS s ON s.id = u.site_id
WHERE u.url = $1 AND u.host_id = crawler_url_host_id($1);

-- name: url_observations
SELECT fetched_at, outcome, status, bytes, duration_seconds, simhash, simhash_distance,
       changed, content_changed, last_modified, error_kind, truncated
FROM observations
WHERE url_id = $1 AND host_id = $3
ORDER BY fetched_at DESC
LIMIT $2;

-- name: planner_id_range
-- The key space the planner samples from (both ends of the primary key's index).
SELECT min(id) AS min_id, max(id) AS max_id FROM urls;

-- name: planner_sample
-- A stratified sample of the live population: from each random start ($1) read up to $3 live
-- URLs upward, stopping at the stratum's end ($2) (primary key index, O(sample) rows).
SELECT s.stratum, u.id, u.host_id, u.importance, u.change_rate_per_day,
       u.changed_intervals_days, u.unchanged_days, u.intervals_observed,
       h.crawl_delay_seconds, u.own_min_interval_seconds, u.own_max_interval_seconds
FROM unnest($1::bigint[], $2::bigint[]) WITH ORDINALITY AS s(start_id, end_id, stratum)
CROSS JOIN LATERAL (
    SELECT id, host_id, importance, change_rate_per_day, changed_intervals_days,
           unchanged_days, intervals_observed, own_min_interval_seconds,
           own_max_interval_seconds
    FROM urls
    WHERE id >= s.start_id AND id < s.end_id
      AND state IN ('new', 'active', 'error')
      AND (site_id IS NULL OR in_window)
    ORDER BY id
    LIMIT $3
) AS u
JOIN hosts AS h ON h.id = u.host_id;

-- name: planner_claim_round
-- One planner per fleet: a daemon solves only if no one has started a round in the last $1
-- seconds. One statement, no lock held across the solve; returns a row when this daemon won.
INSERT INTO planner_state (key, value, updated_at)
VALUES ('round', 1, now())
-- Times from EXCLUDED, not now(): the same, and what Citus accepts on a reference table.
ON CONFLICT (key) DO UPDATE SET value = planner_state.value + 1, updated_at = EXCLUDED.updated_at
    WHERE EXCLUDED.updated_at - planner_state.updated_at > make_interval(secs => $1)
RETURNING value;

-- name: fleet_concurrency
-- Hosts the whole fleet fetches at once: every daemon whose heartbeat is newer than $1 s.
SELECT COALESCE(sum(concurrency), 0)::int AS concurrency, count(*)::int AS daemons
FROM daemons
WHERE heartbeat_at > now() - make_interval(secs => $1);

-- name: fleet_host_rates
-- Requests per day the hosts allow at one per politeness delay ($1 s at least, or their
-- Crawl-delay): over all hosts, and over the $2 fastest (the planner's figures, once a round).
WITH per_host AS (
    SELECT 86400.0 / GREATEST($1::float8, COALESCE(crawl_delay_seconds, 0), 1e-3) AS per_day
    FROM hosts
)
SELECT count(*)::bigint AS hosts,
       COALESCE(sum(per_day), 0)::float8 AS all_per_day,
       COALESCE((SELECT sum(per_day) FROM (
           SELECT per_day FROM per_host ORDER BY per_day DESC LIMIT $2) AS busiest), 0)::float8
           AS busiest_per_day
FROM per_host;

-- name: heartbeat
-- A daemon says it is alive, and how many hosts it fetches at once.
-- $3: the plan version it schedules under (NULL before it has adopted one).
INSERT INTO daemons (owner, concurrency, started_at, heartbeat_at, plan_version)
VALUES ($1, $2, now(), now(), $3)
-- EXCLUDED's now(), not now() in DO UPDATE: the same time, and Citus (daemons a reference
-- table) takes only immutable functions there.
ON CONFLICT (owner) DO UPDATE
    SET concurrency = EXCLUDED.concurrency, heartbeat_at = EXCLUDED.heartbeat_at,
        plan_version = EXCLUDED.plan_version;

-- name: daemon_stopped
DELETE FROM daemons WHERE owner = $1;

-- name: reschedule_scan
-- The planner's rescheduling walk: the next $2 active URLs after id $1 whose last
-- fetch saw content, with what decides their rate (primary key index; one small chunk per
-- short transaction). A failing URL keeps its retry backoff.
SELECT id, host_id, importance, change_rate_per_day, fetch_rate_per_day,
       changed_intervals_days, unchanged_days, intervals_observed,
       own_min_interval_seconds, own_max_interval_seconds
FROM urls
WHERE id > $1
  AND state = 'active'
  AND consecutive_failures = 0
  AND (site_id IS NULL OR in_window)
  AND last_fetched_at IS NOT NULL
ORDER BY id
LIMIT $2;

-- name: reschedule_records
-- Whole records of the URLs whose rate moved materially, to reschedule them exactly as after
-- a fetch (crawler.core.schedule.next_fetch); by (id, host_id) pairs ($1, $2). The columns
-- crawler.db.frontier.record_from_row reads, times as POSIX seconds (as claim_due_work's).
SELECT u.id AS url_id, u.url, u.host_id, u.state, u.importance,
       date_part('epoch', u.last_fetched_at) AS last_fetched_at, u.last_status,
       u.last_simhash, u.last_content_hash, u.etag,
       date_part('epoch', u.last_modified) AS last_modified, u.fetch_count, u.change_count,
       u.consecutive_failures, u.changed_intervals_days, u.unchanged_days,
       u.intervals_observed, u.change_rate_per_day, u.change_brackets_days,
       u.update_period_days, u.update_phase_days, u.update_jitter_days, u.site_id, u.depth,
       u.lm_fetches, u.lm_changes, u.lm_observed_days, u.lm_evidence_days, u.watch_css,
       u.ignore_css, u.fingerprint_region, u.out_links_read,
       u.own_min_interval_seconds, u.own_max_interval_seconds, u.fetch_windows
FROM urls AS u
JOIN unnest($1::bigint[], $2::bigint[]) AS t(id, host_id)
    ON u.id = t.id AND u.host_id = t.host_id
WHERE u.host_id = ANY($2::bigint[]);

-- name: reschedule_urls
-- Apply new schedules in place. A URL of a leased host, or fetched since it was read ($4, its
-- last_fetched_at then), is left to its fetcher, and so is one a fetcher holds locked (SKIP
-- LOCKED: the planner never waits for the fetch loop, so it is never in a lock cycle with it).
-- A URL already due is left too: its fetch, about to happen, schedules it under the new plan,
-- and a `crawler recheck` stands. A URL a complete source observes waits for its
-- announcements: the new schedule only ever puts it off (as its fetch scheduled it, the later
-- of its own schedule and its wait), else the walk would add blind fetches to the ones its
-- announcements bring, beyond the plan's budget.
WITH t AS (
    SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::float8[], $4::timestamptz[],
                         $5::float8[], $6::bigint[])
        AS t(id, due, rate, last_fetched_at, change_rate, host_id)
),
free AS (
    SELECT u.id, u.host_id
    FROM urls AS u JOIN t ON t.id = u.id AND t.host_id = u.host_id
    WHERE u.host_id = ANY($6::bigint[])
      AND u.last_fetched_at = t.last_fetched_at
      AND NOT EXISTS (
          SELECT 1 FROM hosts AS h WHERE h.id = u.host_id AND h.lease_expires_at > now()
      )
    ORDER BY u.id
    FOR UPDATE OF u SKIP LOCKED
)
UPDATE urls AS u
SET next_fetch_at = CASE WHEN EXISTS (
        SELECT 1 FROM url_hints AS h
        JOIN hint_trust AS c ON c.host_id = h.host_id AND c.source = h.kind
        WHERE h.host_id = u.host_id AND h.url_id = u.id AND c.classification = 'complete')
    THEN greatest(t.due, u.next_fetch_at) ELSE t.due END,
    fetch_rate_per_day = t.rate, change_rate_per_day = t.change_rate
FROM t JOIN free ON free.id = t.id AND free.host_id = t.host_id
WHERE u.id = t.id AND u.host_id = t.host_id
  AND u.next_fetch_at > now()
RETURNING u.host_id;

-- name: store_planner_state
INSERT INTO planner_state (key, value, updated_at)
SELECT key, value, now() FROM unnest($1::text[], $2::float8[]) AS t(key, value)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at;

-- name: load_planner_state
SELECT key, value, updated_at FROM planner_state;

-- name: fetches_since
SELECT count(*) FROM observations WHERE fetched_at > now() - make_interval(secs => $1);

-- name: upsert_site
INSERT INTO sites (root_url, window_size) VALUES ($1, $2)
ON CONFLICT (root_url) DO UPDATE SET window_size = EXCLUDED.window_size
RETURNING id;

-- name: attach_window_root
-- The root of a windowed site: depth 0, in the window, due now if it was parked. A URL that
-- joins the site here has its out-links unread (out_links_read), even if it was fetched before.
-- now() comes from a CTE: Citus takes no stable function inside CASE in a distributed UPDATE.
WITH clock AS (SELECT now() AS at)
UPDATE urls
SET site_id = $2, depth = 0, in_window = true, discovered_initially = true,
    out_links_read = out_links_read AND site_id IS NOT DISTINCT FROM $2,
    entered_window_at = CASE WHEN in_window THEN entered_window_at ELSE clock.at END,
    left_window_at = NULL,
    next_fetch_at = LEAST(next_fetch_at, clock.at)
FROM clock
WHERE url = $1 AND host_id = crawler_url_host_id($1);

-- name: discover_urls
-- Out-links of a windowed page: new URLs join the site parked (next fetch 'infinity') until the
-- window takes them in; (id, url) in input order. A known URL's row is read, not rewritten
-- (urls_host_id_url_key): only one without a site yet is written, to join this one. A URL a
-- concurrent transaction
-- inserted is left out (DO NOTHING); the caller asks again for what is missing.
WITH input AS (
    SELECT url, host_id, ord
    FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS t(url, host_id, ord)
),
known AS (
    SELECT u.id, u.host_id, u.url, u.site_id
    FROM urls AS u JOIN input ON u.host_id = input.host_id AND u.url = input.url
),
inserted AS (
    INSERT INTO urls (url, host_id, site_id, next_fetch_at, discovered_initially)
    SELECT url, host_id, $3, 'infinity', $4 FROM input
    WHERE NOT EXISTS (SELECT 1 FROM known WHERE known.url = input.url)
    ORDER BY ord
    ON CONFLICT (host_id, url) DO NOTHING
    RETURNING id, url
),
adopted AS (
    UPDATE urls SET site_id = $3, out_links_read = false  -- fetched before? links unread
    FROM known
    WHERE urls.id = known.id AND urls.host_id = known.host_id AND known.site_id IS NULL
    RETURNING urls.id
)
SELECT f.id, f.url
FROM (SELECT id, url FROM known UNION ALL SELECT id, url FROM inserted) AS f
JOIN input ON input.url = f.url
ORDER BY input.ord;

-- name: out_links
-- A page's out-links ($1 the page, $2 its host: links stay on their page's host).
SELECT to_url_id FROM links WHERE from_url_id = $1 AND host_id = $2 ORDER BY position;

-- name: delete_out_links_to
-- A page's links it no longer has (links' primary key; $3 the page's host).
DELETE FROM links WHERE from_url_id = $1 AND to_url_id = ANY($2::bigint[]) AND host_id = $3;

-- name: upsert_out_links
-- A page's links now, in page order: only new links and moved positions are written.
INSERT INTO links (from_url_id, to_url_id, position, host_id)
SELECT $1, to_id, pos, $3::bigint FROM unnest($2::bigint[]) WITH ORDINALITY AS t(to_id, pos)
ON CONFLICT (from_url_id, to_url_id, host_id) DO UPDATE SET position = EXCLUDED.position
    WHERE links.position <> EXCLUDED.position;

-- name: window_rows
-- The incremental window update's pages by id (primary key): stored depth and membership, gone
-- now. A page of another site ($2 the site, on host $3) is absent.
SELECT id, depth, in_window, state = 'gone' AS gone
FROM urls WHERE id = ANY($1::bigint[]) AND site_id = $2 AND host_id = $3;

-- name: window_out_links
-- Pages' out-links, in page order (links' primary key), with each target's row as
-- window_rows reads it (urls' primary key; all NULL for a page of another site, $2 the site,
-- $3 its host: a window's links stay on its host).
SELECT l.from_url_id, l.to_url_id, u.depth, u.in_window, u.state = 'gone' AS gone
FROM links AS l
LEFT JOIN urls AS u ON u.id = l.to_url_id AND u.host_id = l.host_id AND u.site_id = $2
WHERE l.from_url_id = ANY($1::bigint[]) AND l.host_id = $3
ORDER BY l.from_url_id, l.position;

-- name: window_in_links
-- The pages linking to these (links_to_idx), with each source's row as window_out_links.
SELECT l.to_url_id, l.from_url_id, u.depth, u.in_window, u.state = 'gone' AS gone
FROM links AS l
LEFT JOIN urls AS u ON u.id = l.from_url_id AND u.host_id = l.host_id AND u.site_id = $2
WHERE l.to_url_id = ANY($1::bigint[]) AND l.host_id = $3;

-- name: window_summary
-- The stored window's size and deepest level (urls_site_window_idx: at most N entries;
-- $2 the site's host).
SELECT count(*)::int AS pages, max(depth) AS deepest
FROM urls WHERE host_id = $2 AND site_id = $1 AND in_window;

-- name: window_members
-- The stored window's pages and depths (urls_site_window_idx; $2 the site's host).
SELECT id, depth FROM urls WHERE host_id = $2 AND site_id = $1 AND in_window;

-- name: site_root
-- A site's root, and its host: a site's pages are all on its root's host.
SELECT s.window_size, u.id AS root_id, u.host_id
FROM sites AS s JOIN urls AS u
    ON u.url = s.root_url AND u.host_id = crawler_url_host_id(s.root_url)
WHERE s.id = $1;

-- name: site_graph
-- The site's observed link graph (urls_site_idx, then links' primary key); $2 its host.
SELECT l.from_url_id, l.to_url_id
FROM urls AS u JOIN links AS l ON l.from_url_id = u.id AND l.host_id = u.host_id
WHERE u.site_id = $1 AND u.host_id = $2
ORDER BY l.from_url_id, l.position;

-- name: site_members
SELECT id, state, depth, in_window FROM urls WHERE site_id = $1 AND host_id = $2;

-- name: apply_window
-- New depths and memberships; a page entering is due now, a page leaving is parked unless it
-- is gone: it left because it answered 404/410 and keeps its gone recheck (next_fetch), the
-- only fetch that can find it back and bring it into the window again.
UPDATE urls AS u
SET depth = t.depth,
    in_window = t.inside,
    entered_window_at = CASE WHEN t.inside AND NOT u.in_window THEN $4 ELSE u.entered_window_at END,
    left_window_at = CASE
        WHEN NOT t.inside AND u.in_window THEN $4
        WHEN t.inside AND NOT u.in_window THEN NULL
        ELSE u.left_window_at END,
    next_fetch_at = CASE
        WHEN t.inside AND NOT u.in_window THEN LEAST(u.next_fetch_at, $4)
        WHEN NOT t.inside AND u.in_window AND u.state <> 'gone' THEN 'infinity'
        ELSE u.next_fetch_at END
FROM unnest($1::bigint[], $2::int[], $3::bool[]) AS t(id, depth, inside)
WHERE u.id = t.id AND u.host_id = $5;

-- name: sites_summary
SELECT s.id, s.root_url, s.window_size, s.created_at, s.include_patterns, s.exclude_patterns,
       count(u.id) AS discovered,
       count(u.id) FILTER (WHERE u.in_window) AS in_window,
       count(u.id) FILTER (WHERE u.entered_window_at IS NOT NULL) AS entered,
       count(u.id) FILTER (WHERE u.left_window_at IS NOT NULL) AS left_window
FROM sites AS s LEFT JOIN urls AS u ON u.site_id = s.id
GROUP BY s.id ORDER BY s.root_url;

-- name: site_urls
-- A windowed site's URLs, by depth: those in state $2 (NULL: any), $3 of them (NULL: all)
-- from the $4-th (`crawler urls --site` pages; the site's lifespans read them all).
SELECT u.url, u.depth, u.in_window, u.state, u.last_status, u.entered_window_at,
       u.left_window_at, u.last_fetched_at,
       COALESCE(u.last_attempt_at, u.last_fetched_at) AS last_attempt_at, u.last_outcome,
       u.fetch_count, u.change_count,
       u.discovered_initially, s.created_at AS site_created_at, now() AS observed_until
FROM urls AS u JOIN sites AS s ON s.id = u.site_id
WHERE s.root_url = $1 AND u.host_id = crawler_url_host_id($1)
  AND ($2::text IS NULL OR u.state = $2::text)
ORDER BY u.depth NULLS LAST, u.id
LIMIT $3::bigint OFFSET $4::bigint;

-- name: store_robots
-- A host's robots.txt after a fetch of it, its Crawl-delay, and its politeness clock (the
-- robots.txt request counts as a request to the host). $1 is the hosts row as JSON
-- (crawler.db.frontier.store_robots); fenced by the lease token ($2 owner, $3 epoch). When
-- the rules changed ($4), every URL they had disallowed is due again, to be judged anew.
-- Every part names the host by the key in $1 itself (not by the row read from it): Citus
-- then runs the whole statement on the host's shard, row lock included.
WITH r AS (
    SELECT * FROM jsonb_populate_record(NULL::hosts, $1::jsonb)
),
lease AS (
    SELECT hosts.id FROM hosts
    WHERE hosts.id = ($1::jsonb ->> 'id')::bigint
      AND hosts.lease_owner = $2 AND hosts.lease_epoch = $3
      AND hosts.lease_expires_at > now()
    FOR UPDATE OF hosts
),
rechecked AS (
    UPDATE urls SET next_fetch_at = LEAST(next_fetch_at, now())
    WHERE $4 AND host_id = ($1::jsonb ->> 'id')::bigint AND host_id IN (SELECT id FROM lease)
      AND state = 'disallowed'
    RETURNING id
)
UPDATE hosts
SET robots_body = r.robots_body, robots_status = r.robots_status,
    robots_fetched_at = r.robots_fetched_at, robots_good_at = r.robots_good_at,
    robots_expires_at = r.robots_expires_at,
    robots_unreachable_since = r.robots_unreachable_since,
    crawl_delay_seconds = r.crawl_delay_seconds, next_request_at = r.next_request_at
FROM r, lease
WHERE hosts.id = ($1::jsonb ->> 'id')::bigint AND hosts.id = lease.id
RETURNING (SELECT count(*) FROM rechecked) AS rechecked;

-- name: set_host_backoff
-- Leave a host alone until $2; fenced by the lease token ($3 owner, $4 epoch).
UPDATE hosts SET backoff_until = $2
WHERE id = $1 AND lease_owner = $3 AND lease_epoch = $4 AND lease_expires_at > now()
RETURNING id;

-- name: hosts_health
SELECT count(*) FILTER (WHERE backoff_until > now()) AS in_backoff,
       count(*) FILTER (WHERE backoff_until > now() AND consecutive_failures >= $1)
           AS circuit_open
FROM hosts;

-- name: most_overdue_hosts
-- The $1 hosts not paused whose earliest URL is the most overdue (hosts_unpaused_due_idx):
-- where `crawler status` looks for the most overdue URLs. A paused host is no backlog.
SELECT id FROM hosts WHERE NOT paused AND next_due_at <= now() ORDER BY next_due_at LIMIT $1;

-- name: host_most_overdue_urls
-- Host $1's $2 most overdue URLs (urls_host_next_fetch_idx).
SELECT url, next_fetch_at, EXTRACT(EPOCH FROM now() - next_fetch_at) AS overdue_seconds
FROM urls
WHERE host_id = $1 AND next_fetch_at <= now()
ORDER BY next_fetch_at
LIMIT $2;

-- name: hosts_in_backoff
SELECT origin, backoff_until, consecutive_failures,
       robots_unreachable_since IS NOT NULL AS robots_unreachable,
       last_error_kind, last_error_at
FROM hosts
WHERE backoff_until > now()
ORDER BY backoff_until DESC
LIMIT $1;

-- name: note_host_error
-- The host's last connection-level failure (a TLS error, say), kept even when it came on
-- robots.txt, for `crawler status`; fenced by the lease token ($4 owner, $5 epoch).
UPDATE hosts SET last_error_kind = $2, last_error_at = $3
WHERE id = $1 AND lease_owner = $4 AND lease_epoch = $5 AND lease_expires_at > now()
RETURNING id;

-- name: list_sites
-- Every windowed site (one row per site: a small table), for naming a site by any spelling.
SELECT id, root_url, window_size FROM sites ORDER BY root_url;

-- name: set_host_refused
-- The SSRF policy refused the host's address ($2 the reason; NULL clears it once the host is
-- reachable), shown by `crawler status`; fenced by the lease token ($3 owner, $4 epoch). The
-- row is written only when the note changes; `held` says whether the lease is still held,
-- `changed` whether the note changed (so the daemon logs a refusal once per host).
WITH lease AS (
    SELECT id, refused_reason FROM hosts
    WHERE id = $1 AND lease_owner = $3 AND lease_epoch = $4 AND lease_expires_at > now()
    FOR UPDATE
),
noted AS (
    UPDATE hosts SET refused_reason = $2::text
    WHERE id IN (SELECT id FROM lease WHERE refused_reason IS DISTINCT FROM $2::text)
    RETURNING id
)
SELECT EXISTS (SELECT 1 FROM lease) AS held, EXISTS (SELECT 1 FROM noted) AS changed;

-- name: hosts_refused
SELECT origin, refused_reason FROM hosts WHERE refused_reason IS NOT NULL
ORDER BY origin LIMIT $1;

-- name: set_host_paused
-- `crawler pause|resume --host ORIGIN` (by its key: the origin's hash).
UPDATE hosts SET paused = $2 WHERE id = crawler_host_id($1) AND origin = $1 RETURNING id;

-- name: hosts_paused
-- Paused hosts for `crawler status` (hosts_paused_idx, a partial index: few rows).
SELECT origin FROM hosts WHERE paused ORDER BY origin LIMIT $1;

-- name: export_urls
-- `crawler export urls`: every URL (fetched or added since $1), streamed by a server-side
-- cursor in primary-key order; an export reads the whole table by design.
SELECT u.url, h.origin, u.state, u.importance, u.created_at, u.last_fetched_at,
       u.last_status, u.fetch_count, u.change_count, u.change_rate_per_day,
       u.fetch_rate_per_day, u.next_fetch_at
FROM urls AS u JOIN hosts AS h ON h.id = u.host_id
WHERE $1::timestamptz IS NULL OR u.created_at >= $1 OR u.last_fetched_at >= $1
ORDER BY u.id;

-- name: export_observations
-- `crawler export observations`: fetches since $1 (observations_fetched_at_idx), oldest first.
SELECT u.url, o.fetched_at, o.outcome, o.status, o.bytes, o.duration_seconds, o.changed,
       o.simhash_distance, o.error_kind
FROM observations AS o JOIN urls AS u ON u.id = o.url_id AND u.host_id = o.host_id
WHERE o.fetched_at >= COALESCE($1::timestamptz, '-infinity')
ORDER BY o.fetched_at, o.url_id;

-- name: list_urls
-- `crawler urls [--host] [--state]`: one page in primary-key order. $1 origin or NULL, $2 state
-- or NULL, $3 offset, $4 page size (the origin's key, then urls_host_next_fetch_idx).
-- A URL with no last_attempt_at recorded shows its last content fetch as its last attempt.
SELECT u.url, h.origin, u.state, u.importance, u.next_fetch_at, u.last_fetched_at,
       COALESCE(u.last_attempt_at, u.last_fetched_at) AS last_attempt_at, u.last_outcome,
       u.last_status, u.fetch_count, u.change_count, u.unlisted_at
FROM urls AS u JOIN hosts AS h ON h.id = u.host_id
WHERE ($1::text IS NULL OR (h.id = crawler_host_id($1) AND h.origin = $1))
  AND ($2::text IS NULL OR u.state = $2)
ORDER BY u.id
OFFSET $3 LIMIT $4;

-- name: set_importance
-- `crawler importance`: new weights for known URLs (urls_host_id_url_key); returns those it
-- found.
UPDATE urls AS u SET importance = t.weight
FROM unnest($1::text[], $2::float8[]) AS t(url, weight)
WHERE u.url = t.url AND u.host_id = crawler_url_host_id(t.url)
RETURNING u.url;

-- name: remove_urls
-- `crawler remove URL...`: the URLs and, by cascade, their links and collection rows; their
-- observations go next (remove_observations). Returns their ids and hosts, whose due time
-- the caller then recomputes (refresh_host_due).
DELETE FROM urls AS u USING unnest($1::text[]) AS t(url)
WHERE u.url = t.url AND u.host_id = crawler_url_host_id(t.url)
RETURNING u.id, u.host_id;

-- name: remove_observations
-- The observations of URLs ($1 ids, $2 their hosts) that the same transaction removed: no
-- foreign key cascades to them. A statement of its own,
-- after the URLs' delete: its snapshot also holds an observation committed while that delete
-- waited for a URL's row.
DELETE FROM observations AS o USING unnest($1::bigint[], $2::bigint[]) AS t(url_id, host_id)
WHERE o.url_id = t.url_id AND o.host_id = t.host_id AND o.host_id = ANY($2::bigint[]);

-- name: lock_host
-- `crawler remove --host`, first: the host row locked until commit, so that no fetch records
-- nor discovery adds a URL of it meanwhile. Its id; nothing for an unknown host.
SELECT id FROM hosts WHERE id = crawler_host_id($1) AND origin = $1 FOR UPDATE;

-- name: remove_host_urls
-- `crawler remove --host`, next (a statement of its own, after lock_host: its snapshot holds
-- every URL and fetch committed before the lock): the host's URLs, whose observations then
-- go (remove_observations) before the host row does (remove_host).
DELETE FROM urls WHERE host_id = $1 RETURNING id, host_id;

-- name: remove_host
-- `crawler remove --host`, last: the host row that lock_host found ($1 its id), and by cascade
-- what remains of it (remove_host_urls took its URLs, remove_observations their observations).
DELETE FROM hosts WHERE id = $1;

-- name: last_stored_response
-- The URL's newest stored response: what a revisit refers to, and the base of a change's diff.
-- target_uri may be NULL (a row indexed without it): the revisit then names its own URI.
SELECT fetched_at, warc_file, warc_offset, record_id, payload_digest, target_uri
FROM stored_records
WHERE url_id = $1 AND host_id = $2 AND record_type = 'response' AND damaged IS NULL
ORDER BY fetched_at DESC
LIMIT 1;

-- name: collection_rows
-- Not a statement: stored WARC records ($1, a JSON array of stored_records rows) and change
-- events ($2, a JSON array of change_events rows), as CTEs: those of one fetch, or of every
-- fetch of a recorder batch (one statement, not one per fetch). The rows are built by
-- crawler.store.collect.CollectionWrite.rows and read by column name. crawler.store.collect
-- runs them in the fetches' transaction, after its fence (a retried commit changes nothing).
collection_stored AS (
    INSERT INTO stored_records (url_id, fetched_at, record_type, status, warc_file,
                                warc_offset, warc_length, record_id, payload_digest,
                                payload_bytes, changed, refers_to, host_id, target_uri)
    SELECT url_id, fetched_at, record_type, status, warc_file, warc_offset, warc_length,
           record_id, payload_digest, payload_bytes, changed, refers_to, host_id, target_uri
    FROM jsonb_populate_recordset(NULL::stored_records, $1::jsonb)
    WHERE EXISTS (SELECT 1 FROM lease)
    ON CONFLICT (url_id, fetched_at, host_id) DO NOTHING
),
collection_event AS (
    INSERT INTO change_events (url_id, fetched_at, kind, payload, host_id)
    SELECT url_id, fetched_at, kind, payload, host_id
    FROM jsonb_populate_recordset(NULL::change_events, $2::jsonb)
    WHERE EXISTS (SELECT 1 FROM lease)
    ON CONFLICT (url_id, fetched_at, host_id, kind) DO NOTHING
)

-- name: pending_events
-- The oldest $1 undelivered events for the webhook (delivered in id order per URL): those
-- after its start ($2, webhooks.start_id), and those a replay queued again, whatever their
-- age. Two index ranges (change_events_pending_idx, change_events_replay_idx), merged by id.
SELECT * FROM (
    (SELECT e.id, e.url_id, e.payload, e.attempts, e.next_attempt_at, e.created_at
     FROM change_events e
     WHERE e.delivered_at IS NULL AND e.id > $2
     ORDER BY e.id LIMIT $1)
    UNION ALL
    (SELECT e.id, e.url_id, e.payload, e.attempts, e.next_attempt_at, e.created_at
     FROM change_events e
     WHERE e.delivered_at IS NULL AND e.replay AND e.id <= $2
     ORDER BY e.id LIMIT $1)
) AS pending
ORDER BY id
LIMIT $1;

-- name: mark_event_delivered
-- Fenced by the delivery lease ($2 owner, $3 epoch): a deliverer whose lease another daemon
-- took over marks nothing (the new holder sends the event, at least once). The id of the
-- event marked, none when the lease is gone.
UPDATE change_events
SET delivered_at = now(), attempts = attempts + 1, last_error = NULL, replay = false
WHERE id = $1 AND EXISTS (
    SELECT 1 FROM delivery_lease
    WHERE name = 'outbox' AND owner = $2 AND epoch = $3 AND expires_at > now())
RETURNING id;

-- name: mark_event_failed
-- Fenced by the delivery lease ($4 owner, $5 epoch), as mark_event_delivered.
UPDATE change_events
SET attempts = attempts + 1, next_attempt_at = $2, last_error = $3
WHERE id = $1 AND EXISTS (
    SELECT 1 FROM delivery_lease
    WHERE name = 'outbox' AND owner = $4 AND epoch = $5 AND expires_at > now())
RETURNING id;

-- name: outbox_summary
-- Webhook gauges: the events still to deliver to the webhook starting after $1 (as
-- pending_events counts them) and the age of the oldest.
SELECT count(*) AS pending, min(created_at) AS oldest_created_at
FROM change_events
WHERE delivered_at IS NULL AND (id > $1 OR replay);

-- name: url_versions
-- Every stored version of one URL, oldest first (crawler versions / get / diff).
SELECT s.id, s.fetched_at, s.record_type, s.status, s.warc_file, s.warc_offset, s.warc_length,
       s.record_id, s.payload_digest, s.payload_bytes, s.changed, s.refers_to, s.damaged
FROM stored_records s JOIN urls u ON u.id = s.url_id AND u.host_id = s.host_id
WHERE u.url = $1 AND u.host_id = crawler_url_host_id($1)
ORDER BY s.fetched_at;

-- name: changes_page
-- One page of the outbox after the keyset cursor (fetched_at, id), for crawler changes.
-- fetched_at >= $1 adds nothing to the row comparison but lets the months before the cursor
-- be pruned (a row comparison alone prunes no partition). Filters, each NULL for none: $4 one
-- URL (its id, on its host), $5 one host (its key), $6 kinds.
SELECT id, fetched_at, payload, delivered_at, kind
FROM change_events
WHERE (fetched_at, id) > ($1, $2) AND fetched_at >= $1
  AND ($4::text IS NULL OR (host_id = crawler_url_host_id($4::text) AND url_id = (
      SELECT u.id FROM urls AS u
      WHERE u.url = $4::text AND u.host_id = crawler_url_host_id($4::text))))
  AND ($5::text IS NULL OR host_id = crawler_host_id($5::text))
  AND ($6::text[] IS NULL OR kind = ANY($6::text[]))
ORDER BY fetched_at, id
LIMIT $3;

-- name: fleet_claim
-- One daemon per fleet does a periodic job ($1, e.g. 'sampler'): it claims it only if no one
-- has in the last $2 seconds. Returns a row when this daemon won.
INSERT INTO planner_state (key, value, updated_at)
VALUES ($1, 1, now())
-- Times from EXCLUDED, not now(): the same, and what Citus accepts on a reference table.
ON CONFLICT (key) DO UPDATE SET value = planner_state.value + 1, updated_at = EXCLUDED.updated_at
    WHERE EXCLUDED.updated_at - planner_state.updated_at > make_interval(secs => $2)
RETURNING value;

-- name: most_overdue_seconds
-- How late the most overdue URL of a host not paused is: the earliest next_due_at (each host's
-- earliest next_fetch_at) of those hosts (hosts_unpaused_due_idx: one index entry). Skipping
-- paused hosts in an index on urls.next_fetch_at instead would walk their whole backlog first.
SELECT EXTRACT(EPOCH FROM now() - min(next_due_at)) FROM hosts
WHERE NOT paused AND next_due_at <= now();

-- name: hosts_leased_count
-- Hosts under a live lease: at most the fleet's concurrency (hosts_lease_owner_idx).
SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL AND lease_expires_at > now();

-- name: estimate_urls
-- Planned, not run (crawler.db.estimates): the estimated row counts behind the gauges.
SELECT 1 FROM urls;

-- name: estimate_urls_in_state
SELECT 1 FROM urls WHERE state = $1;

-- name: estimate_urls_due
SELECT 1 FROM urls WHERE next_fetch_at <= now();

-- name: estimate_urls_due_paused
SELECT 1 FROM urls WHERE host_id = ANY($1::bigint[]) AND next_fetch_at <= now();

-- name: estimate_hosts_in_backoff
SELECT 1 FROM hosts WHERE backoff_until > now();

-- name: estimate_hosts_circuit_open
SELECT 1 FROM hosts WHERE backoff_until > now() AND consecutive_failures >= $1;

-- name: set_url_region
-- A URL's own watched region (crawler watch, crawler seed --watch/--ignore);
-- urls_host_id_url_key.
UPDATE urls AS u SET watch_css = $2, ignore_css = $3
FROM unnest($1::text[]) AS t(url)
WHERE u.url = t.url AND u.host_id = crawler_url_host_id(t.url)
RETURNING u.url;

-- name: set_site_region
-- The region of every page of a window without one of its own; sites_root_url_key.
UPDATE sites SET watch_css = $2, ignore_css = $3
WHERE root_url = $1
RETURNING id;

-- name: url_region
-- A URL's own region and its window's, for crawler watch and crawler show;
-- urls_host_id_url_key.
SELECT u.watch_css, u.ignore_css, u.fingerprint_region, s.root_url AS site_root_url,
       s.watch_css AS site_watch_css, s.ignore_css AS site_ignore_css
FROM urls AS u LEFT JOIN sites AS s ON s.id = u.site_id
WHERE u.url = $1 AND u.host_id = crawler_url_host_id($1);

-- name: set_site_patterns
-- A windowed site's own URL patterns (crawler seed --window N --include P --exclude P).
UPDATE sites SET include_patterns = $2, exclude_patterns = $3 WHERE id = $1;

-- name: site_patterns
-- A windowed site's own URL patterns, by primary key, for filtering the links a fetch found.
SELECT include_patterns, exclude_patterns FROM sites WHERE id = $1;

-- name: store_plan
-- A solved plan, as the JSON object crawler.core.stored_plan.plan_document makes (columns by
-- name, host_priors a nested object); its version and solve time come from the table.
INSERT INTO plans (
    solved_by, mode, objective, beta_seconds, default_interval_seconds, min_interval_seconds,
    max_interval_seconds, budget_setting_per_day, budget_per_day, budget_source, mu,
    prior_shape, prior_rate, host_priors, estimated_freshness, estimated_beta_currency,
    achieved_per_day, sampled, population, complete_sampled
)
SELECT solved_by, mode, objective, beta_seconds, default_interval_seconds, min_interval_seconds,
       max_interval_seconds, budget_setting_per_day, budget_per_day, budget_source, mu,
       prior_shape, prior_rate, host_priors, estimated_freshness, estimated_beta_currency,
       achieved_per_day, sampled, population, coalesce(complete_sampled, 0)
FROM jsonb_populate_record(NULL::plans, $1::jsonb)
RETURNING version;

-- name: prune_plans
-- Keep the newest $1 plans: the history status and tests read, bounded.
DELETE FROM plans WHERE version <= (SELECT max(version) FROM plans) - $1;

-- name: latest_plan
SELECT * FROM plans ORDER BY version DESC LIMIT 1;

-- name: latest_plan_version
-- Every fetch process asks this every few seconds: one entry of the primary key.
SELECT max(version) FROM plans;

-- name: daemon_plan_version
-- A fetch process adopted plan $2: said at once, not at the next heartbeat.
UPDATE daemons SET plan_version = $2 WHERE owner = $1;

-- name: daemons_applying_plan
-- crawler status: live fetch processes (heartbeat newer than $1 s), and those that schedule
-- under the newest plan.
SELECT count(*)::int AS live,
       count(*) FILTER (WHERE plan_version = (SELECT max(version) FROM plans))::int AS applying
FROM daemons
WHERE heartbeat_at > now() - make_interval(secs => $1);

-- name: seed_known_due
-- Known URLs seeded again ($1, on hosts $2) that have no next fetch time (parked at
-- 'infinity': a window page outside its window) or are gone: due at $3, since seeding a URL
-- asks for it. Any other keeps its schedule. One row per URL made due, its host.
UPDATE urls AS u SET next_fetch_at = $3::timestamptz
FROM unnest($1::text[], $2::bigint[]) AS t(url, host_id)
WHERE u.host_id = t.host_id AND u.url = t.url
  AND (u.next_fetch_at = 'infinity' OR u.state = 'gone') AND u.next_fetch_at > $3::timestamptz
RETURNING u.host_id;

-- name: recheck_urls
-- `crawler recheck URL...`: the known URLs of $1 due now by the database's clock (the one
-- claims read), or earlier if they already were. Only the due time moves: the host's
-- politeness clock, backoff and lease still decide when the fetch goes, and that fetch
-- schedules the URL again as any fetch does. Their hosts (one row per URL) then have their
-- due time recomputed (refresh_host_due). now() from a CTE, as attach_window_root's.
WITH clock AS (SELECT now() AS at)
UPDATE urls AS u SET next_fetch_at = LEAST(u.next_fetch_at, clock.at)
FROM unnest($1::text[]) AS t(url), clock
WHERE u.url = t.url AND u.host_id = crawler_url_host_id(t.url)
RETURNING u.url, u.host_id;

-- name: host_id_of
-- A known host's id from its origin ($1); nothing for an unknown one.
SELECT id FROM hosts WHERE id = crawler_host_id($1) AND origin = $1;

-- name: recheck_host_urls
-- `crawler recheck --host`: every URL of host $1 due now (recheck_urls), but those parked
-- outside their page window ('infinity'), whose fetches the window decides. How many.
WITH clock AS (SELECT now() AS at),
made AS (
    UPDATE urls AS u SET next_fetch_at = LEAST(u.next_fetch_at, clock.at)
    FROM clock
    WHERE u.host_id = $1 AND u.next_fetch_at <> 'infinity'
    RETURNING 1
)
SELECT count(*) FROM made;

-- name: host_parked_urls
-- How many of host $1's URLs are parked outside their page window (urls_host_next_fetch_idx).
SELECT count(*) FROM urls WHERE host_id = $1 AND next_fetch_at = 'infinity';

-- name: recheck_linked_gone
-- Pages a windowed page now links to and did not before ($1, on its host $2) that are gone:
-- due at $3 (if later). A new link says the page may be back, and a gone page enters the
-- window again only once a fetch finds it back.
UPDATE urls SET next_fetch_at = $3
WHERE id = ANY($1::bigint[]) AND host_id = $2 AND state = 'gone' AND next_fetch_at > $3
RETURNING id;

-- name: status_host_list_totals
-- How many hosts each of `crawler status`'s host lists holds, so that a page of a list says
-- what it leaves out (the hosts table, one row per origin: one scan).
SELECT count(*) FILTER (WHERE backoff_until > now()) AS hosts_in_backoff,
       count(*) FILTER (WHERE paused) AS hosts_paused,
       count(*) FILTER (WHERE refused_reason IS NOT NULL) AS hosts_refused
FROM hosts;

-- name: set_storage_fault
-- A daemon says why it cannot write its collection now ($2; NULL: it can again), for
-- crawler status. Its row exists once it has sent a heartbeat; a fault before that is said
-- again by the next change or by the periodic refresh.
UPDATE daemons SET storage_fault = $2 WHERE owner = $1;

-- name: storage_faults
-- crawler status: live daemons (heartbeat newer than $1 s) that cannot write their collection.
SELECT owner, storage_fault FROM daemons
WHERE storage_fault IS NOT NULL AND heartbeat_at > now() - make_interval(secs => $1)
ORDER BY owner;

-- name: damaged_records_count
-- crawler status: index rows marked damaged (crawler verify --repair, crash recovery).
SELECT count(*) FROM stored_records WHERE damaged IS NOT NULL;

-- name: verify_records
-- crawler verify: the index rows after (warc_file, warc_offset, id) = ($1, $2, $3), in file
-- order (each file read front to back), $4 at a time; $5: only the rows of that file (NULL:
-- all).
SELECT s.id, s.url_id, s.host_id, s.fetched_at, s.record_type, s.warc_file, s.warc_offset,
       s.warc_length, s.record_id, s.payload_digest, s.damaged, u.url
FROM stored_records s JOIN urls u ON u.id = s.url_id AND u.host_id = s.host_id
WHERE (s.warc_file, s.warc_offset, s.id) > ($1, $2, $3)
  AND ($5::text IS NULL OR s.warc_file = $5)
ORDER BY s.warc_file, s.warc_offset, s.id
LIMIT $4;

-- name: mark_damaged
-- crawler verify --repair: rows ($1 ids, $2 their fetched_at, $3 their host_id) whose records
-- cannot be read back, with why ($4, one per row; NULL: sound again). A URL with a damaged
-- row forgets its validators and content hash, so that its next fetch is unconditional and
-- stores a full response (no 304, no revisit of the damaged record).
WITH marked AS (
    UPDATE stored_records AS s SET damaged = t.damaged
    FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[], $4::text[])
        AS t(id, fetched_at, host_id, damaged)
    WHERE s.id = t.id AND s.fetched_at = t.fetched_at AND s.host_id = t.host_id
      AND s.damaged IS DISTINCT FROM t.damaged
    RETURNING s.url_id, s.host_id, s.damaged
),
refetched AS (
    UPDATE urls AS u SET etag = NULL, last_modified = NULL, last_content_hash = NULL
    FROM (SELECT DISTINCT url_id, host_id FROM marked WHERE damaged IS NOT NULL) AS m
    WHERE u.id = m.url_id AND u.host_id = m.host_id
    RETURNING u.id
)
SELECT (SELECT count(*) FROM marked WHERE damaged IS NOT NULL) AS marked,
       (SELECT count(*) FROM marked WHERE damaged IS NULL) AS cleared,
       (SELECT count(*) FROM refetched) AS urls;

-- name: webhook_start
-- The outbox id webhook $1 starts after: recorded the first time the URL is configured, as the
-- newest event's id then, so that a new webhook gets the events from now on, none of the
-- history. No row when another daemon recorded it in the same instant (the caller reads again).
WITH added AS (
    INSERT INTO webhooks (url, start_id)
    VALUES ($1, (SELECT coalesce(max(id), 0) FROM change_events))
    ON CONFLICT (url) DO NOTHING
    RETURNING start_id
)
SELECT start_id FROM added
UNION ALL
SELECT start_id FROM webhooks WHERE url = $1
LIMIT 1;

-- name: delivery_take
-- Take the outbox's delivery lease for owner $1, $2 seconds, when no one holds it or its
-- holder's lease expired (by the database's clock). Each take increments the fencing epoch:
-- the token is (owner, epoch), and every mark of an event checks it. No row: it is held.
INSERT INTO delivery_lease AS l (name, owner, expires_at, epoch)
VALUES ('outbox', $1, now() + make_interval(secs => $2), 1)
ON CONFLICT (name) DO UPDATE
    SET owner = EXCLUDED.owner, expires_at = EXCLUDED.expires_at, epoch = l.epoch + 1
    WHERE l.expires_at IS NULL OR l.expires_at <= now()
RETURNING epoch, date_part('epoch', expires_at - now()) AS lease_seconds;

-- name: delivery_renew
-- Extend the delivery lease ($1 owner, $2 epoch) to $3 seconds from now while it still holds;
-- no row once it expired or moved on (the holder then stops delivering).
UPDATE delivery_lease SET expires_at = now() + make_interval(secs => $3)
WHERE name = 'outbox' AND owner = $1 AND epoch = $2 AND expires_at > now()
RETURNING date_part('epoch', expires_at - now()) AS lease_seconds;

-- name: delivery_release
-- Give the delivery lease back ($1 owner, $2 epoch) at shutdown: another daemon delivers at
-- once instead of after the lease.
UPDATE delivery_lease SET owner = NULL, expires_at = NULL
WHERE name = 'outbox' AND owner = $1 AND epoch = $2;

-- name: replay_events
-- crawler changes --replay-to-webhook: queue the events fetched at or after $1 again (filters
-- as changes_page: $2 one URL, $3 one host, $4 kinds, each NULL for none), delivered or not
-- and however old; the count.
WITH queued AS (
    UPDATE change_events
    SET delivered_at = NULL, replay = true, attempts = 0, next_attempt_at = NULL,
        last_error = NULL
    WHERE fetched_at >= $1
      AND ($2::text IS NULL OR (host_id = crawler_url_host_id($2::text) AND url_id = (
          SELECT u.id FROM urls AS u
          WHERE u.url = $2::text AND u.host_id = crawler_url_host_id($2::text))))
      AND ($3::text IS NULL OR host_id = crawler_host_id($3::text))
      AND ($4::text[] IS NULL OR kind = ANY($4::text[]))
    RETURNING 1
)
SELECT count(*) FROM queued;

-- name: alert_fence
-- Lock host $1 for an alert's writes while its lease ($2 owner, $3 epoch) holds: a daemon
-- that lost the host counts nothing more against it. No row: the lease is gone.
SELECT id FROM hosts
WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3 AND lease_expires_at > now()
FOR UPDATE;

-- name: alert_failed
-- One more consecutive failure of host $1 (url_id 0) and of each URL of $2 (ids) / $5
-- (their URLs), at $3, of kind $4. The rows as they are now; none for a failure already
-- counted (a transaction retried after a lost acknowledgement counts it once).
INSERT INTO alerts AS a (host_id, url_id, failures, first_failed_at, last_failed_at,
                         error_kind, url)
SELECT $1, s.url_id, 1, $3, $3, $4, s.url
FROM unnest($2::bigint[], $5::text[]) AS s(url_id, url)
ON CONFLICT (host_id, url_id) DO UPDATE
    SET failures = a.failures + 1, last_failed_at = EXCLUDED.last_failed_at,
        error_kind = EXCLUDED.error_kind, url = EXCLUDED.url
    WHERE a.host_id = $1 AND EXCLUDED.last_failed_at > a.last_failed_at
RETURNING url_id, failures, first_failed_at, raised, url, error_kind;

-- name: alert_raised
-- The `failing` events of host $1's rows $2 (url ids, 0 for the host) were raised.
UPDATE alerts SET raised = true WHERE host_id = $1 AND url_id = ANY($2::bigint[]);

-- name: alert_cleared
-- Host $1 and the URLs $2 (ids, 0 for the host) work again: their rows go, returned to say
-- which had raised `failing` (they now raise `recovered`).
DELETE FROM alerts WHERE host_id = $1 AND url_id = ANY($2::bigint[])
RETURNING url_id, failures, first_failed_at, raised, url, error_kind;

-- name: alert_event
-- An alert into the outbox ($1 url_id, $2 fetched_at, $3 kind, $4 payload, $5 host_id), in the
-- alert's transaction; once per URL, time and kind.
INSERT INTO change_events (url_id, fetched_at, kind, payload, host_id)
VALUES ($1, $2, $3, $4::jsonb, $5)
ON CONFLICT (url_id, fetched_at, host_id, kind) DO NOTHING;

-- name: failing_now
-- crawler status: the $1 URLs and hosts failing longest (each until it works again), and
-- how many there are in all.
SELECT h.origin, a.url_id, a.url, a.failures, a.first_failed_at, a.last_failed_at,
       a.error_kind, a.raised, count(*) OVER () AS total
FROM alerts AS a JOIN hosts AS h ON h.id = a.host_id
ORDER BY a.first_failed_at, a.host_id, a.url_id
LIMIT $1;

-- name: url_failing
-- crawler show: URL $1's failures and its host's (url_id 0), while they last.
SELECT url_id, url, failures, first_failed_at, last_failed_at, error_kind, raised
FROM alerts
WHERE host_id = crawler_url_host_id($1) AND (url_id = 0 OR url = $1)
ORDER BY url_id;

-- name: set_url_exact
-- Whether URLs $1 are watched exactly (crawler watch --exact / --no-exact);
-- urls_host_id_url_key.
UPDATE urls AS u SET watch_exact = $2
FROM unnest($1::text[]) AS t(url)
WHERE u.url = t.url AND u.host_id = crawler_url_host_id(t.url)
RETURNING u.url;

-- name: set_site_exact
-- Whether every page of window $1 without a rule of its own is watched exactly;
-- sites_root_url_key.
UPDATE sites SET watch_exact = $2 WHERE root_url = $1 RETURNING id;

-- name: set_pattern_rule
-- crawler watch --pattern REGEX: every known URL the regular expression $1 matches (a scan
-- of urls, run by hand) takes exactness $2 (NULL: kept) and the region parts $3 (watch) and
-- $4 (ignore), each NULL to keep it and '' to remove it; $5 removes both first (--clear).
UPDATE urls SET
    watch_exact = coalesce($2::boolean, watch_exact),
    watch_css = CASE WHEN $3::text IS NOT NULL THEN nullif($3::text, '')
                     WHEN $5::boolean THEN NULL ELSE watch_css END,
    ignore_css = CASE WHEN $4::text IS NOT NULL THEN nullif($4::text, '')
                      WHEN $5::boolean THEN NULL ELSE ignore_css END
WHERE url ~ $1
RETURNING url;

-- name: store_watch_rule
-- `crawler watch --pattern`: regular expression $1 sets parts $2 ('exact', 'watch', 'ignore')
-- to values $3 ('true'/'false'; a CSS selector, '' for none) for the URLs that arrive later;
-- per part the pattern set last wins (migration 0032).
INSERT INTO watch_rules (pattern, part, value, set_at)
SELECT $1, part, value, now()
FROM unnest($2::text[], $3::text[]) AS t(part, value)
ON CONFLICT (pattern, part) DO UPDATE SET value = EXCLUDED.value, set_at = EXCLUDED.set_at
RETURNING id;

-- name: prune_watch_rules
-- Watch rules that set a part to its default (not exact, no region part) and override no
-- other pattern's (none set that part earlier) do nothing: removed, so that with no rule left
-- the new-URL trigger is disabled.
DELETE FROM watch_rules AS w
WHERE w.value = CASE w.part WHEN 'exact' THEN 'false' ELSE '' END
  AND NOT EXISTS (
    SELECT 1 FROM watch_rules AS o
    WHERE o.part = w.part AND o.value <> CASE o.part WHEN 'exact' THEN 'false' ELSE '' END
      AND (o.set_at, o.id) < (w.set_at, w.id))
RETURNING id;

-- name: url_exact
-- Whether URL $1 is watched exactly, by its own rule or its window's; urls_host_id_url_key.
SELECT u.watch_exact, coalesce(s.watch_exact, false) AS site_watch_exact
FROM urls AS u LEFT JOIN sites AS s ON s.id = u.site_id
WHERE u.url = $1 AND u.host_id = crawler_url_host_id($1);

-- name: site_exact
-- Whether window $1 (its root URL) is watched exactly; sites_root_url_key.
SELECT watch_exact FROM sites WHERE root_url = $1;

-- name: export_wacz_records
-- `crawler export wacz`: every stored record since $1 (all when NULL), oldest first, with its
-- URL and the file of a revisit's original (a revisit replays only beside it); a cursor reads
-- the whole index by design (stored_records_file_idx is no help for a time range).
SELECT u.url, s.fetched_at, s.record_type, s.status, s.warc_file, o.warc_file AS original_file
FROM stored_records AS s
JOIN urls AS u ON u.id = s.url_id AND u.host_id = s.host_id
LEFT JOIN stored_records AS o
    ON o.url_id = s.url_id AND o.host_id = s.host_id AND o.record_id = s.refers_to
WHERE $1::timestamptz IS NULL OR s.fetched_at >= $1
ORDER BY s.fetched_at;

-- name: mark_damaged_at
-- The daemon found the record at ($1 file, $2 offset) unreadable ($3: why) while reading it
-- as a URL's previous version: its row is marked as `crawler verify --repair` marks one, and
-- its URL forgets its validators and content hash (its next fetch stores a full response).
WITH marked AS (
    UPDATE stored_records SET damaged = $3
    WHERE warc_file = $1 AND warc_offset = $2 AND damaged IS NULL
    RETURNING url_id, host_id
)
UPDATE urls AS u SET etag = NULL, last_modified = NULL, last_content_hash = NULL
FROM marked AS m
WHERE u.id = m.url_id AND u.host_id = m.host_id;

-- name: store_schedule_rule
-- `crawler bound`: the rule for a URL, pattern or host ($1 kind, $2 target): shortest $3 and
-- longest $4 interval in seconds (NULL: the crawler's setting), windows $5 ('' for none) and
-- their week spans $6 (url_bounds.parse_windows, flattened; NULL for none). set_at orders the
-- rules: the one set last wins for a URL several match (crawler_schedule_rule, migration
-- 0032). EXCLUDED's now(): schedule_rules is a Citus reference table (see heartbeat).
INSERT INTO schedule_rules (kind, target, min_interval_seconds, max_interval_seconds, windows,
                            window_spans, set_at)
VALUES ($1, $2, $3, $4, $5, $6, now())
ON CONFLICT (kind, target) DO UPDATE
SET min_interval_seconds = EXCLUDED.min_interval_seconds,
    max_interval_seconds = EXCLUDED.max_interval_seconds,
    windows = EXCLUDED.windows,
    window_spans = EXCLUDED.window_spans,
    set_at = EXCLUDED.set_at
RETURNING id;

-- name: delete_schedule_rule
-- `crawler bound --clear`: forget the rule for ($1 kind, $2 target).
DELETE FROM schedule_rules WHERE kind = $1 AND target = $2 RETURNING id;

-- name: schedule_rules
-- `crawler bound --list`: every rule, by kind and target.
SELECT kind, target, min_interval_seconds, max_interval_seconds, windows
FROM schedule_rules ORDER BY kind, target;

-- name: set_url_bounds
-- `crawler bound URL`: the URLs $1 take shortest interval $2 and longest $3 (seconds, NULL:
-- the crawler's setting) and windows $4 (NULL: none). The due time moves at once into the
-- new bounds, counted from the last attempt (crawler_bounded_due, migration 0032): a
-- year-long wait is cut to the longest interval and a due time sooner than the shortest after
-- the last attempt is put off. Parked window pages ('infinity') stay parked: their window
-- decides. Their hosts' due time is refreshed next (refresh_host_due).
UPDATE urls AS u
SET own_min_interval_seconds = $2, own_max_interval_seconds = $3, fetch_windows = $4,
    next_fetch_at = crawler_bounded_due(u.next_fetch_at, u.last_attempt_at, $2, $3, now())
FROM unnest($1::text[]) AS t(url)
WHERE u.url = t.url AND u.host_id = crawler_url_host_id(t.url)
RETURNING u.id, u.host_id, date_part('epoch', u.next_fetch_at) AS next_fetch_at;

-- name: set_pattern_bounds
-- `crawler bound --pattern REGEX`: set_url_bounds on every known URL the regular expression
-- $1 matches (a scan of urls, run by hand).
UPDATE urls AS u
SET own_min_interval_seconds = $2, own_max_interval_seconds = $3, fetch_windows = $4,
    next_fetch_at = crawler_bounded_due(u.next_fetch_at, u.last_attempt_at, $2, $3, now())
WHERE u.url ~ $1
RETURNING u.id, u.host_id, date_part('epoch', u.next_fetch_at) AS next_fetch_at;

-- name: set_host_bounds
-- `crawler bound --host ORIGIN`: set_url_bounds on every URL of host $1.
UPDATE urls AS u
SET own_min_interval_seconds = $2, own_max_interval_seconds = $3, fetch_windows = $4,
    next_fetch_at = crawler_bounded_due(u.next_fetch_at, u.last_attempt_at, $2, $3, now())
WHERE u.host_id = $1
RETURNING u.id, u.host_id, date_part('epoch', u.next_fetch_at) AS next_fetch_at;

-- name: apply_schedule_rules
-- `crawler bound --clear`: URLs $1 (ids, on hosts $2) take the rule now in force for them
-- (crawler_schedule_rule: another rule matching them, set last) or, with none, no bounds;
-- due times move into its bounds and its next window as a new URL's do (migration 0032).
UPDATE urls AS u
SET (own_min_interval_seconds, own_max_interval_seconds, fetch_windows, next_fetch_at) = (
    SELECT r.min_interval_seconds, r.max_interval_seconds, nullif(r.windows, ''),
           crawler_next_allowed(r.window_spans, crawler_bounded_due(
               u.next_fetch_at, u.last_attempt_at, r.min_interval_seconds,
               r.max_interval_seconds, now()))
    FROM (SELECT) AS one LEFT JOIN crawler_schedule_rule(u.url, u.host_id) AS r ON true)
FROM unnest($1::bigint[], $2::bigint[]) AS t(id, host_id)
WHERE u.id = t.id AND u.host_id = t.host_id
RETURNING u.id, u.host_id, date_part('epoch', u.next_fetch_at) AS next_fetch_at,
          u.own_min_interval_seconds, u.own_max_interval_seconds, u.fetch_windows;

-- name: valid_pattern
-- Whether PostgreSQL's ~ takes regular expression $1 (raises invalid_regular_expression),
-- before a rule holding it is stored: the triggers of migration 0032 run the stored patterns
-- on new URLs, where a bad one would fail every insert.
SELECT '' ~ $1::text;

-- name: sync_new_url_rules
-- After a rule is stored or removed: each new-URL trigger enabled while its rules exist (for
-- the hosts they can match), disabled while none do, once the transactions writing urls have
-- ended (crawler_sync_new_url_rules, migration 0032).
SELECT crawler_sync_new_url_rules();

-- name: move_due_times
-- `crawler bound --window`: URLs ($1 ids on hosts $3) due at $2 instead, the start of their
-- next allowed window (crawler.core.url_bounds.next_allowed).
UPDATE urls AS u SET next_fetch_at = t.due
FROM unnest($1::bigint[], $2::timestamptz[], $3::bigint[]) AS t(id, due, host_id)
WHERE u.id = t.id AND u.host_id = t.host_id AND u.host_id = ANY($3::bigint[])
RETURNING u.id;

-- name: sitemap_host
-- The host of a sitemap, made known if it is not: a host row with no URLs is never
-- ready (hosts.ready_at NULL), so only its lease and politeness clock are used, by the seeder.
-- Returns the origin the key holds, for the caller to refuse a colliding one.
WITH made AS (
    INSERT INTO hosts (id, origin) VALUES ($1, $2)
    ON CONFLICT (id) DO NOTHING
    RETURNING origin
)
SELECT origin FROM made
UNION ALL
SELECT origin FROM hosts WHERE id = $1;

-- name: sitemap_lease_host
-- Lease host $1 to the sitemap reader $2 for $3 seconds, as a daemon's claim would, when no
-- live lease holds it: while held no daemon sends the host a request (hosts.ready_at moves to
-- the lease's expiry). Returns the lease's epoch, the politeness clock, the Crawl-delay and
-- the cached robots.txt; no row when another holds it.
UPDATE hosts
SET lease_owner = $2, lease_expires_at = now() + make_interval(secs => $3),
    lease_epoch = lease_epoch + 1
WHERE id = $1 AND (lease_owner IS NULL OR lease_expires_at <= now())
RETURNING lease_epoch, paused, refused_reason, crawl_delay_seconds,
          date_part('epoch', next_request_at) AS next_request_at,
          date_part('epoch', backoff_until) AS backoff_until,
          robots_body, robots_status,
          date_part('epoch', robots_fetched_at) AS robots_fetched_at,
          date_part('epoch', robots_good_at) AS robots_good_at,
          date_part('epoch', robots_expires_at) AS robots_expires_at,
          date_part('epoch', robots_unreachable_since) AS robots_unreachable_since;

-- name: sitemap_hold_host
-- After a request under the sitemap reader's lease ($1 host, $2 owner, $3 epoch): the host's
-- politeness clock moves to $4 (epoch seconds; never back) and the lease is extended by $5
-- seconds, or dropped when $6. Returns the host when the lease still held.
UPDATE hosts
SET next_request_at = GREATEST(next_request_at, to_timestamp($4)),
    lease_owner = CASE WHEN $6 THEN NULL ELSE lease_owner END,
    lease_expires_at = CASE WHEN $6 THEN NULL ELSE now() + make_interval(secs => $5) END
WHERE id = $1 AND lease_owner = $2 AND lease_epoch = $3
RETURNING id;

-- name: sitemap_record
-- One sitemap or feed as last read ($1: a sitemaps row as JSON, read_at and last_modified in
-- epoch seconds); keyed by (host_id, url).
WITH r AS (
    SELECT * FROM jsonb_to_record($1::jsonb) AS r(
        host_id bigint, url text, robots_origin text, kind text, depth integer,
        read_at double precision, status smallint, listed integer, added integer,
        rejected integer, cut text, error text, etag text, last_modified double precision)
)
INSERT INTO sitemaps (host_id, url, robots_origin, kind, depth, read_at, status, listed,
                      added, rejected, cut, error, etag, last_modified)
SELECT host_id, url, robots_origin, kind, depth, to_timestamp(read_at), status, listed, added,
       rejected, cut, error, etag, to_timestamp(last_modified)
FROM r
WHERE host_id = ($1::jsonb ->> 'host_id')::bigint
ON CONFLICT (host_id, url) DO UPDATE
SET robots_origin = COALESCE(excluded.robots_origin, sitemaps.robots_origin),
    kind = excluded.kind, depth = excluded.depth, read_at = excluded.read_at,
    status = excluded.status, listed = excluded.listed, added = excluded.added,
    rejected = excluded.rejected, cut = excluded.cut, error = excluded.error,
    etag = excluded.etag, last_modified = excluded.last_modified;

-- name: record_url_hints
-- Dates sitemaps and feeds claimed for known URLs ($1 URLs, $2 their host ids, $3 kinds, $4
-- claimed dates in epoch seconds, $5 source files; each (URL, kind, date, source) once),
-- seen at $6; $7 the distinct host ids of $2, which route the statement to their nodes (a
-- whole $2 there would be searched once per joined row). A claim read again only moves its
-- seen_at. URLs not (or no longer) known are skipped. The caller locks the hosts first
-- (indexnow_lock_hosts), as a fetch's record does, and refreshes the returned hosts' due
-- times after the commit.
-- Every date read counts for its (host, source) in hint_trust
-- (dates; stamped_now when within $8[1] seconds of the read), and a claim not recorded before
-- announces a change: a page whose source is trusted as complete, changed after its last
-- fetch, becomes due (with the probability crawler_announced_fetch_probability gives;
-- otherwise it waits $8[2] announcement intervals, within
-- the plan's longest interval); a noisy source's first announcement since the last fetch
-- brings an untimed page's fetch forward (crawler_hinted_fetch_time); an ignored source moves
-- nothing. A source whose dates turn out stamped "now" loses its trust here, and its complete
-- pages fall back to their own schedule (url_hint_state.planned_at) at once. $8[3], $8[4]: the
-- prior (shape, rate in days) when no plan is stored. Returns the hosts whose URLs moved.
WITH plan AS MATERIALIZED (
    SELECT mu, objective, complete_sampled, prior_shape, prior_rate,
           min_interval_seconds, max_interval_seconds
    FROM plans ORDER BY version DESC LIMIT 1
),
prior AS MATERIALIZED (
    SELECT coalesce((SELECT prior_shape FROM plan), ($8::float8[])[3]) AS shape,
           coalesce((SELECT prior_rate FROM plan), ($8::float8[])[4]) AS rate
),
given AS MATERIALIZED (
    SELECT u.host_id, u.id AS url_id, t.kind, to_timestamp(t.claimed) AS claimed_at,
           t.claimed, t.source, u.last_fetched_at
    FROM unnest($1::text[], $2::bigint[], $3::text[], $4::float8[], $5::text[])
        AS t(url, host_id, kind, claimed, source)
    -- One probe of urls_host_id_url_key per claim, as in sitemap_listed_ids: a join let the
    -- planner (no statistics on a table just seeded) hash every URL of the host per batch.
    CROSS JOIN LATERAL (
        SELECT id, host_id, last_fetched_at FROM urls
        WHERE host_id = t.host_id AND url = t.url
        ORDER BY host_id, url LIMIT 1
    ) AS u
    WHERE u.host_id = ANY($7::bigint[])
),
hinted AS (
    INSERT INTO url_hints (host_id, url_id, kind, claimed_at, source, seen_at)
    SELECT host_id, url_id, kind, claimed_at, source, to_timestamp($6) FROM given
    ON CONFLICT (host_id, url_id, kind, claimed_at, source) DO UPDATE SET seen_at = excluded.seen_at
),
trusted_before AS MATERIALIZED (
    SELECT host_id, source, classification FROM hint_trust WHERE host_id = ANY($7::bigint[])
),
dated AS MATERIALIZED (
    INSERT INTO hint_trust AS t (host_id, source, dates, stamped_now, dated_at)
    SELECT host_id, kind, count(*),
           count(*) FILTER (WHERE abs(claimed - $6::float8) <= ($8::float8[])[1]), to_timestamp($6)
    FROM given
    GROUP BY host_id, kind
    ON CONFLICT (host_id, source) DO UPDATE
        SET dates = t.dates + excluded.dates, stamped_now = t.stamped_now + excluded.stamped_now,
            dated_at = excluded.dated_at
    RETURNING t.host_id, t.source, t.classification, t.recall_mean, t.false_alarm_mean
),
state AS (
    INSERT INTO url_hint_state (host_id, url_id, hints_since)
    SELECT DISTINCT host_id, url_id, to_timestamp($6) FROM given
    ON CONFLICT (host_id, url_id) DO NOTHING
),
fresh AS MATERIALIZED (
    -- Claims not recorded before (from any file): announcements. A page never fetched has
    -- nothing for them to announce against (and seeding brings 10^5 such pages at a time).
    SELECT g.host_id, g.url_id, g.kind, max(g.claimed_at) AS claimed_at
    FROM given AS g
    WHERE g.last_fetched_at IS NOT NULL AND NOT EXISTS (
        SELECT 1 FROM url_hints AS h
        WHERE h.host_id = g.host_id AND h.url_id = g.url_id AND h.kind = g.kind
          AND h.claimed_at = g.claimed_at)
    GROUP BY g.host_id, g.url_id, g.kind
),
announced AS MATERIALIZED (
    SELECT f.host_id, f.url_id, f.kind, u.next_fetch_at, u.last_fetched_at,
           t.classification, t.recall_mean, t.false_alarm_mean, u.change_rate_per_day,
           u.update_period_days, u.importance,
           coalesce(u.own_max_interval_seconds, p.max_interval_seconds) AS longest_seconds,
           p.complete_sampled, p.mu, p.objective, p.min_interval_seconds,
           -- The page's rate of announcements, (α + announced) / (β + days watched).
           ((SELECT shape FROM prior) + (
                SELECT count(DISTINCT h.claimed_at) FROM url_hints AS h
                WHERE h.host_id = f.host_id AND h.url_id = f.url_id AND h.kind = f.kind
                  AND h.claimed_at > coalesce(s.hints_since, 'infinity')) + 1)
            / ((SELECT rate FROM prior)
               + greatest($6::float8 - extract(epoch FROM coalesce(s.hints_since,
                                                                  to_timestamp($6)))::float8,
                          0.0) / 86400.0) AS announced_rate,
           EXISTS (
               SELECT 1 FROM url_hints AS h
               WHERE h.host_id = f.host_id AND h.url_id = f.url_id AND h.kind = f.kind
                 AND h.claimed_at > u.last_fetched_at) AS hinted_before
    FROM fresh AS f
    JOIN urls AS u ON u.id = f.url_id AND u.host_id = f.host_id
    JOIN dated AS t ON t.host_id = f.host_id AND t.source = f.kind
    LEFT JOIN url_hint_state AS s ON s.host_id = f.host_id AND s.url_id = f.url_id
    LEFT JOIN plan AS p ON true
    WHERE u.host_id = ANY($7::bigint[])
      AND f.claimed_at > u.last_fetched_at AND isfinite(u.next_fetch_at)
      AND t.classification IN ('complete', 'noisy')
),
decided AS (
    SELECT a.host_id, a.url_id, CASE
        WHEN a.classification = 'complete' THEN CASE
            WHEN random() < crawler_announced_fetch_probability(
                a.announced_rate, a.importance, a.longest_seconds, a.complete_sampled, a.mu,
                a.objective, a.min_interval_seconds)
            THEN least(a.next_fetch_at, to_timestamp($6))
            -- Not this time: the page waits for the next announcement, $8[2] of its intervals
            -- at most, and never longer than its longest interval after its last fetch.
            WHEN a.next_fetch_at > to_timestamp($6) THEN to_timestamp(least(
                $6::float8 + 86400.0 * ($8::float8[])[2] / a.announced_rate,
                extract(epoch FROM a.last_fetched_at)::float8 + a.longest_seconds))
            ELSE a.next_fetch_at END
        WHEN NOT a.hinted_before AND a.update_period_days IS NULL
             AND a.change_rate_per_day > 0 THEN
            least(a.next_fetch_at, to_timestamp(crawler_hinted_fetch_time(
                extract(epoch FROM a.last_fetched_at)::float8,
                extract(epoch FROM a.next_fetch_at)::float8,
                a.change_rate_per_day, $6::float8, a.recall_mean, a.false_alarm_mean)))
        END AS due
    FROM announced AS a
),
fallen AS (
    -- Complete sources whose dates this read found stamped "now": their pages fall back.
    SELECT DISTINCT h.host_id, h.url_id,
           greatest(s.planned_at, to_timestamp($6)) AS due
    FROM dated AS d
    JOIN trusted_before AS b ON b.host_id = d.host_id AND b.source = d.source
    JOIN url_hints AS h ON h.host_id = d.host_id AND h.kind = d.source
    JOIN url_hint_state AS s ON s.host_id = h.host_id AND s.url_id = h.url_id
    WHERE b.classification = 'complete' AND d.classification <> 'complete'
      AND h.host_id = ANY($7::bigint[]) AND s.planned_at IS NOT NULL
),
target AS (
    SELECT host_id, url_id, min(due) AS due, bool_or(fell) AS fell
    FROM (SELECT host_id, url_id, due, false AS fell FROM decided WHERE due IS NOT NULL
          UNION ALL SELECT host_id, url_id, due, true FROM fallen) AS d
    GROUP BY host_id, url_id
),
moved AS (
    UPDATE urls AS u
    SET next_fetch_at = CASE WHEN t.fell THEN least(u.next_fetch_at, t.due) ELSE t.due END
    FROM target AS t
    WHERE u.id = t.url_id AND u.host_id = t.host_id AND u.host_id = ANY($7::bigint[])
      AND u.next_fetch_at IS DISTINCT FROM t.due
    RETURNING u.host_id, u.next_fetch_at
),
host_due AS (
    UPDATE hosts AS h SET next_due_at = least(h.next_due_at, m.due)
    FROM (SELECT host_id, min(next_fetch_at) AS due FROM moved GROUP BY host_id) AS m
    WHERE h.id = m.host_id AND h.id = ANY($7::bigint[])
)
SELECT DISTINCT host_id FROM moved;

-- name: url_hints_of
-- `crawler show`: the dates sitemaps and feeds claimed for URL $1 of host $2, newest claim
-- first, at most $3.
SELECT kind, claimed_at, source, seen_at
FROM url_hints
WHERE url_id = $1 AND host_id = $2
ORDER BY claimed_at DESC, kind, source
LIMIT $3;

-- name: remove_url_hints
-- The hints of URLs just removed ($1 ids, $2 their host ids), as remove_observations.
DELETE FROM url_hints AS h
USING unnest($1::bigint[], $2::bigint[]) AS r(url_id, host_id)
WHERE h.url_id = r.url_id AND h.host_id = r.host_id AND h.host_id = ANY($2::bigint[]);

-- name: host_sitemaps
-- `crawler sites`: the sitemaps and feeds read for hosts $1, by host then URL.
SELECT h.origin, s.url, s.robots_origin, s.kind, s.depth, s.read_at, s.status, s.listed,
       s.added, s.rejected, s.cut, s.error, s.dropped, s.source, s.found_on, s.changed_at,
       s.next_read_at, s.repaired, s.reads, s.changes, s.change_rate_per_day
FROM sitemaps AS s
JOIN hosts AS h ON h.id = s.host_id
WHERE s.host_id = ANY($1::bigint[])
ORDER BY h.origin, s.depth, s.url;

-- name: register_warc_file
-- A WARC file $1 opened by a daemon on machine $2 in directory $3, before the first index row
-- naming it commits (crawler.store.collect): where `crawler get` elsewhere finds it.
INSERT INTO warc_files (name, machine, directory)
VALUES ($1, $2, $3)
ON CONFLICT (name) DO NOTHING;

-- name: warc_file_home
-- The machine and directory that hold WARC file $1 (none for a file no daemon registered).
SELECT machine, directory FROM warc_files WHERE name = $1;

-- name: indexnow_lock_hosts
-- An IndexNow ping's hosts ($1), locked in id order until its URLs are written
-- (indexnow_pinged): a host before its URLs, as record_fetches locks them, so that a ping and
-- a daemon recording a fetch of the same URL wait for each other instead of deadlocking.
SELECT id FROM hosts WHERE id = ANY($1::bigint[]) ORDER BY id FOR NO KEY UPDATE;

-- name: indexnow_pinged
-- The known URLs of an IndexNow ping with a verified key ($1 URLs, $2 their host ids) due at
-- $3 (crawler.core.indexnow.due_after_ping), or sooner if they already were, each with a hint
-- (kind 'updated', claimed at $3, source $4), and their hosts due by $3 too; $5 the distinct
-- host ids of $2, which route the statement (as in record_url_hints). Only due times move:
-- the hosts' politeness clocks, backoff and leases still time the fetches. How many URLs were
-- made due; URLs not known are skipped.
-- The hint is of kind 'ping', and the host's trust in its pings (hint_trust, source
-- 'ping') gates what it does. A host whose pings have been tested on fewer than $6 announced
-- fetch intervals is taken at its word (due at $3: the fetch after the ping is its test); one
-- whose pings are complete makes the URL due (with the probability
-- crawler_announced_fetch_probability gives);
-- noisy, its first ping since the last fetch brings an untimed page forward
-- (crawler_hinted_fetch_time); ignored, the schedule stays. A URL never fetched is due at $3.
-- $7, $8: the prior (shape, rate in days) when no plan is stored, for the page's rate of
-- announcements.
WITH plan AS MATERIALIZED (
    SELECT mu, objective, complete_sampled, prior_shape, prior_rate,
           min_interval_seconds, max_interval_seconds
    FROM plans ORDER BY version DESC LIMIT 1
),
found AS MATERIALIZED (
    SELECT u.id, u.host_id, u.next_fetch_at, u.last_fetched_at, u.importance,
           u.change_rate_per_day, u.update_period_days,
           coalesce(u.own_max_interval_seconds, pl.max_interval_seconds) AS longest_seconds,
           pl.complete_sampled, pl.mu, pl.objective, pl.min_interval_seconds,
           t.classification, t.recall_mean, t.false_alarm_mean,
           coalesce(t.hits + t.false_alarms, 0) AS announced_tests,
           ((coalesce((SELECT prior_shape FROM plan), $7::float8) + 1 + (
                SELECT count(DISTINCT h.claimed_at) FROM url_hints AS h
                WHERE h.host_id = u.host_id AND h.url_id = u.id AND h.kind = 'ping'
                  AND h.claimed_at > coalesce(s.hints_since, 'infinity')))
            / (coalesce((SELECT prior_rate FROM plan), $8::float8)
               + greatest(extract(epoch FROM $3::timestamptz - coalesce(s.hints_since, $3)),
                          0)::float8 / 86400.0)) AS announced_rate,
           EXISTS (
               SELECT 1 FROM url_hints AS h
               WHERE h.host_id = u.host_id AND h.url_id = u.id AND h.kind = 'ping'
                 AND h.claimed_at > u.last_fetched_at) AS hinted_before
    FROM unnest($1::text[], $2::bigint[]) AS p(url, host_id)
    JOIN urls AS u ON u.url = p.url AND u.host_id = p.host_id
    LEFT JOIN hint_trust AS t ON t.host_id = u.host_id AND t.source = 'ping'
    LEFT JOIN url_hint_state AS s ON s.host_id = u.host_id AND s.url_id = u.id
    LEFT JOIN plan AS pl ON true
    WHERE u.host_id = ANY($5::bigint[])
),
decided AS (
    SELECT f.id, f.host_id, CASE
        WHEN f.last_fetched_at IS NULL OR f.announced_tests < $6 THEN
            least(f.next_fetch_at, $3::timestamptz)
        WHEN f.classification = 'complete' THEN CASE
            WHEN random() < crawler_announced_fetch_probability(
                f.announced_rate, f.importance, f.longest_seconds, f.complete_sampled, f.mu,
                f.objective, f.min_interval_seconds)
            THEN least(f.next_fetch_at, $3::timestamptz)
            ELSE f.next_fetch_at END
        WHEN f.classification = 'noisy' AND NOT f.hinted_before
             AND f.update_period_days IS NULL AND f.change_rate_per_day > 0
             AND isfinite(f.next_fetch_at) THEN
            least(f.next_fetch_at, to_timestamp(crawler_hinted_fetch_time(
                extract(epoch FROM f.last_fetched_at)::float8,
                extract(epoch FROM f.next_fetch_at)::float8, f.change_rate_per_day,
                extract(epoch FROM $3::timestamptz)::float8, f.recall_mean,
                f.false_alarm_mean)))
        ELSE f.next_fetch_at END AS due
    FROM found AS f
),
pinged AS (
    UPDATE urls AS u SET next_fetch_at = d.due
    FROM decided AS d
    WHERE u.id = d.id AND u.host_id = d.host_id AND u.host_id = ANY($5::bigint[])
      AND d.due < u.next_fetch_at
    RETURNING u.id, u.host_id, u.next_fetch_at
),
state AS (
    INSERT INTO url_hint_state (host_id, url_id, hints_since)
    SELECT host_id, id, $3::timestamptz FROM found
    ON CONFLICT (host_id, url_id) DO NOTHING
),
hinted AS (
    INSERT INTO url_hints (host_id, url_id, kind, claimed_at, source, seen_at)
    SELECT host_id, id, 'ping', $3::timestamptz, $4::text, $3::timestamptz FROM found
    ON CONFLICT (host_id, url_id, kind, claimed_at, source) DO UPDATE
        SET seen_at = excluded.seen_at
),
moved AS (
    UPDATE hosts AS h SET next_due_at = LEAST(h.next_due_at, m.due)
    FROM (SELECT host_id, min(next_fetch_at) AS due FROM pinged GROUP BY host_id) AS m
    WHERE h.id = m.host_id AND h.id = ANY($5::bigint[])
)
SELECT count(*) FROM decided WHERE due <= $3::timestamptz;

-- name: claim_due_sitemaps
-- The sitemap reader (crawler.daemon.sitemaps): up to $1 sitemaps and feeds due to be read
-- again, by sitemaps_next_read_idx, claimed for $2 seconds (their next_read_at moves there,
-- so no other reader claims them meanwhile) under a new fencing epoch, which their record
-- (sitemap_read_record) must still hold. Times in epoch seconds.
WITH due AS (
    SELECT host_id, url
    FROM sitemaps
    WHERE next_read_at <= now()
    ORDER BY next_read_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
)
UPDATE sitemaps AS s
SET next_read_at = now() + make_interval(secs => $2), lease_epoch = s.lease_epoch + 1
FROM due JOIN hosts AS h ON h.id = due.host_id
WHERE s.host_id = due.host_id AND s.url = due.url
RETURNING s.host_id, h.origin, s.url, s.robots_origin, s.kind, s.depth, s.source, s.found_on,
          s.lease_epoch, s.etag, date_part('epoch', s.last_modified) AS last_modified,
          date_part('epoch', s.answered_at) AS answered_at, s.digest, s.reads, s.changes,
          s.consecutive_failures, s.changed_intervals_days, s.unchanged_days,
          s.intervals_observed, s.change_rate_per_day, s.listed;

-- name: sitemaps_next_due
-- When the next sitemap falls due (epoch seconds; NULL when none is scheduled): the reader's
-- idle wake, one entry of sitemaps_next_read_idx.
SELECT date_part('epoch', min(next_read_at)) FROM sitemaps WHERE next_read_at IS NOT NULL;

-- name: sitemap_postpone
-- A claimed sitemap ($1 host, $2 URL, $3 the claim's epoch) not read now (its host busy, or
-- waiting out a backoff): due at $4 (epoch seconds) instead.
UPDATE sitemaps SET next_read_at = to_timestamp($4)
WHERE host_id = $1 AND url = $2 AND lease_epoch = $3;

-- name: sitemap_state
-- The schedule's state of the sitemap $2 of host $1 (as claim_due_sitemaps returns it), for
-- the seeder, which reads it outside any claim.
SELECT s.host_id, s.url, s.robots_origin, s.kind, s.depth, s.source, s.found_on,
       s.lease_epoch, s.etag, date_part('epoch', s.last_modified) AS last_modified,
       date_part('epoch', s.answered_at) AS answered_at, s.digest, s.reads, s.changes,
       s.consecutive_failures, s.changed_intervals_days, s.unchanged_days,
       s.intervals_observed, s.change_rate_per_day, s.listed
FROM sitemaps AS s
WHERE s.host_id = $1 AND s.url = $2;

-- name: sitemap_read_record
-- A sitemap or feed after a read ($1 host, $2 URL; $3 the reader's claim epoch, NULL for the
-- seeder; $4 the row's new values as JSON, times in epoch seconds, digest in hex). What a
-- read leaves unknown (JSON null) keeps its value: the kind and validators after a 304, the
-- counts of URLs listed, added and dropped after a read that did not change the listing.
-- Returns the row when written (the claim still held).
WITH r AS (
    SELECT * FROM jsonb_to_record($4::jsonb) AS r(
        kind text, source text, found_on text, read_at double precision, status smallint,
        listed integer, added integer, dropped integer, rejected integer, cut text,
        error text, etag text, last_modified double precision, next_read_at double precision,
        answered_at double precision, digest text, changed boolean, repaired integer,
        reads integer, changes integer, consecutive_failures integer,
        changed_intervals_days double precision[], unchanged_days double precision,
        intervals_observed integer, change_rate_per_day double precision,
        read_rate_per_day double precision)
)
UPDATE sitemaps AS s
SET kind = COALESCE(r.kind, s.kind), source = COALESCE(s.source, r.source),
    found_on = COALESCE(s.found_on, r.found_on), read_at = to_timestamp(r.read_at),
    status = r.status, listed = COALESCE(r.listed, s.listed),
    added = COALESCE(r.added, s.added), dropped = COALESCE(r.dropped, s.dropped),
    rejected = COALESCE(r.rejected, s.rejected), cut = r.cut, error = r.error,
    etag = r.etag, last_modified = to_timestamp(r.last_modified),
    next_read_at = to_timestamp(r.next_read_at), answered_at = to_timestamp(r.answered_at),
    digest = decode(r.digest, 'hex'),
    changed_at = CASE WHEN r.changed THEN to_timestamp(r.read_at) ELSE s.changed_at END,
    repaired = COALESCE(r.repaired, s.repaired), reads = r.reads, changes = r.changes,
    consecutive_failures = r.consecutive_failures,
    changed_intervals_days = r.changed_intervals_days, unchanged_days = r.unchanged_days,
    intervals_observed = r.intervals_observed,
    change_rate_per_day = r.change_rate_per_day, read_rate_per_day = r.read_rate_per_day
FROM r
WHERE s.host_id = $1 AND s.url = $2 AND ($3::bigint IS NULL OR s.lease_epoch = $3::bigint)
RETURNING s.url;

-- name: sitemap_new_listings
-- Of the URLs sitemap $1 lists now ($2, with their host ids $3; $4 the distinct ones, which
-- route the statement), those it did not list at its last read: to be seeded (new URLs join
-- the collection, a gone one is asked for again) before sitemap_list records them.
SELECT t.url
FROM unnest($2::text[], $3::bigint[]) AS t(url, host_id)
LEFT JOIN LATERAL (  -- one probe of urls_host_id_url_key per URL, as in sitemap_listed_ids
    SELECT id, host_id FROM urls
    WHERE host_id = t.host_id AND url = t.url
    ORDER BY host_id, url LIMIT 1
) AS u ON u.host_id = ANY($4::bigint[])
LEFT JOIN LATERAL (  -- and one probe of sitemap_urls_pkey, not a scan of every listing
    SELECT true AS listed FROM sitemap_urls AS m
    WHERE m.host_id = u.host_id AND m.url_id = u.id AND m.sitemap_id = $1
    LIMIT 1
) AS m ON true
WHERE m.listed IS NULL;

-- name: sitemap_listed_ids
-- The known URLs of a sitemap's listing ($1 URLs, $2 their host ids, $3 the distinct ones,
-- which route the statement): their ids and hosts. One probe of urls_host_id_url_key per URL,
-- whatever the host's size or the statistics of a table just seeded (ordered as that index
-- is, so that no other is chosen); a URL not known (refused when seeded) is skipped.
SELECT u.id, u.host_id
FROM unnest($1::text[], $2::bigint[]) AS t(url, host_id)
CROSS JOIN LATERAL (
    SELECT id, host_id FROM urls
    WHERE host_id = t.host_id AND url = t.url
    ORDER BY host_id, url LIMIT 1
) AS u
WHERE u.host_id = ANY($3::bigint[]);

-- name: sitemap_members
-- What sitemap $1 listed at its last read, on hosts $2 (sitemap_urls_pkey).
SELECT url_id, host_id FROM sitemap_urls WHERE host_id = ANY($2::bigint[]) AND sitemap_id = $1;

-- name: unlisted_ids
-- The URLs of hosts $1 flagged unlisted (urls_unlisted_idx): few, whatever the hosts' size.
SELECT id, host_id FROM urls WHERE host_id = ANY($1::bigint[]) AND unlisted_at IS NOT NULL;

-- name: sitemap_list
-- Sitemap $1 lists URLs $2 (ids, on hosts $3; $4 the distinct hosts) it did not list before;
-- those flagged unlisted ($5 ids, $6 their hosts) lose the flag.
WITH listed AS (
    INSERT INTO sitemap_urls (host_id, sitemap_id, url_id)
    SELECT host_id, $1, url_id FROM unnest($2::bigint[], $3::bigint[]) AS t(url_id, host_id)
    WHERE host_id = ANY($4::bigint[])
    ON CONFLICT (host_id, sitemap_id, url_id) DO NOTHING
)
UPDATE urls AS u SET unlisted_at = NULL
FROM unnest($5::bigint[], $6::bigint[]) AS r(id, host_id)
WHERE u.id = r.id AND u.host_id = r.host_id AND u.host_id = ANY($4::bigint[]);

-- name: sitemap_unlist
-- Sitemap $1 no longer lists URLs $2 (ids, on hosts $3; $4 the distinct hosts): forgotten,
-- and each that no other sitemap lists any more (one probe of sitemap_urls_url_idx per URL)
-- flagged unlisted at $5 (epoch seconds). Returns how many were flagged.
WITH gone AS (
    DELETE FROM sitemap_urls AS m
    USING unnest($2::bigint[], $3::bigint[]) AS d(url_id, host_id)
    WHERE m.host_id = d.host_id AND m.sitemap_id = $1 AND m.url_id = d.url_id
      AND m.host_id = ANY($4::bigint[])
    RETURNING m.host_id, m.url_id
),
flagged AS (
    UPDATE urls AS u SET unlisted_at = to_timestamp($5)
    FROM gone AS g
    LEFT JOIN LATERAL (
        SELECT true AS kept FROM sitemap_urls AS o
        WHERE o.host_id = g.host_id AND o.url_id = g.url_id AND o.sitemap_id <> $1
        LIMIT 1
    ) AS other ON true
    WHERE u.id = g.url_id AND u.host_id = g.host_id AND u.host_id = ANY($4::bigint[])
      AND u.unlisted_at IS NULL AND other.kept IS NULL
    RETURNING u.id
)
SELECT count(*) FROM flagged;

-- name: sitemap_register
-- Sitemaps found by reading an index or a page ($1 their host ids, $2 their URLs; $3 the
-- origin whose robots.txt vouches for them, $4 their depth, $5 how they were found, $6 the
-- file or page that named them), due at once; each host holds at most $7 sitemaps. Their
-- hosts exist (sitemap_host). Returns those that were new.
INSERT INTO sitemaps (host_id, url, robots_origin, depth, source, found_on, next_read_at)
SELECT t.host_id, t.url, $3::text, $4::integer, $5::text, $6::text, now()
FROM unnest($1::bigint[], $2::text[]) AS t(host_id, url)
WHERE t.host_id = ANY($1::bigint[])
  AND (SELECT count(*) FROM sitemaps AS s WHERE s.host_id = t.host_id) < $7::integer
ON CONFLICT (host_id, url) DO NOTHING
RETURNING url;

-- name: register_page_feeds
-- Feeds a page of host $1 announces ($2 their URLs, on the page's host; $3 the page): each a
-- sitemap of kind feed for the host, due at once, when the host is read through sitemaps
-- already (seeded with --sitemaps or --sitemap), at most $4 of them per host.
INSERT INTO sitemaps (host_id, url, depth, source, found_on, next_read_at)
SELECT $1::bigint, t.url, 0, 'page', $3::text, now()
FROM unnest($2::text[]) AS t(url)
WHERE EXISTS (SELECT 1 FROM sitemaps
              WHERE host_id = $1::bigint AND source IS DISTINCT FROM 'page')
  AND (SELECT count(*) FROM sitemaps WHERE host_id = $1::bigint AND source = 'page')
      < $4::integer
ON CONFLICT (host_id, url) DO NOTHING;

-- name: forget_sitemaps
-- The sitemaps index $2 (on a host of $1) named and no longer lists ($3 those it lists now):
-- gone, with what they listed; each URL they listed that no other sitemap of its host lists
-- any more ($4 the hosts their URLs are on) is flagged unlisted at $5 (epoch seconds).
-- Returns the sitemaps forgotten and their kinds (an index's own ones follow).
WITH gone AS (
    DELETE FROM sitemaps AS s
    WHERE s.host_id = ANY($1::bigint[]) AND s.source = 'index' AND s.found_on = $2
      AND NOT (s.url = ANY($3::text[]))
    RETURNING s.url, s.kind, crawler_host_id(s.url) AS sitemap_id
),
dropped AS (
    DELETE FROM sitemap_urls AS m
    USING gone
    WHERE m.sitemap_id = gone.sitemap_id AND m.host_id = ANY($4::bigint[])
    RETURNING m.host_id, m.url_id
),
unlisted AS (
    UPDATE urls AS u SET unlisted_at = to_timestamp($5)
    FROM (SELECT DISTINCT host_id, url_id FROM dropped) AS d
    LEFT JOIN LATERAL (
        SELECT true AS kept FROM sitemap_urls AS o
        WHERE o.host_id = d.host_id AND o.url_id = d.url_id
          AND o.sitemap_id <> ALL (ARRAY(SELECT sitemap_id FROM gone))
        LIMIT 1
    ) AS other ON true
    WHERE u.id = d.url_id AND u.host_id = d.host_id AND u.host_id = ANY($4::bigint[])
      AND u.unlisted_at IS NULL AND other.kept IS NULL
    RETURNING u.id
)
SELECT g.url, g.kind, (SELECT count(*) FROM unlisted) AS unlisted FROM gone AS g;

-- name: sitemap_host_ids
-- `crawler sites`: the hosts that have sitemaps (a listing, by design).
SELECT DISTINCT s.host_id FROM sitemaps AS s ORDER BY s.host_id;

-- name: unlisted_counts
-- `crawler sites`: of hosts $1, how many URLs no sitemap lists any more (urls_unlisted_idx).
SELECT host_id, count(*) AS unlisted
FROM urls
WHERE host_id = ANY($1::bigint[]) AND unlisted_at IS NOT NULL
GROUP BY host_id;

-- name: remove_sitemap_urls
-- What sitemaps listed of the URLs just removed ($1 ids, $2 their host ids), as
-- remove_observations (sitemap_urls has no foreign key: its check cost a third of recording
-- a listing).
DELETE FROM sitemap_urls AS m
USING unnest($1::bigint[], $2::bigint[]) AS r(url_id, host_id)
WHERE m.url_id = r.url_id AND m.host_id = r.host_id AND m.host_id = ANY($2::bigint[]);

-- name: hint_sources_at_fetch
-- crawler.db.hints.test_fetches: for the fetches of URLs with hints ($1 hosts, $2
-- URLs, $3 the fetch times in epoch seconds; each row joined on its own host), each source of
-- each URL's hints, its announcements since the URL's hints are watched up to the fetch, and
-- since when they are watched: what the p0 of the fetch interval's test is computed from
-- (crawler.core.hint_trust.null_changed_probability).
SELECT i.url_id, h.kind AS source,
       count(DISTINCT h.claimed_at) FILTER (
           WHERE h.claimed_at > s.hints_since AND h.claimed_at <= to_timestamp(i.at))
           AS announced,
       date_part('epoch', s.hints_since) AS hints_since
FROM unnest($1::bigint[], $2::bigint[], $3::float8[]) AS i(host_id, url_id, at)
JOIN url_hint_state AS s ON s.host_id = i.host_id AND s.url_id = i.url_id
JOIN url_hints AS h ON h.host_id = s.host_id AND h.url_id = s.url_id
GROUP BY i.url_id, h.kind, s.hints_since;

-- name: test_hints
-- crawler.db.hints.test_fetches, in the transaction of a batch of fetch records,
-- after record_fetches: the fetches of URLs with hints that saw a change verdict ($1 hosts,
-- $2 URLs, $3 the previous fetch in epoch seconds, NULL when there is none or the page is
-- timed by its clock (its intervals test nothing of a source), $4 this fetch, $5 whether it saw
-- a change, $6 the next fetch its own schedule gave it; $7 the distinct hosts of $1, which route
-- the statement: the joins that follow are on each row's own host, not on $7 again, which
-- an index probe per row would search whole). Each URL's pending test, the fetch interval before this one, is tested
-- against each of its sources (the sources it had then): did the source date a change inside
-- it, and did the fingerprint see one (hits, false alarms, misses, quiet in hint_trust, with
-- the p0 computed for the test when its interval ended, over the announced and the silent
-- intervals). The test comes one fetch late so that announcements read after the fetch still
-- count. A changed interval in which a source that dates only the last change (lastmod,
-- updated) is silent but already dates a change after it is not tested: the date of the
-- change inside may have been overwritten before it was read (docs/MODEL.md section 9.2).
-- This fetch's interval becomes the pending test, with its p0 per source ($9, a JSON
-- array of {url_id, source, p0}), and its planned next fetch is kept (what a trust drop falls back to).
-- A page a complete source observes waits for its announcements: its next fetch is put off to
-- $8[2] of its announcement intervals ((α $8[3] + announced) / (β $8[4] + days watched)), within its
-- longest interval ($8[1] seconds, or its own bound), never sooner than planned; a host released
-- in the batch gets its due time again. Returns the (host, source) rows tested, with their
-- counts, for crawler.core.hint_trust.assess.
WITH item AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::float8[], $4::float8[], $5::bool[],
                         $6::float8[]) AS i(host_id, url_id, start_s, end_s, changed, planned_s)
),
priors AS MATERIALIZED (
    SELECT p.url_id, array_agg(p.source ORDER BY p.source) AS sources,
           array_agg(p.p0 ORDER BY p.source) AS p0
    FROM jsonb_to_recordset($9::jsonb) AS p(url_id bigint, source text, p0 float8)
    GROUP BY p.url_id
),
state AS MATERIALIZED (
    SELECT i.*, s.hints_since, s.test_start, s.test_end, s.test_changed, s.test_sources,
           s.test_p0, p.sources AS new_sources, p.p0 AS new_p0
    FROM item AS i
    JOIN url_hint_state AS s ON s.host_id = i.host_id AND s.url_id = i.url_id
    LEFT JOIN priors AS p ON p.url_id = i.url_id
    WHERE s.host_id = ANY($7::bigint[])
),
source AS MATERIALIZED (
    SELECT s.host_id, s.url_id, h.kind AS source,
           (($8::float8[])[3] + count(DISTINCT h.claimed_at) FILTER (WHERE h.claimed_at > s.hints_since))
            / (($8::float8[])[4] + greatest(s.end_s - extract(epoch FROM s.hints_since)::float8, 0.0)
               / 86400.0) AS announced_rate,
           coalesce(bool_or(h.claimed_at > s.test_start AND h.claimed_at <= s.test_end), false)
               AS announced,
           coalesce(bool_or(h.claimed_at > s.test_end), false) AS dated_later
    FROM state AS s
    JOIN url_hints AS h ON h.host_id = s.host_id AND h.url_id = s.url_id
    GROUP BY s.host_id, s.url_id, h.kind, s.hints_since, s.end_s, s.test_start, s.test_end
),
tested AS (
    SELECT src.host_id, src.source,
           count(*) FILTER (WHERE src.announced AND s.test_changed) AS hits,
           count(*) FILTER (WHERE src.announced AND NOT s.test_changed) AS false_alarms,
           count(*) FILTER (WHERE NOT src.announced AND s.test_changed) AS misses,
           count(*) FILTER (WHERE NOT src.announced AND NOT s.test_changed) AS quiet,
           coalesce(sum(p.p0) FILTER (WHERE src.announced), 0.0) AS expected_hinted,
           coalesce(sum(p.p0) FILTER (WHERE NOT src.announced), 0.0) AS expected_silent
    FROM source AS src
    JOIN state AS s ON s.host_id = src.host_id AND s.url_id = src.url_id
    JOIN LATERAL unnest(s.test_sources, s.test_p0) AS p(source, p0) ON p.source = src.source
    WHERE s.test_start IS NOT NULL AND s.test_changed IS NOT NULL
      -- A change the source dated only by the last change (lastmod, a feed's updated) and
      -- already dated past the interval, with no date inside it, may have had its date
      -- overwritten before it was read: no test, rather than a miss.
      AND (src.announced OR NOT s.test_changed OR NOT src.dated_later
           OR src.source NOT IN ('lastmod', 'updated'))
    GROUP BY src.host_id, src.source
),
counted AS (
    INSERT INTO hint_trust AS t (host_id, source, hits, false_alarms, misses, quiet,
                                 expected_hinted, expected_silent, tested_at)
    SELECT host_id, source, hits, false_alarms, misses, quiet, expected_hinted, expected_silent,
           now()
    FROM tested
    ON CONFLICT (host_id, source) DO UPDATE
        SET hits = t.hits + excluded.hits, false_alarms = t.false_alarms + excluded.false_alarms,
            misses = t.misses + excluded.misses, quiet = t.quiet + excluded.quiet,
            expected_hinted = t.expected_hinted + excluded.expected_hinted,
            expected_silent = t.expected_silent + excluded.expected_silent,
            tested_at = excluded.tested_at
    RETURNING t.host_id, t.source, t.hits, t.false_alarms, t.misses, t.quiet,
              t.expected_hinted, t.expected_silent, t.tested_class
),
pending AS (
    UPDATE url_hint_state AS u
    SET test_start = to_timestamp(s.start_s), test_end = to_timestamp(s.end_s),
        test_changed = s.changed, planned_at = to_timestamp(s.planned_s),
        test_sources = s.new_sources, test_p0 = s.new_p0
    FROM state AS s
    WHERE u.host_id = s.host_id AND u.url_id = s.url_id
),
complete AS (
    SELECT src.host_id, src.url_id, max(src.announced_rate) AS rate
    FROM source AS src
    JOIN hint_trust AS t ON t.host_id = src.host_id AND t.source = src.source
    WHERE t.classification = 'complete'
    GROUP BY src.host_id, src.url_id
),
pushed AS (
    UPDATE urls AS u
    SET next_fetch_at = greatest(u.next_fetch_at, to_timestamp(s.end_s + least(
        86400.0 * ($8::float8[])[2] / c.rate, coalesce(u.own_max_interval_seconds, ($8::float8[])[1]))))
    FROM complete AS c
    JOIN state AS s ON s.host_id = c.host_id AND s.url_id = c.url_id
    WHERE u.id = c.url_id AND u.host_id = c.host_id AND isfinite(u.next_fetch_at)
    RETURNING u.host_id, u.id, u.next_fetch_at
),
host_due AS (
    UPDATE hosts AS h
    SET next_due_at = least(p.next_fetch_at, (
        SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id AND id <> p.id))
    FROM pushed AS p
    WHERE h.id = p.host_id AND h.lease_owner IS NULL
)
SELECT host_id, source, hits, false_alarms, misses, quiet, expected_hinted, expected_silent,
       tested_class
FROM counted;

-- name: assess_hint_trust
-- The assessment of (host, source) rows test_hints just counted, made by
-- crawler.core.hint_trust.assess in Python ($1 hosts, $2 sources, $3 classifications of the
-- tests, $4 precision, $5 recall, $6 false-alarm posterior means, $7 reasons; $8 the distinct
-- hosts; $9 as test_hints' $8: the longest interval in seconds, the announcement intervals a
-- complete page waits, the prior's shape and rate in days). When a source's classification
-- changes, its pages move at once: a page of a source no longer complete falls back to the next
-- fetch its own schedule planned (now if that is past); a page of a source now complete that
-- announced a change since its last fetch is due now, and any other waits for its announcements
-- as test_hints makes it wait after a fetch ($9[2] of its announcement intervals after its last
-- fetch, within its longest interval, never sooner than planned): the planner charges a complete
-- page only the fetches its announcements bring, so the blind fetch its incomplete schedule
-- planned would come on top of the budget. Run in the fetches' transaction: the hosts are the
-- batch's, locked by record_fetches. Returns the (host, source) whose classification changed.
WITH given AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::float8[], $5::float8[],
                         $6::float8[], $7::text[])
        AS g(host_id, source, tested_class, precision_mean, recall_mean, false_alarm_mean,
             reason)
),
before AS MATERIALIZED (
    SELECT t.host_id, t.source, t.classification
    FROM hint_trust AS t
    JOIN given AS g ON g.host_id = t.host_id AND g.source = t.source
    WHERE t.host_id = ANY($8::bigint[])
),
after AS (
    UPDATE hint_trust AS t
    SET tested_class = g.tested_class, precision_mean = g.precision_mean,
        recall_mean = g.recall_mean, false_alarm_mean = g.false_alarm_mean, reason = g.reason
    FROM given AS g
    WHERE t.host_id = g.host_id AND t.source = g.source AND t.host_id = ANY($8::bigint[])
    RETURNING t.host_id, t.source, t.classification
),
changed AS MATERIALIZED (
    SELECT a.host_id, a.source, b.classification AS was, a.classification AS now
    FROM after AS a
    JOIN before AS b ON b.host_id = a.host_id AND b.source = a.source
    WHERE a.classification IS DISTINCT FROM b.classification
      AND (a.classification = 'complete' OR b.classification = 'complete')
),
candidate AS (
    SELECT DISTINCT u.host_id, u.id, u.next_fetch_at, u.last_fetched_at,
           u.own_max_interval_seconds, c.was, c.source, s.planned_at, s.hints_since
    FROM changed AS c
    JOIN url_hints AS h ON h.host_id = c.host_id AND h.kind = c.source
    JOIN urls AS u ON u.id = h.url_id AND u.host_id = h.host_id
    JOIN url_hint_state AS s ON s.host_id = u.host_id AND s.url_id = u.id
    WHERE h.host_id = ANY($8::bigint[])
),
target AS (
    SELECT d.host_id, d.id, min(d.due) AS due, bool_and(d.put_off) AS put_off
    FROM candidate AS k
    CROSS JOIN LATERAL (
        SELECT k.host_id, k.id, CASE
            WHEN k.was = 'complete' THEN greatest(k.planned_at, now())
            WHEN EXISTS (
                SELECT 1 FROM url_hints AS n
                WHERE n.host_id = k.host_id AND n.url_id = k.id AND n.kind = k.source
                  AND n.claimed_at > k.last_fetched_at) THEN now()
            WHEN k.last_fetched_at IS NOT NULL AND isfinite(k.next_fetch_at) THEN greatest(
                k.next_fetch_at, k.last_fetched_at + make_interval(secs => least(
                    86400.0 * ($9::float8[])[2] * (($9::float8[])[4] + greatest(
                        extract(epoch FROM now() - k.hints_since)::float8, 0.0) / 86400.0)
                    / (($9::float8[])[3] + (
                        SELECT count(DISTINCT n.claimed_at) FROM url_hints AS n
                        WHERE n.host_id = k.host_id AND n.url_id = k.id
                          AND n.kind = k.source AND n.claimed_at > k.hints_since)),
                    coalesce(k.own_max_interval_seconds, ($9::float8[])[1]))))
            END AS due,
            k.was <> 'complete' AS put_off
    ) AS d
    WHERE d.due IS NOT NULL
    GROUP BY d.host_id, d.id
),
moved AS (
    UPDATE urls AS u SET next_fetch_at = t.due
    FROM target AS t
    WHERE u.id = t.id AND u.host_id = t.host_id AND u.host_id = ANY($8::bigint[])
      AND (t.due < u.next_fetch_at OR (t.put_off AND t.due > u.next_fetch_at))
    RETURNING u.host_id, u.next_fetch_at
),
host_due AS (
    UPDATE hosts AS h SET next_due_at = least(h.next_due_at, m.due)
    FROM (SELECT host_id, min(next_fetch_at) AS due FROM moved GROUP BY host_id) AS m
    WHERE h.id = m.host_id AND h.id = ANY($8::bigint[])
)
SELECT host_id, source, was, now FROM changed;

-- name: remove_url_hint_state
-- The hint state of URLs just removed ($1 ids, $2 their host ids), as
-- remove_url_hints.
DELETE FROM url_hint_state AS s
USING unnest($1::bigint[], $2::bigint[]) AS r(url_id, host_id)
WHERE s.url_id = r.url_id AND s.host_id = r.host_id AND s.host_id = ANY($2::bigint[]);

-- name: hinted_urls
-- Which URLs of a batch of fetches have hints ($1 hosts, $2 URLs; $3 the distinct
-- hosts, which route the statement): only their fetches are tested (test_hints), so that a
-- batch without any costs this one probe of url_hint_state's key and no more.
SELECT s.url_id
FROM unnest($1::bigint[], $2::bigint[]) AS i(host_id, url_id)
JOIN url_hint_state AS s ON s.host_id = i.host_id AND s.url_id = i.url_id
WHERE s.host_id = ANY($3::bigint[]);

-- name: explain_url
-- `crawler explain URL` ($1): the URL's row as crawler.db.frontier.record_from_row reads it
-- (times in epoch seconds), its schedule, its host's politeness state and its hint state.
SELECT u.id AS url_id, u.url, u.host_id, u.state, u.importance,
       date_part('epoch', u.last_fetched_at) AS last_fetched_at, u.last_status, u.last_simhash,
       u.last_content_hash, u.etag, date_part('epoch', u.last_modified) AS last_modified,
       u.fetch_count, u.change_count, u.consecutive_failures, u.changed_intervals_days,
       u.unchanged_days, u.intervals_observed, u.change_rate_per_day, u.change_brackets_days,
       u.update_period_days, u.update_phase_days, u.update_jitter_days, u.site_id, u.depth,
       u.lm_fetches, u.lm_changes, u.lm_observed_days, u.lm_evidence_days,
       u.own_min_interval_seconds, u.own_max_interval_seconds, u.fetch_windows,
       u.fetch_rate_per_day, date_part('epoch', u.next_fetch_at) AS next_fetch_at,
       date_part('epoch', coalesce(u.last_attempt_at, u.last_fetched_at)) AS last_attempt_at,
       u.last_outcome, h.origin, date_part('epoch', h.next_request_at) AS host_next_request_at,
       date_part('epoch', h.backoff_until) AS host_backoff_until, h.crawl_delay_seconds,
       h.paused, h.lease_owner, date_part('epoch', h.lease_expires_at) AS host_lease_expires_at,
       date_part('epoch', s.hints_since) AS hints_since,
       date_part('epoch', s.planned_at) AS planned_at
FROM urls AS u
JOIN hosts AS h ON h.id = u.host_id
LEFT JOIN url_hint_state AS s ON s.host_id = u.host_id AND s.url_id = u.id
WHERE u.url = $1 AND u.host_id = crawler_url_host_id($1);

-- name: explain_hint_sources
-- `crawler explain`: each source of URL $1's hints (on host $2): its claims, the announcements
-- since the URL's hints are watched ($3, epoch seconds) up to its last fetch ($4), whether one
-- dates a change after that fetch and when the first such was read, with the host's trust in
-- the source (hint_trust; NULLs when nothing was counted yet).
SELECT c.source, c.claims, c.announced_at_fetch, c.announced_since_fetch,
       date_part('epoch', c.first_seen_since_fetch) AS first_seen_since_fetch,
       t.hits, t.false_alarms, t.misses, t.quiet, t.expected_hinted, t.expected_silent,
       t.dates, t.stamped_now, t.classification, t.tested_class
FROM (
    SELECT h.kind AS source, count(*) AS claims,
           count(DISTINCT h.claimed_at) FILTER (
               WHERE h.claimed_at > to_timestamp($3::float8)
                 AND h.claimed_at <= to_timestamp($4::float8)) AS announced_at_fetch,
           coalesce(bool_or(h.claimed_at > to_timestamp($4::float8)), false)
               AS announced_since_fetch,
           min(h.seen_at) FILTER (WHERE h.claimed_at > to_timestamp($4::float8))
               AS first_seen_since_fetch
    FROM url_hints AS h
    WHERE h.url_id = $1 AND h.host_id = $2
    GROUP BY h.kind
) AS c
LEFT JOIN hint_trust AS t ON t.host_id = $2 AND t.source = c.source
ORDER BY c.source;

-- name: complete_in_sample
-- The planner: which URLs of its sample ($1 hosts, $2 URLs; $3 the distinct hosts)
-- a source trusted as complete observes, each with its rate of announcements,
-- (α $4 + announced) / (β $5 + days watched): a complete page's change rate.
SELECT s.url_id,
       ($4::float8 + count(DISTINCT h.claimed_at) FILTER (WHERE h.claimed_at > s.hints_since))
        / ($5::float8 + greatest(extract(epoch FROM now() - s.hints_since)::float8, 0.0)
           / 86400.0) AS announced_rate
FROM unnest($1::bigint[], $2::bigint[]) AS i(host_id, url_id)
JOIN url_hint_state AS s ON s.host_id = i.host_id AND s.url_id = i.url_id
JOIN url_hints AS h ON h.host_id = s.host_id AND h.url_id = s.url_id
JOIN hint_trust AS t ON t.host_id = h.host_id AND t.source = h.kind
WHERE s.host_id = ANY($3::bigint[]) AND t.classification = 'complete'
GROUP BY s.url_id, s.hints_since;

-- name: host_reads_sitemaps
-- Whether host $1 is read through its sitemaps (it has a row in sitemaps: seeded with
-- --sitemaps or --sitemap, or a file of it found since): the Sitemap: lines a re-read of its
-- robots.txt adds then join as its sitemaps (crawler.db.sitemaps.follow_robots).
SELECT EXISTS (SELECT 1 FROM sitemaps WHERE host_id = $1::bigint);

-- name: sitemap_list_new
-- A sitemap's listing when it listed nothing before and no URL of its hosts is flagged
-- unlisted (apply_listing: its first read, nearly always): the known URLs of $2 (their host
-- ids $3; $4 the distinct ones, which route the statement) recorded as listed by sitemap $1,
-- one probe of urls_host_id_url_key per URL, with no ids sent back and forth. Returns how
-- many.
WITH listed AS (
    INSERT INTO sitemap_urls (host_id, sitemap_id, url_id)
    SELECT u.host_id, $1::bigint, u.id
    FROM unnest($2::text[], $3::bigint[]) AS t(url, host_id)
    CROSS JOIN LATERAL (
        SELECT id, host_id FROM urls
        WHERE host_id = t.host_id AND url = t.url
        ORDER BY host_id, url LIMIT 1
    ) AS u
    WHERE u.host_id = ANY($4::bigint[])
    ON CONFLICT (host_id, sitemap_id, url_id) DO NOTHING
    RETURNING 1
)
SELECT count(*) FROM listed;
