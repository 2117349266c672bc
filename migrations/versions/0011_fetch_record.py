"""One typed value per recorded fetch (issue 10: no frontier statement takes more than about
ten positional parameters).

fetch_record: everything ``record_fetches`` writes for one fetch — the lease token, the
observation, the URL's row after the fetch and the host's clocks — as one composite type, so
that the statement takes a single ``fetch_record[]`` parameter built by
crawler.db.frontier.record_row, instead of one array per column. The per-URL histories are real
float8[] fields (no text array literals: a batch's items hold arrays of different lengths,
which a two-dimensional float8[][] parameter cannot). Adding a column that a fetch writes
means a migration adding the field here (ALTER TYPE ... ADD ATTRIBUTE).

Revision ID: 0011_fetch_record
Revises: 0010_window_index
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op

revision = "0011_fetch_record"
down_revision = "0010_window_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute(
        """
        CREATE TYPE fetch_record AS (
            host_id bigint, lease_owner text, lease_epoch bigint,
            url_id bigint, fetched_at timestamptz, outcome text, status smallint,
            bytes integer, duration_seconds double precision, simhash bigint,
            content_hash bytea, simhash_distance smallint, changed boolean,
            content_changed boolean, obs_last_modified timestamptz, error_kind text,
            truncated boolean,
            state text, next_fetch_at timestamptz, last_fetched_at timestamptz,
            last_status smallint, last_simhash bigint, last_content_hash bytea,
            fingerprint_region text, etag text, last_modified timestamptz,
            fetch_count integer, change_count integer, consecutive_failures integer,
            changed_intervals_days double precision[], unchanged_days double precision,
            intervals_observed integer, change_rate_per_day double precision,
            fetch_rate_per_day double precision, redirect_to text,
            change_brackets_days double precision[], update_period_days double precision,
            update_phase_days double precision, update_jitter_days double precision,
            lm_fetches integer, lm_changes integer, lm_observed_days double precision,
            lm_evidence_days double precision[],
            next_request_at timestamptz, host_failures integer, backoff_until timestamptz,
            release boolean
        )
        """
    )


def downgrade() -> None:
    op.execute("DROP TYPE fetch_record")
