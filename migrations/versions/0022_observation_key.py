"""An observation's primary key is its natural key, (url_id, fetched_at, host_id).

Every observation was inserted into three indexes: the primary key on the surrogate
``(id, fetched_at, host_id)``, the unique ``(url_id, fetched_at, host_id)`` that makes a retried
record write nothing twice, and ``fetched_at`` for exports. Nothing looks an observation up by
``id``. The unique key becomes the primary key and the surrogate's index goes: one index
insert less per fetch, and about a sixth of an observation's size. ``id`` stays, filled from
its sequence as before, so existing ids and the order they give are kept.

Building the new key reads every retained observation partition (about a minute for 10^8
rows) under an exclusive lock: stop the daemons first.

Revision ID: 0022_observation_key
Revises: 0021_due_index_include_id
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0022_observation_key"
down_revision = "0021_due_index_include_id"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE observations DROP CONSTRAINT observations_pkey")
    op.execute("DROP INDEX observations_url_fetched_idx")
    op.execute("ALTER TABLE observations ADD CONSTRAINT observations_pkey "
               "PRIMARY KEY (url_id, fetched_at, host_id)")


def downgrade() -> None:
    op.execute("ALTER TABLE observations DROP CONSTRAINT observations_pkey")
    op.execute("ALTER TABLE observations ADD CONSTRAINT observations_pkey "
               "PRIMARY KEY (id, fetched_at, host_id)")
    op.execute("CREATE UNIQUE INDEX observations_url_fetched_idx "
               "ON observations (url_id, fetched_at, host_id)")
