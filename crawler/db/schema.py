"""The schema, defined once as SQLAlchemy Core tables.

Tables are created only by the Alembic revisions in ``migrations/``; a test checks that the
migrated database matches these definitions. The frontier's hot statements are plain SQL in
``queries.sql``; these objects exist for migrations, comparison and readable admin queries.
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    CheckConstraint,
    Column,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    SmallInteger,
    Table,
    Text,
    text,
)
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION

metadata = MetaData()

URL_STATES = ("new", "active", "gone", "error", "redirected", "disallowed")

hosts = Table(
    "hosts",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    # scheme://host[:port]: the politeness unit (one request in flight, a delay between two).
    Column("origin", Text, nullable=False, unique=True),
    # Earliest next_fetch_at of the host's URLs, kept up to date so that finding hosts with
    # due work is an index range scan instead of a scan of every URL.
    Column("next_due_at", DateTime(timezone=True), nullable=True),
    Column(
        "next_request_at",
        DateTime(timezone=True),
        nullable=False,
        server_default=text("'-infinity'"),
    ),
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
    Index("hosts_next_due_at_idx", "next_due_at"),
    Index("hosts_lease_owner_idx", "lease_owner", postgresql_where=text("lease_owner IS NOT NULL")),
)

sites = Table(
    "sites",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("root_url", Text, nullable=False, unique=True),
    Column("window_size", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False, server_default=text("now()")),
)

urls = Table(
    "urls",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("url", Text, nullable=False, unique=True),
    Column("host_id", BigInteger, ForeignKey("hosts.id", ondelete="CASCADE"), nullable=False),
    Column("state", Text, nullable=False, server_default=text("'new'")),
    Column("importance", Float, nullable=False, server_default=text("1.0")),
    Column("next_fetch_at", DateTime(timezone=True), nullable=False),
    Column("lease_owner", Text, nullable=True),
    Column("lease_expires_at", DateTime(timezone=True), nullable=True),
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
    Column(
        "changed_intervals_days",
        ARRAY(DOUBLE_PRECISION),
        nullable=False,
        server_default=text("'{}'"),
    ),
    Column("unchanged_days", Float, nullable=False, server_default=text("0")),
    Column("intervals_observed", Integer, nullable=False, server_default=text("0")),
    Column("change_rate_per_day", Float, nullable=True),
    Column("fetch_rate_per_day", Float, nullable=True),
    # (start, end] brackets, in POSIX days, of the newest fetch intervals that saw a change,
    # flattened [s1, e1, s2, e2, ...]: the evidence for detecting a regular update period.
    Column(
        "change_brackets_days",
        ARRAY(DOUBLE_PRECISION),
        nullable=False,
        server_default=text("'{}'"),
    ),
    # A detected regular update clock (crawler.core.periodic.PeriodicModel), if any.
    Column("update_period_days", Float, nullable=True),
    Column("update_phase_days", Float, nullable=True),
    Column("update_jitter_days", Float, nullable=True),
    Column("redirect_to", Text, nullable=True),
    # Page-window discovery (MODEL.md section 7): the URL's site, BFS depth, discovery order
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
    CheckConstraint(
        "state IN (" + ", ".join(f"'{s}'" for s in URL_STATES) + ")", name="urls_state_check"
    ),
    Index("urls_host_next_fetch_idx", "host_id", "next_fetch_at"),
    Index("urls_next_fetch_idx", "next_fetch_at"),
    Index("urls_lease_owner_idx", "lease_owner", postgresql_where=text("lease_owner IS NOT NULL")),
    Index("urls_site_idx", "site_id", postgresql_where=text("site_id IS NOT NULL")),
)

observations = Table(
    "observations",
    metadata,
    Column("id", BigInteger, primary_key=True, autoincrement=True),
    Column("url_id", BigInteger, ForeignKey("urls.id", ondelete="CASCADE"), nullable=False),
    Column("fetched_at", DateTime(timezone=True), nullable=False),
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
    # Unique: a retried commit after a lost acknowledgement cannot record a fetch twice.
    Index("observations_url_fetched_idx", "url_id", "fetched_at", unique=True),
    Index("observations_fetched_at_idx", "fetched_at"),
)

# The link graph of windowed sites as last observed: a page's out-links are replaced each
# time it is fetched, and BFS depths are recomputed from them.
links = Table(
    "links",
    metadata,
    Column("from_url_id", BigInteger, ForeignKey("urls.id", ondelete="CASCADE"),
           primary_key=True),
    Column("to_url_id", BigInteger, ForeignKey("urls.id", ondelete="CASCADE"), primary_key=True),
    Column("position", Integer, nullable=False),
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
