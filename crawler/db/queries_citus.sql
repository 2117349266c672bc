-- The statements of queries.sql that Citus refuses, as Citus runs them: same names, same
-- parameters, same result columns. A connection to a database with the citus extension runs
-- them in place of the plain ones (crawler/db/queries.py, statements); plain PostgreSQL never
-- runs them.
-- Citus refuses row locks (FOR UPDATE, SKIP LOCKED) in a statement over several shards, and a
-- LATERAL ... LIMIT whose outer side is not a distributed table. So each variant takes its
-- row locks one host at a time, by the functions of migration 0014_citus_row_locks (a
-- one-shard statement each, in the order the plain statement locks in), then writes the
-- locked rows in one multi-shard statement of the same transaction. What they cost over the
-- plain ones is that statement per host, inside the database.
-- Every lock-taking function is called from a MATERIALIZED CTE: Citus then runs it once, on
-- the coordinator, before the statements that read its result.

-- name: claim_due_work
-- As queries.sql's: lease up to $1 ready hosts, then read up to $3 due URLs of each.
-- The pick reads 2 * $1 candidates in ready_at order without locking them (over every shard);
-- crawler_lock_ready_hosts then locks up to $1 of them still ready, skipping any another
-- claim holds, so that a claim never waits and two claims never lease one host. A claim that
-- loses more than $1 candidates to others leases fewer than $1 hosts this time (the plain
-- statement walks on in the index instead). The URLs are read by crawler_due_urls, one host
-- per statement (a statement over every shard costs Citus more than a few on one each).
WITH candidates AS MATERIALIZED (
    SELECT id
    FROM hosts
    WHERE ready_at <= now()
    ORDER BY ready_at
    LIMIT 2 * $1::bigint
),
ready_hosts AS MATERIALIZED (
    SELECT crawler_lock_ready_hosts(
        ARRAY(SELECT id FROM candidates), $1::bigint
    ) AS id
),
leased_hosts AS MATERIALIZED (
    UPDATE hosts AS h
    SET lease_owner = $2,
        lease_expires_at = now() + make_interval(secs => $4),
        lease_epoch = h.lease_epoch + 1
    WHERE h.id = ANY(ARRAY(SELECT id FROM ready_hosts))
    RETURNING h.id, h.origin, h.crawl_delay_seconds, h.lease_expires_at, h.lease_epoch,
              h.consecutive_failures AS host_failures, h.backoff_until, h.robots_body,
              h.robots_status, h.robots_fetched_at, h.robots_good_at, h.robots_expires_at,
              h.robots_unreachable_since
),
lu AS MATERIALIZED (
    SELECT * FROM crawler_due_urls(ARRAY(SELECT id FROM leased_hosts), $3::bigint)
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
       -- Whether the URL has change hints: not said here (a correlated look-up of
       -- another distributed table); the record looks it up (crawler.db.hints.hinted).
       NULL::boolean AS hinted
FROM leased_hosts AS lh
LEFT JOIN lu ON lu.host_id = lh.id
LEFT JOIN sites AS s ON s.id = lu.site_id
ORDER BY lh.id, lu.next_fetch_at, lu.id;

-- name: record_fetches
-- As queries.sql's (one fetch_record per fetch in $1, at most one per host, fenced per item,
-- host rows locked in host id order until commit, one row per item written), with the
-- per-host probe and lock done by crawler_lock_leases instead of a LATERAL ... LIMIT 1 FOR
-- UPDATE. Citus runs the CTEs one after the other in the transaction, so the host update's
-- look at the URLs may already see this item's new row: it is excluded by id either way.
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
    FROM unnest($1::fetch_record[]) AS i
),
lease AS MATERIALIZED (
    SELECT l.id
    FROM (SELECT array_agg(host_id) AS host_ids, array_agg(lease_owner) AS owners,
                 array_agg(lease_epoch) AS epochs
          FROM item) AS a
    CROSS JOIN LATERAL crawler_lock_leases(a.host_ids, a.owners, a.epochs) AS l(id)
),
held AS MATERIALIZED (
    SELECT i.* FROM item AS i WHERE i.host_id IN (SELECT id FROM lease)
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
-- As queries.sql's: give back each host of ($1, $2, $3) whose lease still holds, locked in id
-- order (crawler_lock_leases); the ids released.
WITH lease AS MATERIALIZED (
    SELECT l.id
    FROM crawler_lock_leases($1::bigint[], $2::text[], $3::bigint[]) AS l(id)
)
UPDATE hosts AS h
SET lease_owner = NULL,
    lease_expires_at = NULL,
    next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id)
FROM lease
WHERE h.id = lease.id
RETURNING h.id;

-- name: seed_hosts_from_staging
-- As queries.sql's, without locking the known hosts (a row lock over several shards is what
-- Citus refuses): on Citus the foreign key's checks always run (skip_redundant_checks below),
-- and they lock each URL's host on its shard.
WITH staged AS (
    SELECT s.host_id, s.origin, h.origin AS existing
    FROM seed_staging_hosts AS s
    LEFT JOIN hosts AS h ON h.id = s.host_id
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
-- Never on Citus: the checks run on the shards, which a setting of the coordinator's session
-- does not reach, and seed_hosts_from_staging does not lock the hosts there.
SELECT false AS skipped;

-- name: seed_urls_from_staging
-- As queries.sql's: the staged URLs not yet known, due at $1, in one insert; the known hosts
-- that gained a URL and are due later are moved to $1, locked in id order first
-- (crawler_lock_hosts_due_after) so that two seeders wait instead of deadlocking. Citus
-- inserts from the session's staging table through the coordinator (it is not distributed).
WITH inserted AS (
    INSERT INTO urls (url, host_id, importance, next_fetch_at)
    SELECT url, host_id, importance, $1::timestamptz
    FROM seed_staging
    ORDER BY host_id, url
    ON CONFLICT (url, host_id) DO NOTHING
    RETURNING host_id
),
to_move AS MATERIALIZED (
    SELECT m.id
    FROM crawler_lock_hosts_due_after(
        ARRAY(SELECT DISTINCT host_id FROM inserted), $1::timestamptz
    ) AS m(id)
),
moved AS (
    UPDATE hosts
    SET next_due_at = $1::timestamptz
    WHERE id IN (SELECT id FROM to_move)
)
SELECT count(*) FROM inserted;

-- name: refresh_host_due
-- As queries.sql's: recompute next_due_at of the hosts of $1 that no one holds locked
-- (crawler_lock_free_hosts skips the others: the planner never waits for the fetch loop);
-- the hosts updated.
WITH free AS MATERIALIZED (
    SELECT f.id FROM crawler_lock_free_hosts($1::bigint[]) AS f(id)
)
UPDATE hosts AS h
SET next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id)
FROM free
WHERE h.id = free.id
RETURNING h.id;

-- name: reschedule_urls
-- As queries.sql's: apply new schedules to the URLs not fetched since they were read, whose
-- host is not leased and that no one holds locked (crawler_lock_free_urls, SKIP LOCKED), and
-- not already due; a URL a complete source observes is only ever put off.
WITH t AS MATERIALIZED (
    SELECT * FROM unnest($1::bigint[], $2::timestamptz[], $3::float8[], $4::timestamptz[],
                         $5::float8[], $6::bigint[])
        AS t(id, due, rate, last_fetched_at, change_rate, host_id)
),
free AS MATERIALIZED (
    SELECT f.id, f.host_id
    FROM crawler_lock_free_urls($1::bigint[], $6::bigint[], $4::timestamptz[]) AS f
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

-- name: planner_sample
-- As queries.sql's: from each random start ($1) up to $3 live URLs upward, stopping at the
-- stratum's end ($2). crawler_sample_strata reads one stratum per statement: Citus runs each
-- one's ORDER BY id LIMIT on every shard, so it reads up to shards times $3 rows per stratum,
-- not $3.
SELECT stratum, id, host_id, importance, change_rate_per_day, changed_intervals_days,
       unchanged_days, intervals_observed, crawl_delay_seconds, own_min_interval_seconds,
       own_max_interval_seconds
FROM crawler_sample_strata($1::bigint[], $2::bigint[], $3::bigint);
