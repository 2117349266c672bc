"""Each stored record's WARC-Target-URI, indexed: what a revisit names as its original's URI.

A revisit's WARC-Refers-To-Target-URI was the URI of the capture being stored, not the URI its
original response was stored under. The two differ after a temporary redirect whose target
changed while the content stayed the same (or a URL that began or stopped redirecting): the
WARC then named a (URI, date) pair holding no record, and a replay tool resolving the revisit
by them (pywb, warcio-based tools) found nothing. ``stored_records.target_uri`` is the URI the
row's own record was written under, so a revisit can name its original's.

Nullable without a default, so adding it rewrites no rows. A row written before the upgrade
keeps NULL (its URI is only in the WARC file): a revisit of it names the capture's URI, as
before, until the URL's next stored response.

Revision ID: 0017_stored_target_uri
Revises: 0016_unpaused_due_index
Create Date: 2026-11-24
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0017_stored_target_uri"
down_revision = "0016_unpaused_due_index"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("stored_records", sa.Column("target_uri", sa.Text(), nullable=True))


def downgrade() -> None:
    op.drop_column("stored_records", "target_uri")
