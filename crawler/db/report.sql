-- The reads of `crawler report` and `crawler plan --from-db`, each under a "-- name: <key>"
-- header (parsed by crawler.db.queries.parse_queries). Read-only; times are POSIX seconds.

-- name: url_histories
-- One row per URL fetched successfully at least once: its first and last successful fetch
-- and the estimated times of the changes detected. Only ok / not_modified fetches see the
-- content, so the previous fetch of a change is the previous one of those. A change
-- happened in (previous fetch, this fetch]: Last-Modified places it when it falls in that
-- bracket, otherwise the bracket's midpoint stands for it.
WITH fetches AS (
    SELECT url_id, fetched_at, changed, last_modified,
           lag(fetched_at) OVER (PARTITION BY url_id ORDER BY fetched_at) AS previous_at
    FROM observations
    WHERE outcome IN ('ok', 'not_modified')
),
estimated AS (
    SELECT url_id, fetched_at, changed,
           CASE
               WHEN last_modified > previous_at AND last_modified <= fetched_at THEN last_modified
               ELSE coalesce(previous_at + (fetched_at - previous_at) / 2, fetched_at)
           END AS change_at
    FROM fetches
)
SELECT url_id,
       extract(epoch FROM min(fetched_at))::float8 AS first_seconds,
       extract(epoch FROM max(fetched_at))::float8 AS last_seconds,
       count(*) FILTER (WHERE changed) AS change_count,
       coalesce(
           array_agg(extract(epoch FROM change_at)::float8 ORDER BY fetched_at)
               FILTER (WHERE changed),
           '{}'
       ) AS change_seconds
FROM estimated
GROUP BY url_id
ORDER BY url_id;

-- name: planner_choices
-- The estimator's working change rates and the revisit intervals the planner chose.
SELECT
    coalesce(array_agg(change_rate_per_day) FILTER (WHERE change_rate_per_day > 0), '{}')
        AS change_rates_per_day,
    coalesce(array_agg(1.0 / fetch_rate_per_day) FILTER (WHERE fetch_rate_per_day > 0), '{}')
        AS revisit_intervals_days
FROM urls;

-- name: host_summaries
-- Per host, from its observations alone so that every figure of a row describes the same
-- fetches: URLs, fetches (every outcome), detected changes, and the days its URLs were
-- watched (each URL's first to last successful fetch, summed). The $1 busiest hosts.
-- Observations are keyed by (url_id, host_id), as urls are.
WITH per_url AS (
    SELECT host_id, url_id,
           count(*) AS fetches,
           count(*) FILTER (WHERE changed) AS changes,
           extract(epoch FROM
               max(fetched_at) FILTER (WHERE outcome IN ('ok', 'not_modified'))
               - min(fetched_at) FILTER (WHERE outcome IN ('ok', 'not_modified'))
           )::float8 AS watched_seconds
    FROM observations
    GROUP BY host_id, url_id
)
SELECT h.origin,
       count(u.id) AS urls,
       coalesce(sum(p.fetches), 0)::bigint AS fetches,
       coalesce(sum(p.changes), 0)::bigint AS changes,
       coalesce(sum(p.watched_seconds), 0)::float8 / 86400.0 AS watched_days
FROM hosts AS h
JOIN urls AS u ON u.host_id = h.id
LEFT JOIN per_url AS p ON p.url_id = u.id AND p.host_id = u.host_id
GROUP BY h.id, h.origin
ORDER BY fetches DESC, h.origin
LIMIT $1;

-- name: report_totals
SELECT (SELECT count(*) FROM hosts) AS hosts,
       (SELECT count(*) FROM urls) AS urls,
       (SELECT count(*) FROM observations) AS observations,
       (SELECT count(*) FROM observations WHERE changed) AS changes;
