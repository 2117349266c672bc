"""Webhook start cursors, a fenced delivery lease, replays on purpose, and alerts.

- ``webhooks``: one row per webhook URL ever configured, with the outbox id it starts after.
  A webhook configured for the first time starts from now: the events already in the outbox
  are not sent to it (``crawler changes --replay-to-webhook`` sends history on purpose).
- ``delivery_lease``: the outbox's one deliverer, as a lease (owner, expiry, fencing epoch) a
  second daemon takes over once it expires, as host leases are taken over. It replaces a
  session advisory lock, which a daemon frozen while holding it kept for as long as it was
  frozen (its connection stayed open), stopping every delivery.
- ``change_events.replay``: an event queued again by a replay, delivered even when it is older
  than the webhook's start; ``change_events_replay_idx`` finds the few such events pending.
- ``change_events`` kinds gain ``failing``, ``recovered`` and ``region_missing``, and its unique
  key gains ``kind``: one fetch may raise a change and an alert of the same URL (a page back
  from 503s with new content is ``changed`` and ``recovered``).
- ``alerts``: the URLs and hosts (``url_id`` 0) failing now, by consecutive failures, and
  whether their ``failing`` event was raised; a row goes when its URL or host works again.

Revision ID: 0027_webhook_alerts
Revises: 0026_exact_watch
Create Date: 2026-11-28
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op

revision = "0027_webhook_alerts"
down_revision = "0026_exact_watch"
branch_labels = None
depends_on = None

TZ = sa.DateTime(timezone=True)
OLD_KINDS = ("changed", "gone", "back")
NEW_KINDS = (*OLD_KINDS, "failing", "recovered", "region_missing")


def _kind_check(kinds: tuple[str, ...]) -> None:
    op.execute("ALTER TABLE change_events DROP CONSTRAINT change_events_kind_check")
    listed = ", ".join(f"'{k}'" for k in kinds)
    op.execute(f"ALTER TABLE change_events ADD CONSTRAINT change_events_kind_check "
               f"CHECK (kind IN ({listed}))")


def upgrade() -> None:
    op.create_table(
        "webhooks",
        sa.Column("url", sa.Text(), primary_key=True),
        sa.Column("start_id", sa.BigInteger(), nullable=False),
        sa.Column("created_at", TZ, nullable=False, server_default=sa.text("now()")),
    )
    op.create_table(
        "delivery_lease",
        sa.Column("name", sa.Text(), primary_key=True),
        sa.Column("owner", sa.Text(), nullable=True),
        sa.Column("expires_at", TZ, nullable=True),
        sa.Column("epoch", sa.BigInteger(), nullable=False, server_default=sa.text("0")),
    )
    op.create_table(
        "alerts",
        sa.Column("host_id", sa.BigInteger(), sa.ForeignKey("hosts.id", ondelete="CASCADE"),
                  primary_key=True),
        sa.Column("url_id", sa.BigInteger(), primary_key=True),
        sa.Column("failures", sa.Integer(), nullable=False),
        sa.Column("first_failed_at", TZ, nullable=False),
        sa.Column("last_failed_at", TZ, nullable=False),
        sa.Column("error_kind", sa.Text(), nullable=False),
        sa.Column("url", sa.Text(), nullable=False),
        sa.Column("raised", sa.Boolean(), nullable=False, server_default=sa.text("false")),
    )
    # A constant default adds the column without rewriting the table (PostgreSQL 11+).
    op.add_column("change_events", sa.Column("replay", sa.Boolean(), nullable=False,
                                             server_default=sa.text("false")))
    op.create_index("change_events_replay_idx", "change_events", ["id"],
                    postgresql_where=sa.text("delivered_at IS NULL AND replay"))
    _kind_check(NEW_KINDS)
    op.drop_index("change_events_url_fetched_idx", table_name="change_events")
    op.create_index("change_events_url_fetched_idx", "change_events",
                    ["url_id", "fetched_at", "host_id", "kind"], unique=True)


def downgrade() -> None:
    op.execute("DELETE FROM change_events WHERE kind NOT IN ('changed', 'gone', 'back')")
    op.drop_index("change_events_url_fetched_idx", table_name="change_events")
    op.create_index("change_events_url_fetched_idx", "change_events",
                    ["url_id", "fetched_at", "host_id"], unique=True)
    _kind_check(OLD_KINDS)
    op.drop_index("change_events_replay_idx", table_name="change_events")
    op.drop_column("change_events", "replay")
    op.drop_table("alerts")
    op.drop_table("delivery_lease")
    op.drop_table("webhooks")
