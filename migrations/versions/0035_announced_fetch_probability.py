"""The chance that an announcement fetches a completely observed page, as one function.

``crawler_announced_fetch_probability(rate_per_day, weight, longest_seconds, complete_sampled,
mu, objective, min_interval_seconds)``: ``crawler_complete_probability`` under the plan whose
fields are passed, when that plan solved μ over complete pages (``complete_sampled`` > 0 and
an objective that has an optimum for them, harmonic or freshness), else 1: a plan that did
not weigh complete pages gives no reason to pass an announcement over. With no plan (every
plan field NULL) it is 1.

``record_url_hints`` and ``indexnow_pinged`` each spelt this expression out; they now call
the function. IMMUTABLE, with the plan as arguments rather than read from ``plans``, so that
the statements stay the same on Citus, where a function that reads a table cannot run on the
workers.

Revision ID: 0035_announced_fetch_probability
Revises: 0034_hint_trust
Create Date: 2026-12-03
"""

from __future__ import annotations

from alembic import op

revision = "0035_announced_fetch_probability"
down_revision = "0034_hint_trust"
branch_labels = None
depends_on = None

SIGNATURE = ("crawler_announced_fetch_probability(float8, float8, float8, integer, float8, "
             "text, float8)")

ANNOUNCED_FETCH_PROBABILITY = """
CREATE FUNCTION crawler_announced_fetch_probability(
    rate_per_day float8, weight float8, longest_seconds float8,
    complete_sampled integer, mu float8, objective text, min_interval_seconds float8
) RETURNS float8
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    SELECT CASE WHEN complete_sampled > 0 AND mu IS NOT NULL
                     AND objective IN ('harmonic', 'freshness')
                THEN crawler_complete_probability(
                    rate_per_day, weight, mu, objective, min_interval_seconds / 86400.0,
                    longest_seconds / 86400.0)
                ELSE 1.0 END
$$
"""


def upgrade() -> None:
    op.execute(ANNOUNCED_FETCH_PROBABILITY)


def downgrade() -> None:
    op.execute(f"DROP FUNCTION IF EXISTS {SIGNATURE}")
