"""Change hints as evidence (issue 38): how far each site's hint sources are trusted, learned
at fetch time, and what a hint does to a page's schedule.

``hint_trust``: one row per (host, source), the source being the kind of the hints in
``url_hints`` (``lastmod`` for sitemaps, ``updated`` and ``published`` for feed dates, ``ping``
for IndexNow pings). It holds the counts ``crawler.core.hint_trust.HintCounts`` needs: every
fetch with a change verdict tests the hints of the fetch interval before it (``hits``,
``false_alarms``, ``misses``, ``quiet``, and the Poisson model's expectation of a change over
the announced and the silent intervals, ``expected_hinted`` and ``expected_silent``), and
every date read counts in ``dates``, and in ``stamped_now`` when it was the moment it was read.
``tested_class`` is ``crawler.core.hint_trust.assess`` of the tests alone (with its posterior
means and reason), written by the fetch that changed them; ``classification`` adds the "now"
rule in SQL (a generated column, so that a sitemap read that finds a site stamping every date
with the time of reading takes its trust away in the same statement). Host-owned: host_id
first in the key, deleted with its host.

``url_hint_state``: one row per URL that has hints. ``hints_since`` (the first hint recorded:
announcements are counted from then, for the page's rate of announcements), the pending test
(``test_start``, ``test_end``, ``test_changed``: the last fetch interval and its verdict,
tested at the URL's next fetch so that late announcements count; ``test_sources`` and
``test_p0``: the sources it tests, each with the chance of a change in the interval under the
null hypothesis, ``crawler.core.hint_trust.null_changed_probability``, computed when the
interval ended), and ``planned_at``: the next
fetch its own schedule gave at its last fetch, which a page whose trust drops falls back to.
No foreign key to urls, as for url_hints: removing URLs deletes their rows.

``url_hints.kind`` allows ``ping``: the hints IndexNow pings leave (stored as ``updated`` from
source ``indexnow`` until now, and moved here).

``plans.complete_sampled``: how many pages of the planner's sample were completely observed
(their hints trusted as complete) when it solved μ over both kinds of pages
(``crawler.core.observed.solve_observed``); 0 when μ was solved without them. The fetch
processes use μ for the probability of fetching after an announcement only when it was.

Functions, the SQL twins of ``crawler.core.observed`` (tests/integration/test_hint_trust.py
checks each against it): ``crawler_hinted_fetch_time`` (``hinted_fetch_time``, times in epoch
seconds) and ``crawler_complete_probability`` (``complete_fetch_probability``).

Revision ID: 0034_hint_trust
Revises: 0033_sitemap_schedule
Create Date: 2026-12-02
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION

revision = "0034_hint_trust"
down_revision = "0033_sitemap_schedule"
branch_labels = None
depends_on = None

ZERO = sa.text("0")
HALF = sa.text("0.5")
# Kept identical to crawler/db/schema.py's Computed(...) expression: the "now" rule of
# crawler.core.hint_trust (STAMPED_NOW_MIN_DATES, STAMPED_NOW_SHARE) over the tests' verdict.
CLASSIFICATION = ("CASE WHEN dates >= 4 AND stamped_now >= 0.9 * dates THEN 'ignored' "
                  "ELSE tested_class END")

HINTED_FETCH_TIME = """
CREATE FUNCTION crawler_hinted_fetch_time(
    last_s float8, planned_s float8, rate_per_day float8, hint_s float8,
    recall float8, false_alarm float8
) RETURNS float8
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
-- crawler.core.observed.hinted_fetch_time, in epoch seconds: the next fetch of a page whose
-- noisy source announced a change at hint_s, planned at planned_s after its fetch at last_s.
DECLARE
    interval_days float8;
    elapsed float8;
    prior float8;
    changed float8;
    unchanged float8;
    posterior float8;
    equivalent float8;
BEGIN
    IF rate_per_day IS NULL OR rate_per_day <= 0 THEN
        RETURN planned_s;
    END IF;
    IF hint_s >= planned_s THEN
        RETURN hint_s;
    END IF;
    interval_days := (planned_s - last_s) / 86400.0;
    elapsed := greatest(hint_s - last_s, 0.0) / 86400.0;
    prior := 1.0 - exp(-least(rate_per_day * elapsed, 700.0));
    changed := recall * prior;
    unchanged := false_alarm * (1.0 - prior);
    IF changed + unchanged <= 0.0 THEN
        posterior := prior;
    ELSE
        posterior := changed / (changed + unchanged);
    END IF;
    IF posterior >= 1.0 THEN
        RETURN hint_s;
    END IF;
    equivalent := -ln(1.0 - posterior) / rate_per_day;
    RETURN least(planned_s, hint_s + greatest(interval_days - equivalent, 0.0) * 86400.0);
END
$$
"""

COMPLETE_PROBABILITY = """
CREATE FUNCTION crawler_complete_probability(
    rate_per_day float8, weight float8, mu float8, objective text,
    min_days float8, max_days float8
) RETURNS float8
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
-- crawler.core.observed.complete_fetch_probability: the probability of fetching a completely
-- observed page after one announced change, from the stored mu.
DECLARE
    low float8;
    high float8;
    wanted float8;
BEGIN
    IF rate_per_day IS NULL OR rate_per_day <= 0 THEN
        RETURN 1.0;
    END IF;
    low := CASE WHEN max_days > 0 THEN 1.0 / max_days ELSE 'Infinity'::float8 END;
    high := CASE WHEN min_days > 0 THEN 1.0 / min_days ELSE 'Infinity'::float8 END;
    low := least(low, rate_per_day);
    high := least(high, rate_per_day);
    IF objective = 'harmonic' THEN
        wanted := CASE WHEN mu > 0 THEN weight / mu ELSE 'Infinity'::float8 END;
    ELSE
        wanted := CASE WHEN weight / rate_per_day > mu THEN high ELSE low END;
    END IF;
    RETURN least(greatest(wanted, low), high) / rate_per_day;
END
$$
"""

FUNCTIONS = {
    "crawler_hinted_fetch_time(float8, float8, float8, float8, float8, float8)":
        HINTED_FETCH_TIME,
    "crawler_complete_probability(float8, float8, float8, text, float8, float8)":
        COMPLETE_PROBABILITY,
}


def upgrade() -> None:
    for sql in FUNCTIONS.values():
        op.execute(sql)
    op.create_table(
        "hint_trust",
        sa.Column("host_id", sa.BigInteger(), sa.ForeignKey("hosts.id", ondelete="CASCADE"),
                  primary_key=True, autoincrement=False),
        sa.Column("source", sa.Text(), primary_key=True),
        sa.Column("hits", sa.BigInteger(), nullable=False, server_default=ZERO),
        sa.Column("false_alarms", sa.BigInteger(), nullable=False, server_default=ZERO),
        sa.Column("misses", sa.BigInteger(), nullable=False, server_default=ZERO),
        sa.Column("quiet", sa.BigInteger(), nullable=False, server_default=ZERO),
        sa.Column("expected_hinted", sa.Float(), nullable=False, server_default=ZERO),
        sa.Column("expected_silent", sa.Float(), nullable=False, server_default=ZERO),
        sa.Column("dates", sa.BigInteger(), nullable=False, server_default=ZERO),
        sa.Column("stamped_now", sa.BigInteger(), nullable=False, server_default=ZERO),
        sa.Column("tested_class", sa.Text(), nullable=False,
                  server_default=sa.text("'ignored'")),
        sa.Column("classification", sa.Text(), sa.Computed(CLASSIFICATION, persisted=True),
                  nullable=True),
        sa.Column("precision_mean", sa.Float(), nullable=False, server_default=HALF),
        sa.Column("recall_mean", sa.Float(), nullable=False, server_default=HALF),
        sa.Column("false_alarm_mean", sa.Float(), nullable=False, server_default=HALF),
        sa.Column("reason", sa.Text(), nullable=True),
        sa.Column("tested_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("dated_at", sa.DateTime(timezone=True), nullable=True),
        sa.CheckConstraint("tested_class IN ('complete', 'noisy', 'ignored')",
                           name="hint_trust_tested_class"),
    )
    op.create_table(
        "url_hint_state",
        sa.Column("host_id", sa.BigInteger(), sa.ForeignKey("hosts.id", ondelete="CASCADE"),
                  primary_key=True, autoincrement=False),
        sa.Column("url_id", sa.BigInteger(), primary_key=True, autoincrement=False),
        sa.Column("hints_since", sa.DateTime(timezone=True), nullable=False),
        sa.Column("test_start", sa.DateTime(timezone=True), nullable=True),
        sa.Column("test_end", sa.DateTime(timezone=True), nullable=True),
        sa.Column("test_changed", sa.Boolean(), nullable=True),
        sa.Column("test_sources", ARRAY(sa.Text()), nullable=True),
        sa.Column("test_p0", ARRAY(DOUBLE_PRECISION), nullable=True),
        sa.Column("planned_at", sa.DateTime(timezone=True), nullable=True),
    )
    # The URLs that have hints already: watched from their first hint.
    op.execute(
        "INSERT INTO url_hint_state (host_id, url_id, hints_since) "
        "SELECT host_id, url_id, min(seen_at) FROM url_hints GROUP BY host_id, url_id"
    )
    op.drop_constraint("url_hints_kind", "url_hints", type_="check")
    op.create_check_constraint("url_hints_kind", "url_hints",
                               "kind IN ('lastmod', 'updated', 'published', 'ping')")
    op.execute("UPDATE url_hints SET kind = 'ping' WHERE source = 'indexnow' AND kind = 'updated'")
    op.add_column("plans", sa.Column("complete_sampled", sa.Integer(), nullable=False,
                                     server_default=ZERO))


def downgrade() -> None:
    op.drop_column("plans", "complete_sampled")
    op.execute("UPDATE url_hints SET kind = 'updated' WHERE kind = 'ping'")
    op.drop_constraint("url_hints_kind", "url_hints", type_="check")
    op.create_check_constraint("url_hints_kind", "url_hints",
                               "kind IN ('lastmod', 'updated', 'published')")
    op.drop_table("url_hint_state")
    op.drop_table("hint_trust")
    for signature in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
