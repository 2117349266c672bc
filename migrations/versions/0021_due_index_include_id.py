"""``urls_host_next_fetch_idx`` carries each URL's id (INCLUDE), so a host's next due time is
read from the index alone.

Each record that gives its host back recomputes the host's earliest due time without the URL
just fetched (``min(next_fetch_at) ... WHERE host_id = $h AND id <> $url``: the statement's
snapshot still sees that URL's old row). Without ``id`` in the index the filter needed every
candidate's heap row, and the first candidate is another URL of the host, on a page the fetch
did not touch and that is rarely in shared buffers: about 0.8 buffer reads and 12 µs of
PostgreSQL's CPU per recorded URL at 10^6 URLs. With ``id`` included the scan is index-only
wherever the visibility map says the page is all-visible, as an untouched page is after
(auto)vacuum. The key and its order are unchanged, so the claim's walk is the same; the index
grows by 8 bytes a URL.

The index is rebuilt (about a minute for 10^7 URLs) under an exclusive lock: stop the
daemons first, as for 0019.

Revision ID: 0021_due_index_include_id
Revises: 0020_fetch_record_micros
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0021_due_index_include_id"
down_revision = "0020_fetch_record_micros"
branch_labels = None
depends_on = None


def _rebuild(include: str) -> None:
    op.execute(f"CREATE INDEX urls_host_next_fetch_idx_new ON urls (host_id, next_fetch_at)"
               f"{include}")
    op.execute("DROP INDEX urls_host_next_fetch_idx")
    op.execute("ALTER INDEX urls_host_next_fetch_idx_new RENAME TO urls_host_next_fetch_idx")


def upgrade() -> None:
    _rebuild(" INCLUDE (id)")


def downgrade() -> None:
    _rebuild("")
