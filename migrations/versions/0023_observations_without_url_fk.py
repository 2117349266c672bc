"""Observations no longer carry a foreign key to ``urls``.

The key's check ran for every observation a fetch inserted: an SPI query probing
``urls_pkey`` and a key-share lock on the URL's row, which the same statement had just
updated. At 10^7 URLs it was about a sixth of PostgreSQL's cost of recording a fetch. What it
guaranteed, that no observation outlives its URL, now holds by the statements that write and
remove them:

- ``record_fetches`` inserts a fetch's observation only for a URL row its own UPDATE found and
  locked, so a URL removed meanwhile gets none;
- ``crawler remove`` deletes the observations of the URLs (or the host) it removes, in the
  same transaction, by a statement run after the URLs' delete (a fresh snapshot, so that it
  also sees an observation committed while the delete waited for the URL's row).

A hand-written ``DELETE FROM urls`` no longer cascades to observations: the rows left behind
are never read for another URL (URL ids are never reused) and go with their partition.

Revision ID: 0023_observations_without_url_fk
Revises: 0022_observation_key
Create Date: 2026-11-24
"""

from __future__ import annotations

from alembic import op

revision = "0023_observations_without_url_fk"
down_revision = "0022_observation_key"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.execute("ALTER TABLE observations DROP CONSTRAINT observations_url_id_host_id_fkey")


def downgrade() -> None:
    # Observations a hand-written delete left behind would fail the key: they go first.
    op.execute("DELETE FROM observations AS o WHERE NOT EXISTS (SELECT 1 FROM urls AS u "
               "WHERE u.id = o.url_id AND u.host_id = o.host_id)")
    op.execute("ALTER TABLE observations ADD CONSTRAINT observations_url_id_host_id_fkey "
               "FOREIGN KEY (url_id, host_id) REFERENCES urls (id, host_id) ON DELETE CASCADE")
