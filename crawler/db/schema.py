"""The schema as SQLAlchemy Core tables: created only by the Alembic revisions in
``migrations/``, and a test checks that the migrated database matches these definitions."""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    Computed,
    DateTime,
    Float,
    ForeignKey,
    ForeignKeyConstraint,
    Identity,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    PrimaryKeyConstraint,
    SmallInteger,
    Table,
    Text,
    UniqueConstraint,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION, JSONB

from crawler.core.model import UrlState

metadata = MetaData()

URL_STATES = tuple(state.value for state in UrlState)


def _one_of(column: str, values: tuple[str, ...], name: str) -> CheckConstraint:
    return CheckConstraint(f"{column} IN (" + ", ".join(f"'{v}'" for v in values) + ")",
                           name=name)

hosts = Table(
    "hosts",
    metadata,
    # crawler.core.hostid.host_id(origin), a hash of the origin, not a sequence, so that
    # daemons, seeders and shards agree on it alone.
    Column("id", BigInteger, primary_key=True, autoincrement=False),
    # scheme://host[:port]: the politeness unit (one request in flight, a delay between two).
    # Unique through the key (a hash of it); a colliding origin is refused when seeded.
    Column("origin", Text, nullable=False),
    # Earliest next_fetch_at of the host's URLs, kept up to date so that finding hosts with
    # due work is an index range scan instead of a scan of every URL.
    Column("next_due_at", DateTime(timezone=True), nullable=True),
    Column("next_request_at", DateTime(timezone=True), nullable=False,
           server_default=text("'-infinity'")),
    Column("crawl_delay_seconds", Float, nullable=True),
    Column("lease_owner", Text, nullable=True),
    Column("lease_expires_at", DateTime(timezone=True), nullable=True),
    Column("consecutive_failures", Integer, nullable=False, server_default=text("0")),
    Column("backoff_until", DateTime(timezone=True), nullable=True),
    # robots.txt (RFC 9309): the last good copy, when to fetch it again, and since when the
    # host has failed to serve it (a 5xx/timeout means complete disallow, up to 30 days).
    Column("robots_body", Text, nullable=True),
    Column("robots_status", SmallInteger, nullable=True),
    Column("robots_fetched_at", DateTime(timezone=True), nullable=True),
    Column("robots_good_at", DateTime(timezone=True), nullable=True),
    Column("robots_expires_at", DateTime(timezone=True), nullable=True),
    Column("robots_unreachable_since", DateTime(timezone=True), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # The last connection-level failure (tls_expired, dns, timeout_connect...), robots.txt
    # included, so that `crawler status` can say why a host is backed off.
    Column("last_error_kind", Text, nullable=True),
    Column("last_error_at", DateTime(timezone=True), nullable=True),
    # Fencing epoch: incremented at every claim; writes under an older epoch are rejected.
    Column("lease_epoch", BigInteger, nullable=False, server_default=text("0")),
    # Why the host cannot be fetched at all (the SSRF policy refused its address), and an
    # operator's pause (a paused host is never claimed).
    Column("refused_reason", Text, nullable=True),
    Column("paused", Boolean, nullable=False, server_default=text("false")),
    # When the host next may and should be claimed (due work, politeness, backoff, a live
    # lease's expiry); NULL when paused or without URLs. Generated, so every statement that
    # moves one of its inputs moves it; the claim walks its index in order.
    Column("ready_at", DateTime(timezone=True), Computed(
        "CASE WHEN paused OR next_due_at IS NULL THEN NULL "
        "ELSE GREATEST(next_due_at, next_request_at, backoff_until, lease_expires_at) END",
        persisted=True,
    ), nullable=True),
    Index("hosts_ready_at_idx", "ready_at", postgresql_where=text("ready_at IS NOT NULL")),
    Index("hosts_paused_idx", "origin", postgresql_where=text("paused")),
    # The most overdue host not paused (the backlog gauges), one entry.
    Index("hosts_unpaused_due_idx", "next_due_at", postgresql_where=text("NOT paused")),
    Index("hosts_lease_owner_idx", "lease_owner", postgresql_where=text("lease_owner IS NOT NULL")),
)

sites = Table(
    "sites",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("root_url", Text, nullable=False, unique=True),
    Column("window_size", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # The watched region of every page in the window without one of its own
    # (crawler.core.region): CSS selectors of the elements kept, and of those removed.
    Column("watch_css", Text, nullable=True),
    Column("ignore_css", Text, nullable=True),
    # Every page of the window without a rule of its own is watched exactly.
    Column("watch_exact", Boolean, nullable=False, server_default=text("false")),
    # URL patterns (crawler.core.patterns) the window's discovered links must match / must not
    # match, after the global CRAWLER_INCLUDE / CRAWLER_EXCLUDE.
    Column("include_patterns", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
    Column("exclude_patterns", ARRAY(Text), nullable=False, server_default=text("'{}'::text[]")),
)

urls = Table(
    "urls",
    metadata,
    # Keys include host_id: urls can be distributed on it, with its host.
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("url", Text(collation="C"), nullable=False),  # compared as bytes, not by locale
    Column("host_id", BigInteger, ForeignKey("hosts.id", ondelete="CASCADE"), nullable=False,
           primary_key=True),
    Column("state", Text, nullable=False, server_default=text("'new'")),
    Column("importance", Float, nullable=False, server_default=text("1.0")),
    Column("next_fetch_at", DateTime(timezone=True), nullable=False),
    Column("last_fetched_at", DateTime(timezone=True), nullable=True),
    Column("last_status", SmallInteger, nullable=True),
    Column("last_simhash", BigInteger, nullable=True),
    Column("last_content_hash", LargeBinary, nullable=True),
    Column("etag", Text, nullable=True),
    Column("last_modified", DateTime(timezone=True), nullable=True),
    Column("fetch_count", Integer, nullable=False, server_default=text("0")),
    Column("change_count", Integer, nullable=False, server_default=text("0")),
    Column("consecutive_failures", Integer, nullable=False, server_default=text("0")),
    # Sufficient statistics of the Poisson likelihood (crawler.core.estimate.ChangeHistory).
    Column("changed_intervals_days", ARRAY(DOUBLE_PRECISION), nullable=False,
           server_default=text("'{}'")),
    Column("unchanged_days", Float, nullable=False, server_default=text("0")),
    Column("intervals_observed", Integer, nullable=False, server_default=text("0")),
    Column("change_rate_per_day", Float, nullable=True),
    Column("fetch_rate_per_day", Float, nullable=True),
    # (start, end] brackets, in POSIX days, of the newest fetch intervals that saw a change,
    # flattened [s1, e1, s2, e2, ...]: the evidence for detecting a regular update period.
    Column("change_brackets_days", ARRAY(DOUBLE_PRECISION), nullable=False,
           server_default=text("'{}'")),
    # A detected regular update clock (crawler.core.periodic.PeriodicModel), if any.
    Column("update_period_days", Float, nullable=True),
    Column("update_phase_days", Float, nullable=True),
    Column("update_jitter_days", Float, nullable=True),
    Column("redirect_to", Text, nullable=True),
    # Page-window discovery (docs/MODEL.md section 7): the URL's site, BFS depth, discovery order
    # and window membership with the times it entered and left.
    Column("site_id", BigInteger, ForeignKey("sites.id", ondelete="SET NULL"), nullable=True),
    Column("depth", Integer, nullable=True),
    Column("in_window", Boolean, nullable=False, server_default=text("false")),
    Column("entered_window_at", DateTime(timezone=True), nullable=True),
    Column("left_window_at", DateTime(timezone=True), nullable=True),
    # Found on the first fetch of the page linking to it (or the root): it existed before
    # observation began, so its visible lifespan is censored at the start.
    Column("discovered_initially", Boolean, nullable=False, server_default=text("false")),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # Last-Modified evidence (crawler.core.last_modified): Cho & Garcia-Molina's statistics and
    # the recent (Last-Modified, fetched at) pairs, flattened, in POSIX days.
    Column("lm_fetches", Integer, nullable=False, server_default=text("0")),
    Column("lm_changes", Integer, nullable=False, server_default=text("0")),
    Column("lm_observed_days", Float, nullable=False, server_default=text("0")),
    Column("lm_evidence_days", ARRAY(DOUBLE_PRECISION), nullable=False,
           server_default=text("'{}'")),
    # The URL's own watched region (crawler.core.region), and the key of the region its
    # last_simhash was computed under ('' the whole page): a mismatch makes a new baseline.
    Column("watch_css", Text, nullable=True),
    Column("ignore_css", Text, nullable=True),
    Column("fingerprint_region", Text, nullable=False, server_default=text("''")),
    # Whether the page's out-links were read since it joined its site: until they are, it is
    # fetched without validators and parsed.
    Column("out_links_read", Boolean, nullable=False, server_default=text("false")),
    # Watched exactly (crawler watch --exact): any change of the visible text is a change,
    # judged by last_text_hash, the SHA-1 of that text as last fetched.
    Column("watch_exact", Boolean, nullable=False, server_default=text("false")),
    Column("last_text_hash", LargeBinary, nullable=True),
    # The watcher's own schedule in force for the URL (crawler bound): interval bounds in
    # seconds (NULL: the crawler's setting) and weekly fetch windows.
    Column("own_min_interval_seconds", Float, nullable=True),
    Column("own_max_interval_seconds", Float, nullable=True),
    Column("fetch_windows", Text, nullable=True),
    # The last fetch whatever its answer: last_fetched_at is the last one that brought
    # content, which the change estimator's intervals start from.
    Column("last_attempt_at", DateTime(timezone=True), nullable=True),
    Column("last_outcome", Text, nullable=True),
    # When no sitemap of its host listed it any more; NULL while one does, or none ever did.
    Column("unlisted_at", DateTime(timezone=True), nullable=True),
    _one_of("state", URL_STATES, "urls_state_check"),
    UniqueConstraint("host_id", "url", name="urls_host_id_url_key"),
    # The id too, so that a host's next due time without the URL just fetched is read from
    # the index alone.
    Index("urls_host_next_fetch_idx", "host_id", "next_fetch_at", postgresql_include=["id"]),
    Index("urls_site_idx", "site_id", postgresql_where=text("site_id IS NOT NULL")),
    # The few URLs no sitemap lists any more, by host.
    Index("urls_unlisted_idx", "host_id", postgresql_where=text("unlisted_at IS NOT NULL")),
    # A site's stored window, for the incremental update (crawler.db.windows).
    Index("urls_site_window_idx", "host_id", "site_id", "depth",
          postgresql_where=text("in_window")),
)

observations = Table(
    "observations",
    metadata,
    # A surrogate, not the key, filled from its owned sequence (bigserial), a default
    # reflection reads as autoincrement.
    Column("id", BigInteger, nullable=False),
    Column("url_id", BigInteger, nullable=False),
    Column("fetched_at", DateTime(timezone=True), nullable=False),  # partition key
    # ok, not_modified, gone, http_error, network_error, timeout, too_large, ...
    Column("outcome", Text, nullable=False),
    Column("status", SmallInteger, nullable=True),
    Column("bytes", Integer, nullable=False, server_default=text("0")),
    Column("duration_seconds", Float, nullable=False),
    Column("simhash", BigInteger, nullable=True),
    Column("content_hash", LargeBinary, nullable=True),
    Column("simhash_distance", SmallInteger, nullable=True),
    Column("changed", Boolean, nullable=True),
    Column("content_changed", Boolean, nullable=True),
    Column("last_modified", DateTime(timezone=True), nullable=True),
    Column("error_kind", Text, nullable=True),
    Column("truncated", Boolean, nullable=False, server_default=text("false")),
    Column("host_id", BigInteger, nullable=False),  # in every key: rows live with their host
    # No foreign key to urls (its check locks the URL's row per observation): record_fetches
    # inserts only for a URL row it updated, and crawler remove deletes a removed URL's
    # observations itself. The natural key: a retried commit cannot record a fetch twice.
    PrimaryKeyConstraint("url_id", "fetched_at", "host_id", name="observations_pkey"),
    Index("observations_fetched_at_idx", "fetched_at"),
    postgresql_partition_by="RANGE (fetched_at)",  # by month: crawler.db.partitions
)

# The link graph of windowed sites as last observed: a fetch writes the links its page added,
# moved or lost, and the window's depths move from those (crawler.core.window_incremental).
links = Table(
    "links",
    metadata,
    Column("from_url_id", BigInteger, primary_key=True),
    Column("to_url_id", BigInteger, primary_key=True),
    Column("position", Integer, nullable=False),
    # The host of both ends (a window follows links within its page's host).
    Column("host_id", BigInteger, nullable=False, primary_key=True),
    ForeignKeyConstraint(["from_url_id", "host_id"], ["urls.id", "urls.host_id"],
                         ondelete="CASCADE", name="links_from_url_id_host_id_fkey"),
    ForeignKeyConstraint(["to_url_id", "host_id"], ["urls.id", "urls.host_id"],
                         ondelete="CASCADE", name="links_to_url_id_host_id_fkey"),
    Index("links_to_idx", "to_url_id"),
)

# Planner state: one row per named value (mu, prior shape and rate, budget).
planner_state = Table(
    "planner_state",
    metadata,
    Column("key", Text, primary_key=True),
    Column("value", Float, nullable=False),
    Column("updated_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
)

# The collection (crawler.store): one row per stored WARC record (a response, or a revisit of
# the URL's last stored response), written in the fetch's own transaction after the record's
# bytes are in the file. Keyed by (url_id, fetched_at) like observations.
RECORD_TYPES = ("response", "revisit")

stored_records = Table(
    "stored_records",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("url_id", BigInteger, nullable=False),
    Column("fetched_at", DateTime(timezone=True), primary_key=True),  # partition key
    Column("record_type", Text, nullable=False),
    Column("status", SmallInteger, nullable=True),
    # File name relative to CRAWLER_WARC_DIR, and the gzip member holding the record.
    Column("warc_file", Text, nullable=False),
    Column("warc_offset", BigInteger, nullable=False),
    Column("warc_length", BigInteger, nullable=False),
    Column("record_id", Text, nullable=False),  # WARC-Record-ID
    Column("payload_digest", Text, nullable=False),  # WARC-Payload-Digest, sha1:BASE32
    Column("payload_bytes", Integer, nullable=False),
    Column("changed", Boolean, nullable=True),  # the observation's verdict (simhash)
    Column("refers_to", Text, nullable=True),  # a revisit's original: its WARC-Record-ID
    Column("host_id", BigInteger, nullable=False, primary_key=True),  # the URL's
    # The record's WARC-Target-URI (a revisit names its original's); NULL: not known.
    Column("target_uri", Text, nullable=True),
    # Why the record cannot be read back as indexed (crawler.store.damage); NULL: sound.
    Column("damaged", Text, nullable=True),
    ForeignKeyConstraint(["url_id", "host_id"], ["urls.id", "urls.host_id"],
                         ondelete="CASCADE", name="stored_records_url_id_host_id_fkey"),
    _one_of("record_type", RECORD_TYPES, "stored_records_type_check"),
    Index("stored_records_url_fetched_idx", "url_id", "fetched_at", "host_id", unique=True),
    Index("stored_records_url_response_idx", "url_id", "fetched_at",
          postgresql_where=text("record_type = 'response'")),
    Index("stored_records_file_idx", "warc_file"),
    Index("stored_records_damaged_idx", "id", postgresql_where=text("damaged IS NOT NULL")),
    postgresql_partition_by="RANGE (fetched_at)",  # by month: crawler.db.partitions
)

# Where each WARC file lives (the machine and directory of the daemon that wrote it), so that
# `crawler get` on a machine that cannot see a file names the one that holds it.
warc_files = Table(
    "warc_files",
    metadata,
    Column("name", Text, primary_key=True),
    Column("machine", Text, nullable=False),
    Column("directory", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
)

# The change-event outbox: written in the fetch's transaction, delivered by the webhook task
# (crawler.daemon.webhook) in id order per URL, at least once.
# failing / recovered / region_missing: alerts (crawler.core.alerts).
EVENT_KINDS = ("changed", "gone", "back", "failing", "recovered", "region_missing")

change_events = Table(
    "change_events",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("url_id", BigInteger, nullable=False),
    Column("fetched_at", DateTime(timezone=True), primary_key=True),  # partition key
    Column("kind", Text, nullable=False),
    Column("payload", JSONB, nullable=False),  # the event JSON without its id
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("delivered_at", DateTime(timezone=True), nullable=True),
    Column("attempts", Integer, nullable=False, server_default=text("0")),
    Column("next_attempt_at", DateTime(timezone=True), nullable=True),
    Column("last_error", Text, nullable=True),
    Column("host_id", BigInteger, nullable=False, primary_key=True),  # the URL's
    # Queued again by `crawler changes --replay-to-webhook`: delivered even when older than the
    # webhook's start.
    Column("replay", Boolean, nullable=False, server_default=text("false")),
    ForeignKeyConstraint(["url_id", "host_id"], ["urls.id", "urls.host_id"],
                         ondelete="CASCADE", name="change_events_url_id_host_id_fkey"),
    _one_of("kind", EVENT_KINDS, "change_events_kind_check"),
    # With kind: one fetch may raise a change and an alert of the same URL.
    Index("change_events_url_fetched_idx", "url_id", "fetched_at", "host_id", "kind",
          unique=True),
    Index("change_events_fetched_idx", "fetched_at", "id"),
    Index("change_events_pending_idx", "id", postgresql_where=text("delivered_at IS NULL")),
    Index("change_events_replay_idx", "id",
          postgresql_where=text("delivered_at IS NULL AND replay")),
    postgresql_partition_by="RANGE (fetched_at)",  # by month: crawler.db.partitions
)

# Each webhook URL ever configured and the outbox id it starts after: a new one starts from
# now (crawler.daemon.webhook), history is sent only on request.
webhooks = Table(
    "webhooks",
    metadata,
    Column("url", Text, primary_key=True),
    Column("start_id", BigInteger, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
)

# The outbox's one deliverer: a lease with a fencing epoch, taken over once it expires.
delivery_lease = Table(
    "delivery_lease",
    metadata,
    Column("name", Text, primary_key=True),
    Column("owner", Text, nullable=True),
    Column("expires_at", DateTime(timezone=True), nullable=True),
    Column("epoch", BigInteger, nullable=False, server_default=text("0")),
)

# URLs and hosts (url_id 0) failing now (crawler.core.alerts): consecutive failures, the last
# error, and whether the `failing` event was raised. A row goes when the URL or host works.
alerts = Table(
    "alerts",
    metadata,
    Column("host_id", BigInteger, ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True),
    Column("url_id", BigInteger, primary_key=True),
    Column("failures", Integer, nullable=False),
    Column("first_failed_at", DateTime(timezone=True), nullable=False),
    Column("last_failed_at", DateTime(timezone=True), nullable=False),
    Column("error_kind", Text, nullable=False),
    Column("url", Text, nullable=False),
    Column("raised", Boolean, nullable=False, server_default=text("false")),
)

# Live daemons, each refreshing its row: the planner sums their concurrency for the budget.
daemons = Table(
    "daemons",
    metadata,
    Column("owner", Text, primary_key=True),
    Column("concurrency", Integer, nullable=False),
    Column("started_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("heartbeat_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # The plan version this daemon schedules under (every live daemon should show the newest).
    Column("plan_version", BigInteger, nullable=True),
    # Why this daemon cannot write its collection now (crawler.store.health); NULL: it can.
    Column("storage_fault", Text, nullable=True),
)

# What `crawler bound` was told (crawler.core.url_bounds): per URL, pattern or host origin,
# the interval bounds and fetch windows that are copied onto the matching urls rows.
schedule_rules = Table(
    "schedule_rules",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("kind", Text, nullable=False),
    Column("target", Text, nullable=False),
    Column("min_interval_seconds", Float, nullable=True),
    Column("max_interval_seconds", Float, nullable=True),
    Column("windows", Text, nullable=False, server_default=""),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    # When last set (of the rules matching a URL, the one set last is in force), the windows
    # as url_bounds.parse_windows' week spans, flattened; and what the new-URL trigger passes
    # rules over by: the host key of every URL the rule matches (when one), a pattern's prefix.
    Column("set_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("window_spans", ARRAY(DOUBLE_PRECISION), nullable=True),
    Column("match_host_id", BigInteger,
           Computed("CASE kind WHEN 'host'::text THEN crawler_host_id(target) "
                    "WHEN 'url'::text THEN crawler_url_host_id(target) "
                    "ELSE crawler_pattern_host_id(target) END", persisted=True),
           nullable=True),
    Column("prefix", Text,
           Computed("CASE WHEN (kind = 'pattern'::text) THEN crawler_pattern_prefix(target) "
                    "ELSE NULL::text END", persisted=True),
           nullable=True),
    CheckConstraint("kind IN ('url', 'pattern', 'host')", name="schedule_rules_kind"),
    UniqueConstraint("kind", "target", name="schedule_rules_kind_target_key"),
)

# `crawler watch --pattern` rules, for the URLs that arrive later: per pattern and part
# ('exact': 'true'/'false'; 'watch', 'ignore': a CSS selector, '' for none), the value it set
# and when; per part, the pattern set last wins.
watch_rules = Table(
    "watch_rules",
    metadata,
    Column("id", BigInteger, Identity(always=False), primary_key=True),
    Column("pattern", Text, nullable=False),
    Column("part", Text, nullable=False),
    Column("value", Text, nullable=False),
    Column("set_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("match_host_id", BigInteger, Computed("crawler_pattern_host_id(pattern)",
                                                persisted=True), nullable=True),
    Column("prefix", Text, Computed("crawler_pattern_prefix(pattern)", persisted=True),
           nullable=True),
    CheckConstraint("part IN ('exact', 'watch', 'ignore')", name="watch_rules_part"),
    UniqueConstraint("pattern", "part", name="watch_rules_pattern_part_key"),
)

# The plans the planner solved (crawler.core.stored_plan), newest last: what every fetch
# process schedules under, and the settings each was solved for.
plans = Table(
    "plans",
    metadata,
    Column("version", BigInteger, Identity(always=False), primary_key=True),
    Column("solved_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
    Column("solved_by", Text, nullable=False),
    Column("mode", Text, nullable=False),
    Column("objective", Text, nullable=False),
    Column("beta_seconds", Float, nullable=False),
    Column("default_interval_seconds", Float, nullable=False),
    Column("min_interval_seconds", Float, nullable=False),
    Column("max_interval_seconds", Float, nullable=False),
    Column("budget_setting_per_day", Float, nullable=True),
    Column("budget_per_day", Float, nullable=False),
    Column("budget_source", Text, nullable=False),
    Column("mu", Float, nullable=True),
    Column("prior_shape", Float, nullable=False),
    Column("prior_rate", Float, nullable=False),
    Column("host_priors", JSONB, nullable=False, server_default=text("'{}'::jsonb")),
    Column("estimated_freshness", Float, nullable=True),
    Column("estimated_beta_currency", Float, nullable=True),
    Column("achieved_per_day", Float, nullable=True),
    Column("sampled", Integer, nullable=False, server_default="0"),
    Column("population", Float, nullable=False, server_default="0"),
    # Pages of the sample planned as completely observed; 0: μ solved without them.
    Column("complete_sampled", Integer, nullable=False, server_default=text("0")),
)

# Sitemaps and feeds of each host: what each file was and listed when last read,
# and its validators; ``robots_origin``: the origin whose robots.txt listed it.
sitemaps = Table(
    "sitemaps",
    metadata,
    Column("host_id", BigInteger, ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True,
           autoincrement=False),
    Column("url", Text, primary_key=True),
    Column("robots_origin", Text, nullable=True),
    Column("kind", Text, nullable=True),
    Column("depth", Integer, nullable=False, server_default=text("0")),
    Column("read_at", DateTime(timezone=True), nullable=True),
    Column("status", SmallInteger, nullable=True),
    Column("listed", Integer, nullable=False, server_default=text("0")),
    Column("added", Integer, nullable=False, server_default=text("0")),
    Column("rejected", Integer, nullable=False, server_default=text("0")),
    Column("cut", Text, nullable=True),
    Column("error", Text, nullable=True),
    Column("etag", Text, nullable=True),
    Column("last_modified", DateTime(timezone=True), nullable=True),
    # Read again on a schedule of its own (crawler.daemon.sitemaps): how it was found
    # (robots, seed, index, page) and where, when it is next read (lease_epoch fences the
    # reader's write), the listing last read (digest), and its change statistics.
    Column("source", Text, nullable=True),
    Column("found_on", Text, nullable=True),
    Column("next_read_at", DateTime(timezone=True), nullable=True),
    Column("lease_epoch", BigInteger, nullable=False, server_default=text("0")),
    Column("answered_at", DateTime(timezone=True), nullable=True),
    Column("digest", LargeBinary, nullable=True),
    Column("changed_at", DateTime(timezone=True), nullable=True),
    Column("dropped", Integer, nullable=False, server_default=text("0")),
    Column("repaired", Integer, nullable=False, server_default=text("0")),
    Column("reads", Integer, nullable=False, server_default=text("0")),
    Column("changes", Integer, nullable=False, server_default=text("0")),
    Column("consecutive_failures", Integer, nullable=False, server_default=text("0")),
    Column("changed_intervals_days", ARRAY(DOUBLE_PRECISION), nullable=False,
           server_default=text("'{}'")),
    Column("unchanged_days", Float, nullable=False, server_default=text("0")),
    Column("intervals_observed", Integer, nullable=False, server_default=text("0")),
    Column("change_rate_per_day", Float, nullable=True),
    Column("read_rate_per_day", Float, nullable=True),
    Index("sitemaps_next_read_idx", "next_read_at",
          postgresql_where=text("next_read_at IS NOT NULL")),
)

# Which URLs each sitemap lists as last read: ``sitemap_id`` is the file URL's hash
# (crawler_host_id(url)); keyed by the URL's host. No foreign key (its check cost a third of
# recording a listing): `crawler remove` deletes a removed URL's rows itself.
sitemap_urls = Table(
    "sitemap_urls",
    metadata,
    Column("url_id", BigInteger, nullable=False),
    Column("host_id", BigInteger, nullable=False),
    Column("sitemap_id", BigInteger, nullable=False),
    # A sitemap's URLs, and a URL's sitemaps.
    PrimaryKeyConstraint("host_id", "sitemap_id", "url_id", name="sitemap_urls_pkey"),
    Index("sitemap_urls_url_idx", "host_id", "url_id"),
)

# Every date a sitemap or feed claimed for a URL (crawler.core.sitemaps.DateHint), beside the
# fetch observations; reading the same claim again moves only ``seen_at``.
url_hints = Table(
    "url_hints",
    metadata,
    Column("host_id", BigInteger, ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True,
           autoincrement=False),
    Column("url_id", BigInteger, primary_key=True, autoincrement=False),
    Column("kind", Text, primary_key=True),
    Column("claimed_at", DateTime(timezone=True), primary_key=True),
    Column("source", Text, primary_key=True),
    Column("seen_at", DateTime(timezone=True), nullable=False),
    CheckConstraint("kind IN ('lastmod', 'updated', 'published', 'ping')",
                    name="url_hints_kind"),
)

# How far each host's hint sources (url_hints kinds) are trusted: the tests of
# crawler.core.hint_trust.HintCounts, their assessment, and the classification they give.
hint_trust = Table(
    "hint_trust",
    metadata,
    Column("host_id", BigInteger, ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True,
           autoincrement=False),
    Column("source", Text, primary_key=True),
    Column("hits", BigInteger, nullable=False, server_default=text("0")),
    Column("false_alarms", BigInteger, nullable=False, server_default=text("0")),
    Column("misses", BigInteger, nullable=False, server_default=text("0")),
    Column("quiet", BigInteger, nullable=False, server_default=text("0")),
    Column("expected_hinted", Float, nullable=False, server_default=text("0")),
    Column("expected_silent", Float, nullable=False, server_default=text("0")),
    Column("dates", BigInteger, nullable=False, server_default=text("0")),
    Column("stamped_now", BigInteger, nullable=False, server_default=text("0")),
    Column("tested_class", Text, nullable=False, server_default=text("'ignored'")),
    Column("classification", Text,
           Computed("CASE WHEN dates >= 4 AND stamped_now >= 0.9 * dates THEN 'ignored' "
                    "ELSE tested_class END", persisted=True), nullable=True),
    Column("precision_mean", Float, nullable=False, server_default=text("0.5")),
    Column("recall_mean", Float, nullable=False, server_default=text("0.5")),
    Column("false_alarm_mean", Float, nullable=False, server_default=text("0.5")),
    Column("reason", Text, nullable=True),
    Column("tested_at", DateTime(timezone=True), nullable=True),
    Column("dated_at", DateTime(timezone=True), nullable=True),
    CheckConstraint("tested_class IN ('complete', 'noisy', 'ignored')",
                    name="hint_trust_tested_class"),
)

# Per URL with hints: since when its hints are watched, its pending test (the last fetch
# interval, tested at the next fetch) and the next fetch its own schedule planned.
url_hint_state = Table(
    "url_hint_state",
    metadata,
    Column("host_id", BigInteger, ForeignKey("hosts.id", ondelete="CASCADE"), primary_key=True,
           autoincrement=False),
    Column("url_id", BigInteger, primary_key=True, autoincrement=False),
    Column("hints_since", DateTime(timezone=True), nullable=False),
    Column("test_start", DateTime(timezone=True), nullable=True),
    Column("test_end", DateTime(timezone=True), nullable=True),
    Column("test_changed", Boolean, nullable=True),
    Column("test_sources", ARRAY(Text), nullable=True),
    Column("test_p0", ARRAY(DOUBLE_PRECISION), nullable=True),
    Column("planned_at", DateTime(timezone=True), nullable=True),
)
