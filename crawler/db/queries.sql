-- Every statement the frontier runs, each under a "-- name: <key>" header.
-- Parsed once by crawler/db/queries.py; callers say QUERIES["claim_due_work"].
-- Statements take arrays (unnest) where they act on many rows: one round trip per batch.

-- name: upsert_hosts
-- Register origins; a host's next_due_at only ever moves earlier here.
INSERT INTO hosts (origin, next_due_at)
SELECT origin, due
FROM unnest($1::text[], $2::timestamptz[]) AS t(origin, due)
ON CONFLICT (origin) DO UPDATE
    SET next_due_at = LEAST(hosts.next_due_at, EXCLUDED.next_due_at)
RETURNING id, origin;

-- name: insert_urls
-- Seed URLs; a URL already known keeps its state and schedule.
INSERT INTO urls (url, host_id, importance, next_fetch_at)
SELECT url, host_id, importance, due
FROM unnest($1::text[], $2::bigint[], $3::float8[], $4::timestamptz[])
    AS t(url, host_id, importance, due)
ON CONFLICT (url) DO NOTHING
RETURNING id;

-- name: claim_due_work
-- Lease up to $1 hosts that have due work, hold no live lease, are not backing off and whose
-- politeness delay has passed (hosts_next_due_at_idx), then lease up to $3 of each host's due
-- URLs, earliest first (urls_host_next_fetch_idx). A host is the unit of work: while one
-- daemon holds it no other daemon sends it a request. Returns one row per leased URL, and one
-- row with NULL url_id for a leased host whose due URLs are gone, so that it is released.
-- $2 owner, $4 lease seconds.
WITH ready_hosts AS (
    SELECT id
    FROM hosts
    WHERE next_due_at <= now()
      AND next_request_at <= now()
      AND (lease_expires_at IS NULL OR lease_expires_at < now())
      AND (backoff_until IS NULL OR backoff_until <= now())
    ORDER BY next_due_at
    LIMIT $1
    FOR UPDATE SKIP LOCKED
),
leased_hosts AS (
    UPDATE hosts AS h
    SET lease_owner = $2,
        lease_expires_at = now() + make_interval(secs => $4)
    FROM ready_hosts AS r
    WHERE h.id = r.id
    RETURNING h.id, h.origin, h.crawl_delay_seconds, h.lease_expires_at
),
due_urls AS (
    SELECT u.id, lh.lease_expires_at
    FROM leased_hosts AS lh
    CROSS JOIN LATERAL (
        SELECT id
        FROM urls
        WHERE host_id = lh.id
          AND next_fetch_at <= now()
          AND (lease_expires_at IS NULL OR lease_expires_at < now())
        ORDER BY next_fetch_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED
    ) AS u
),
leased_urls AS (
    UPDATE urls AS u
    SET lease_owner = $2,
        lease_expires_at = d.lease_expires_at
    FROM due_urls AS d
    WHERE u.id = d.id
    RETURNING u.*
)
SELECT lh.id AS host_id, lh.origin, lh.crawl_delay_seconds,
       lh.lease_expires_at AS host_lease_expires_at,
       lu.id AS url_id, lu.url, lu.state, lu.importance, lu.next_fetch_at, lu.last_fetched_at,
       lu.last_status, lu.last_simhash, lu.last_content_hash, lu.etag, lu.last_modified,
       lu.fetch_count, lu.change_count, lu.consecutive_failures, lu.changed_intervals_days,
       lu.unchanged_days, lu.intervals_observed, lu.change_rate_per_day,
       lu.change_brackets_days, lu.update_period_days, lu.update_phase_days,
       lu.update_jitter_days
FROM leased_hosts AS lh
LEFT JOIN leased_urls AS lu ON lu.host_id = lh.id
ORDER BY lh.id, lu.next_fetch_at;

-- name: record_fetch
-- One fetch's whole state change in one statement (hence one transaction): the observation,
-- the URL's new row and schedule with its lease released, and the host's politeness clock.
-- Values are absolute, and the observation is unique on (url_id, fetched_at): a commit
-- retried after a lost acknowledgement changes nothing.
WITH observation AS (
    INSERT INTO observations (
        url_id, fetched_at, outcome, status, bytes, duration_seconds, simhash, content_hash,
        simhash_distance, changed, content_changed, last_modified, error_kind, truncated
    )
    VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14)
    ON CONFLICT (url_id, fetched_at) DO NOTHING
    RETURNING id
),
url AS (
    UPDATE urls
    SET state = $15,
        next_fetch_at = $16,
        lease_owner = NULL,
        lease_expires_at = NULL,
        last_fetched_at = $33,
        last_status = $4,
        last_simhash = $17,
        last_content_hash = $18,
        etag = $19,
        last_modified = $20,
        fetch_count = $21,
        change_count = $22,
        consecutive_failures = $23,
        changed_intervals_days = $24,
        unchanged_days = $25,
        intervals_observed = $26,
        change_rate_per_day = $27,
        fetch_rate_per_day = $28,
        redirect_to = $29,
        change_brackets_days = $34,
        update_period_days = $35,
        update_phase_days = $36,
        update_jitter_days = $37
    WHERE id = $1
    RETURNING host_id
)
UPDATE hosts
SET next_request_at = $30,
    consecutive_failures = $31,
    backoff_until = $32
WHERE id = (SELECT host_id FROM url)
RETURNING (SELECT count(*) FROM observation) AS observations_written;

-- name: release_host
-- Give a host back: drop the leases this owner holds on it and its URLs, and recompute its
-- earliest due time from urls_host_next_fetch_idx.
WITH released_urls AS (
    UPDATE urls
    SET lease_owner = NULL, lease_expires_at = NULL
    WHERE host_id = $1 AND lease_owner = $2
    RETURNING id
)
UPDATE hosts AS h
SET lease_owner = NULL,
    lease_expires_at = NULL,
    next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id)
WHERE h.id = $1 AND h.lease_owner = $2
RETURNING (SELECT count(*) FROM released_urls) AS urls_released;

-- name: release_owner
-- Shutdown: give back every lease this owner still holds (urls_lease_owner_idx,
-- hosts_lease_owner_idx).
WITH released_urls AS (
    UPDATE urls SET lease_owner = NULL, lease_expires_at = NULL
    WHERE lease_owner = $1
    RETURNING id
)
UPDATE hosts AS h
SET lease_owner = NULL,
    lease_expires_at = NULL,
    next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id)
WHERE h.lease_owner = $1
RETURNING (SELECT count(*) FROM released_urls) AS urls_released;

-- name: refresh_host_due
-- Recompute next_due_at of hosts whose URLs were rescheduled in bulk (the planner).
UPDATE hosts AS h
SET next_due_at = (SELECT min(next_fetch_at) FROM urls WHERE host_id = h.id)
WHERE h.id = ANY($1::bigint[]);

-- name: earliest_due
-- When the next claim can succeed: the soonest moment a free host has due work.
SELECT min(GREATEST(next_due_at, next_request_at, COALESCE(backoff_until, '-infinity')))
FROM hosts
WHERE next_due_at IS NOT NULL
  AND (lease_expires_at IS NULL OR lease_expires_at < now());

-- name: status_counts
SELECT
    (SELECT count(*) FROM urls) AS urls,
    (SELECT count(*) FROM urls WHERE next_fetch_at <= now()) AS due_now,
    (SELECT count(*) FROM urls WHERE lease_owner IS NOT NULL) AS leased,
    (SELECT count(*) FROM hosts) AS hosts,
    (SELECT count(*) FROM hosts WHERE lease_owner IS NOT NULL
        AND lease_expires_at > now()) AS hosts_leased,
    (SELECT count(*) FROM observations
        WHERE fetched_at > now() - interval '1 hour') AS fetches_last_hour,
    (SELECT count(*) FROM observations
        WHERE fetched_at > now() - interval '1 hour' AND changed) AS changes_last_hour,
    (SELECT EXTRACT(EPOCH FROM now() - min(next_fetch_at)) FROM urls
        WHERE next_fetch_at <= now()) AS most_overdue_seconds;

-- name: urls_by_state
SELECT state, count(*) AS n FROM urls GROUP BY state ORDER BY state;

-- name: url_row
SELECT u.*, h.origin
FROM urls AS u JOIN hosts AS h ON h.id = u.host_id
WHERE u.url = $1;

-- name: url_observations
SELECT fetched_at, outcome, status, bytes, duration_seconds, simhash, simhash_distance,
       changed, content_changed, last_modified, error_kind, truncated
FROM observations
WHERE url_id = $1
ORDER BY fetched_at DESC
LIMIT $2;

-- name: planner_population
-- The planner's periodic batch read (not the hot path): every live URL with its estimate.
SELECT u.id, u.host_id, u.importance, u.change_rate_per_day, u.fetch_rate_per_day,
       u.last_fetched_at, u.next_fetch_at, h.crawl_delay_seconds
FROM urls AS u
JOIN hosts AS h ON h.id = u.host_id
WHERE u.state IN ('new', 'active', 'error')
ORDER BY u.id;

-- name: planner_histories
-- A bounded set of URLs with observed intervals, to fit the empirical-Bayes prior.
SELECT host_id, changed_intervals_days, unchanged_days, intervals_observed
FROM urls
WHERE intervals_observed > 0
LIMIT $1;

-- name: reschedule_urls
-- Apply new fetch rates in place; leased URLs are left to their fetcher.
UPDATE urls AS u
SET next_fetch_at = t.due, fetch_rate_per_day = t.rate
FROM unnest($1::bigint[], $2::timestamptz[], $3::float8[]) AS t(id, due, rate)
WHERE u.id = t.id AND u.lease_owner IS NULL
RETURNING u.host_id;

-- name: store_planner_state
INSERT INTO planner_state (key, value, updated_at)
SELECT key, value, now() FROM unnest($1::text[], $2::float8[]) AS t(key, value)
ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value, updated_at = now();

-- name: load_planner_state
SELECT key, value, updated_at FROM planner_state;

-- name: planner_lock
-- Only one daemon at a time solves μ; the others read what it stored.
SELECT pg_try_advisory_xact_lock(7271843002);

-- name: fetches_since
SELECT count(*) FROM observations WHERE fetched_at > now() - make_interval(secs => $1);
