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
    RETURNING h.id, h.origin, h.crawl_delay_seconds, h.lease_expires_at,
              h.consecutive_failures AS host_failures, h.backoff_until, h.robots_body,
              h.robots_status, h.robots_fetched_at, h.robots_good_at, h.robots_expires_at,
              h.robots_unreachable_since
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
       lh.lease_expires_at AS host_lease_expires_at, lh.host_failures, lh.backoff_until,
       lh.robots_body, lh.robots_status, lh.robots_fetched_at, lh.robots_good_at,
       lh.robots_expires_at, lh.robots_unreachable_since,
       lu.id AS url_id, lu.url, lu.state, lu.importance, lu.next_fetch_at, lu.last_fetched_at,
       lu.last_status, lu.last_simhash, lu.last_content_hash, lu.etag, lu.last_modified,
       lu.fetch_count, lu.change_count, lu.consecutive_failures, lu.changed_intervals_days,
       lu.unchanged_days, lu.intervals_observed, lu.change_rate_per_day,
       lu.change_brackets_days, lu.update_period_days, lu.update_phase_days,
       lu.update_jitter_days, lu.site_id, lu.depth
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
  AND (u.site_id IS NULL OR u.in_window)
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

-- name: upsert_site
INSERT INTO sites (root_url, window_size) VALUES ($1, $2)
ON CONFLICT (root_url) DO UPDATE SET window_size = EXCLUDED.window_size
RETURNING id;

-- name: attach_window_root
-- The root of a windowed site: depth 0, in the window, due now if it was parked.
UPDATE urls
SET site_id = $2, depth = 0, in_window = true, discovered_initially = true,
    entered_window_at = CASE WHEN in_window THEN entered_window_at ELSE now() END,
    left_window_at = NULL,
    next_fetch_at = LEAST(next_fetch_at, now())
WHERE url = $1;

-- name: discover_urls
-- Out-links of a windowed page: new URLs join the site parked (next fetch 'infinity') until the
-- window takes them in; known URLs are returned too (ids in input order via ordinality).
WITH input AS (
    SELECT url, host_id, ord
    FROM unnest($1::text[], $2::bigint[]) WITH ORDINALITY AS t(url, host_id, ord)
),
inserted AS (
    INSERT INTO urls (url, host_id, site_id, next_fetch_at, discovered_initially)
    SELECT url, host_id, $3, 'infinity', $4 FROM input
    ON CONFLICT (url) DO UPDATE SET site_id = COALESCE(urls.site_id, EXCLUDED.site_id)
    RETURNING id, url
)
SELECT i.id FROM input JOIN inserted AS i ON i.url = input.url ORDER BY input.ord;

-- name: out_links
SELECT to_url_id FROM links WHERE from_url_id = $1 ORDER BY position;

-- name: delete_out_links
DELETE FROM links WHERE from_url_id = $1;

-- name: insert_out_links
INSERT INTO links (from_url_id, to_url_id, position)
SELECT $1, to_id, pos FROM unnest($2::bigint[]) WITH ORDINALITY AS t(to_id, pos)
ON CONFLICT DO NOTHING;

-- name: site_root
SELECT s.window_size, u.id AS root_id
FROM sites AS s JOIN urls AS u ON u.url = s.root_url
WHERE s.id = $1;

-- name: site_graph
-- The site's observed link graph (urls_site_idx, then links' primary key).
SELECT l.from_url_id, l.to_url_id
FROM urls AS u JOIN links AS l ON l.from_url_id = u.id
WHERE u.site_id = $1
ORDER BY l.from_url_id, l.position;

-- name: site_members
SELECT id, state, depth, in_window FROM urls WHERE site_id = $1;

-- name: apply_window
-- New depths and memberships; a page entering is due now, a page leaving is parked.
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
        WHEN NOT t.inside AND u.in_window THEN 'infinity'
        ELSE u.next_fetch_at END
FROM unnest($1::bigint[], $2::int[], $3::bool[]) AS t(id, depth, inside)
WHERE u.id = t.id;

-- name: sites_summary
SELECT s.id, s.root_url, s.window_size, s.created_at,
       count(u.id) AS discovered,
       count(u.id) FILTER (WHERE u.in_window) AS in_window,
       count(u.id) FILTER (WHERE u.entered_window_at IS NOT NULL) AS entered,
       count(u.id) FILTER (WHERE u.left_window_at IS NOT NULL) AS left_window
FROM sites AS s LEFT JOIN urls AS u ON u.site_id = s.id
GROUP BY s.id ORDER BY s.root_url;

-- name: site_urls
SELECT u.url, u.depth, u.in_window, u.state, u.last_status, u.entered_window_at,
       u.left_window_at, u.last_fetched_at, u.fetch_count, u.change_count,
       u.discovered_initially, s.created_at AS site_created_at, now() AS observed_until
FROM urls AS u JOIN sites AS s ON s.id = u.site_id
WHERE s.root_url = $1
ORDER BY u.depth NULLS LAST, u.id;

-- name: store_robots
-- A host's robots.txt after a fetch of it, its Crawl-delay, and its politeness clock (the
-- robots.txt request counts as a request to the host).
UPDATE hosts
SET robots_body = $2, robots_status = $3, robots_fetched_at = $4, robots_good_at = $5,
    robots_expires_at = $6, robots_unreachable_since = $7, crawl_delay_seconds = $8,
    next_request_at = $9
WHERE id = $1;

-- name: recheck_disallowed
-- robots.txt changed: every URL it had disallowed is due again, to be judged by the new rules.
UPDATE urls SET next_fetch_at = LEAST(next_fetch_at, now())
WHERE host_id = $1 AND state = 'disallowed';

-- name: set_host_backoff
UPDATE hosts SET backoff_until = $2 WHERE id = $1;

-- name: hosts_health
SELECT count(*) FILTER (WHERE backoff_until > now()) AS in_backoff,
       count(*) FILTER (WHERE backoff_until > now() AND consecutive_failures >= $1)
           AS circuit_open
FROM hosts;

-- name: most_overdue_urls
SELECT url, next_fetch_at, EXTRACT(EPOCH FROM now() - next_fetch_at) AS overdue_seconds
FROM urls
WHERE next_fetch_at <= now()
ORDER BY next_fetch_at
LIMIT $1;

-- name: hosts_in_backoff
SELECT origin, backoff_until, consecutive_failures,
       robots_unreachable_since IS NOT NULL AS robots_unreachable
FROM hosts
WHERE backoff_until > now()
ORDER BY backoff_until DESC
LIMIT $1;
