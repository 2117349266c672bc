"""Schedule and watch rules for URLs that arrive after the rule (issue 35).

``crawler bound --pattern/--host`` and ``crawler watch --pattern`` copied their rule onto the
URLs known when they ran; a URL seeded, discovered or found in a sitemap later went without.
A watcher expects the rule to hold for those too. Every path that makes a URL (``insert_urls``,
``seed_urls_from_staging``, ``discover_urls``, the sitemap seeder through them) ends in an
``INSERT INTO urls``, so the rule is applied there, by row triggers (BEFORE INSERT): no insert
statement, present or future, has to remember it.

- ``crawler_schedule_rules_for_new_urls`` copies the schedule rule in force: of the stored
  rules matching the URL (its own URL rule, a pattern it matches, its host's), the one set
  last (``crawler_schedule_rule``). That is what the commands already do to known URLs, where
  each run overwrites what an earlier one set, so a URL that arrives later ends as it would
  have had it been known when the rules were set. Its due time moves into the bounds as
  ``crawler bound`` moves a known URL's (``crawler_bounded_due``; a parked window page, due
  'infinity', stays parked), then into the rule's next fetch window (``crawler_next_allowed``,
  the SQL twin of ``crawler.core.url_bounds.next_allowed``).
- ``crawler_watch_rules_for_new_urls`` copies the watch rules (``watch_rules``, new): per part
  (exactness, ``--watch``, ``--ignore``), the value of the pattern that set that part last,
  as ``crawler watch --pattern`` runs leave a known URL.

**Nothing for seeding to pay when there are no rules.** Even a trigger that returns at once
costs a plpgsql call per row (0.7 µs measured, 1.0 µs with a per-transaction flag; a look-up
of a rule table 5 µs and more) against about 10 µs per URL for the whole bulk insert. So each
trigger is disabled while its table is empty, and enabled (``ENABLE ALWAYS``: it must fire
under ``session_replication_role = replica`` too, which bulk seeding sets to skip the foreign
keys' checks) while it holds a row. ``crawler_sync_new_url_rules()``, called by ``bound`` and
``watch --pattern`` after they store or remove a rule, sets those states (and the triggers'
WHEN, below). ``CREATE TRIGGER`` and ``ALTER TABLE ... TRIGGER`` take a SHARE ROW EXCLUSIVE
lock on urls, which waits for the transactions writing urls and holds new writers for as long
as that takes; with nothing to change the function takes a SHARE lock instead, to the same
effect. Either way the command then knows that every insert that ran a trigger before the
rule was committed has committed too, so the update of the known URLs that follows finds
them: no URL falls between the two. The function is SECURITY DEFINER (the table owner's right
to alter urls), so that a role that does not own urls may run the commands.

**A rule that cannot match costs next to nothing.** Once enabled, a trigger's look-up costs
about 10 µs per new URL (a query on the rule table), and PostgreSQL's ``~`` 2 to 5 µs a call
even when the first character differs. So every rule carries, in generated columns, the host
key every URL it matches has (``match_host_id``: a URL or host rule's, or a pattern's whose
literal prefix holds a whole origin and its ``/``, as ``^https://shop\\.example/item/`` does)
and a pattern its literal prefix (``prefix``, ``crawler_pattern_prefix``:
``https://shop.example/item/``). While every rule of a table has a host key, its trigger is
made with ``WHEN (NEW.host_id = ANY (keys))``: the URLs of other hosts do not call it at all.
In the look-up a rule is passed over on one comparison of keys when the URL is on another
host, and on ``starts_with`` when its start differs; the regular expression runs only on the
URLs the prefix lets through. A pattern with no ``^`` (or with a ``|`` at its top) makes the
trigger fire for every new URL, and is tried on each.

``crawler_bounded_due(next_fetch_at, last_attempt_at, min, max, as_of)``: the due-time
expression that ``set_url_bounds``, ``set_pattern_bounds`` and ``set_host_bounds`` each spelt
out, in one place, used by the trigger too. IMMUTABLE: the time comes as an argument (the
statements pass now()), and adding seconds to a timestamptz does not depend on the time zone.
That also makes it a function Citus takes in a distributed UPDATE, where a STABLE function
(now(), timestamptz + interval) on a column, or one inside CASE or COALESCE, is refused. One
fix on the way: with no longest interval (``--at-most-every`` alone, or ``--clear``) the old
expression's ``GREATEST(NULL, now())`` was now(), which made the URL due at once, inside its
own shortest interval; a NULL bound now moves nothing.

``schedule_rules.set_at``: when the rule was last set (the order of precedence), backfilled
from ``created_at``. ``schedule_rules.window_spans``: the rule's windows as the week offsets
``crawler.core.url_bounds.parse_windows`` gives ([begin, end, begin, end, ...] seconds from
Monday 00:00 UTC), stored by ``crawler bound`` so that SQL never parses the window syntax,
and backfilled here by that same function.

Citus: ``watch_rules`` is a reference table like ``schedule_rules``; the functions the
triggers and statements call are distributed like the key functions, and the triggers need
``citus.enable_unsafe_triggers`` (docs/OPERATIONS.md).

Revision ID: 0032_rules_for_new_urls
Revises: 0031_warc_files
Create Date: 2026-11-30
"""

from __future__ import annotations

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects.postgresql import ARRAY, DOUBLE_PRECISION

revision = "0032_rules_for_new_urls"
down_revision = "0031_warc_files"
branch_labels = None
depends_on = None

# Kept identical to crawler/db/schema.py's Computed(...) expressions, written as PostgreSQL
# shows them (the schema test compares them).
SCHEDULE_MATCH_HOST_ID = ("CASE kind WHEN 'host'::text THEN crawler_host_id(target) "
                          "WHEN 'url'::text THEN crawler_url_host_id(target) "
                          "ELSE crawler_pattern_host_id(target) END")
SCHEDULE_PREFIX = ("CASE WHEN (kind = 'pattern'::text) THEN crawler_pattern_prefix(target) "
                   "ELSE NULL::text END")
WATCH_MATCH_HOST_ID = "crawler_pattern_host_id(pattern)"
WATCH_PREFIX = "crawler_pattern_prefix(pattern)"

PATTERN_PREFIX = r"""
CREATE FUNCTION crawler_pattern_prefix(pattern text) RETURNS text
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
-- The literal text every string regular expression ``pattern`` (PostgreSQL's ~, an ARE)
-- matches starts with; NULL when there is none or it is unclear. The pattern must start with
-- ^ and hold no | outside parentheses and brackets; the prefix runs over plain characters
-- and escaped punctuation up to the first other one, less a character a quantifier follows.
DECLARE
    n integer := length(pattern);
    i integer := 1;
    c text;
    depth integer := 0;
    in_bracket boolean := false;
    prefix text := '';
    step integer;
BEGIN
    IF left(pattern, 1) IS DISTINCT FROM '^' THEN
        RETURN NULL;
    END IF;
    WHILE i <= n LOOP  -- no alternation at the top
        c := substr(pattern, i, 1);
        IF c = '\' THEN
            i := i + 2;
            CONTINUE;
        END IF;
        IF in_bracket THEN
            IF c = '[' AND substr(pattern, i + 1, 1) IN (':', '.', '=') THEN
                step := strpos(substr(pattern, i + 2), substr(pattern, i + 1, 1) || ']');
                IF step = 0 THEN
                    RETURN NULL;
                END IF;
                i := i + step + 3;  -- past the class's closing pair
                CONTINUE;
            ELSIF c = ']' THEN
                in_bracket := false;
            END IF;
        ELSIF c = '[' THEN
            in_bracket := true;
            IF substr(pattern, i + 1, 1) = '^' THEN
                i := i + 1;
            END IF;
            IF substr(pattern, i + 1, 1) = ']' THEN  -- a ] first is a member
                i := i + 1;
            END IF;
        ELSIF c = '(' THEN
            depth := depth + 1;
        ELSIF c = ')' THEN
            depth := depth - 1;
        ELSIF c = '|' AND depth = 0 THEN
            RETURN NULL;
        END IF;
        i := i + 1;
    END LOOP;
    IF in_bracket OR depth <> 0 THEN
        RETURN NULL;
    END IF;
    i := 2;
    WHILE i <= n LOOP
        c := substr(pattern, i, 1);
        step := 1;
        IF c = '\' THEN
            c := substr(pattern, i + 1, 1);
            EXIT WHEN c = '' OR c ~ '[[:alnum:]]';  -- \d, \m, \y ...: not one character
            step := 2;
        ELSIF strpos('.[](){}*+?|^$', c) > 0 THEN
            EXIT;
        END IF;
        EXIT WHEN substr(pattern, i + step, 1) IN ('*', '+', '?', '{');
        prefix := prefix || c;
        i := i + step;
    END LOOP;
    RETURN nullif(prefix, '');
END
$$
"""

PATTERN_HOST_ID = """
CREATE FUNCTION crawler_pattern_host_id(pattern text) RETURNS bigint
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- The host key of every URL the pattern matches, when its literal prefix holds a whole
    -- origin and the / after it (a URL's origin is all before its first / past ://).
    SELECT CASE WHEN p ~ '^[^/]+://[^/]+/' THEN crawler_url_host_id(p) END
    FROM (SELECT crawler_pattern_prefix(pattern) AS p) AS prefix
$$
"""

PATTERN_MATCHES = """
CREATE FUNCTION crawler_pattern_matches(pattern text, prefix text, match_host_id bigint,
                                        url text, host_id bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- url ~ pattern, passed over at once when url is on another host than the pattern's or
    -- does not start with its prefix. Inlined into the statements that call it.
    SELECT CASE WHEN match_host_id <> host_id THEN false
                WHEN prefix IS NOT NULL AND NOT starts_with(url, prefix) THEN false
                ELSE url ~ pattern END
$$
"""

RULE_MATCHES = """
CREATE FUNCTION crawler_rule_matches(kind text, target text, match_host_id bigint,
                                     prefix text, url text, host_id bigint) RETURNS boolean
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- Whether the schedule rule (a schedule_rules row's kind, target and generated columns)
    -- matches URL url of host host_id.
    SELECT CASE kind WHEN 'url' THEN match_host_id = host_id AND target = url
                     WHEN 'host' THEN match_host_id = host_id
                     ELSE crawler_pattern_matches(target, prefix, match_host_id, url, host_id)
                     END
$$
"""

SCHEDULE_RULE = """
CREATE FUNCTION crawler_schedule_rule(new_url text, new_host_id bigint)
RETURNS TABLE (min_interval_seconds float8, max_interval_seconds float8, windows text,
               window_spans float8[])
LANGUAGE sql STABLE PARALLEL SAFE AS $$
    -- The schedule rule in force for a URL: of the rules matching it (its own, a pattern, its
    -- host's), the one set last, as the commands leave a known URL. No row: none. The
    -- trigger runs the same query (a plan it keeps, where a call of this one plans it again).
    SELECT r.min_interval_seconds, r.max_interval_seconds, r.windows, r.window_spans
    FROM schedule_rules AS r
    WHERE crawler_rule_matches(r.kind, r.target, r.match_host_id, r.prefix, new_url,
                               new_host_id)
    ORDER BY r.set_at DESC, r.id DESC
    LIMIT 1
$$
"""

BOUNDED_DUE = """
CREATE FUNCTION crawler_bounded_due(
    next_fetch_at timestamptz, last_attempt_at timestamptz,
    min_seconds float8, max_seconds float8, as_of timestamptz
) RETURNS timestamptz
LANGUAGE sql IMMUTABLE PARALLEL SAFE AS $$
    -- The due time moved into the bounds, counted from the last attempt: a wait longer than
    -- the longest interval is cut to it, a due time sooner than the shortest after the last
    -- attempt is put off. A NULL bound moves nothing; a parked window page stays parked.
    SELECT CASE WHEN next_fetch_at = 'infinity' THEN next_fetch_at ELSE LEAST(
        GREATEST(next_fetch_at, coalesce(last_attempt_at + make_interval(secs => min_seconds),
                                         next_fetch_at)),
        CASE WHEN max_seconds IS NULL THEN 'infinity'::timestamptz
             ELSE GREATEST(coalesce(last_attempt_at, as_of) + make_interval(secs => max_seconds),
                           as_of) END) END
$$
"""

NEXT_ALLOWED = """
CREATE FUNCTION crawler_next_allowed(spans float8[], at timestamptz) RETURNS timestamptz
LANGUAGE plpgsql IMMUTABLE PARALLEL SAFE AS $$
-- crawler.core.url_bounds.next_allowed: the first time at or after ``at`` inside a window,
-- ``spans`` being the windows' sorted, merged [begin, end) pairs in seconds from Monday 00:00
-- UTC, flattened; ``at`` itself with no windows or when it is not finite.
DECLARE
    t float8;
    week_offset float8;
    i integer;
BEGIN
    IF spans IS NULL OR cardinality(spans) < 2 OR at IS NULL OR NOT isfinite(at) THEN
        RETURN at;
    END IF;
    t := extract(epoch FROM at);
    -- POSIX day 0 was a Thursday, three days after a Monday; Python's % (never negative).
    week_offset := (t + 3 * 86400.0) - floor((t + 3 * 86400.0) / 604800.0) * 604800.0;
    FOR i IN 1 .. cardinality(spans) - 1 BY 2 LOOP
        IF week_offset < spans[i + 1] THEN
            IF week_offset >= spans[i] THEN
                RETURN at;
            END IF;
            RETURN to_timestamp(t - week_offset + spans[i]);
        END IF;
    END LOOP;
    RETURN to_timestamp(t - week_offset + 604800.0 + spans[1]);
END
$$
"""

SCHEDULE_TRIGGER_FUNCTION = """
CREATE FUNCTION crawler_schedule_rules_for_new_url() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    bounds record;
BEGIN
    -- crawler_schedule_rule's query, planned once per session here.
    SELECT r.min_interval_seconds, r.max_interval_seconds, r.windows, r.window_spans
    INTO bounds
    FROM schedule_rules AS r
    WHERE crawler_rule_matches(r.kind, r.target, r.match_host_id, r.prefix, NEW.url,
                               NEW.host_id)
    ORDER BY r.set_at DESC, r.id DESC
    LIMIT 1;
    IF FOUND THEN
        NEW.own_min_interval_seconds := bounds.min_interval_seconds;
        NEW.own_max_interval_seconds := bounds.max_interval_seconds;
        NEW.fetch_windows := nullif(bounds.windows, '');
        NEW.next_fetch_at := crawler_next_allowed(bounds.window_spans, crawler_bounded_due(
            NEW.next_fetch_at, NEW.last_attempt_at, bounds.min_interval_seconds,
            bounds.max_interval_seconds, now()));
    END IF;
    RETURN NEW;
END
$$
"""

WATCH_TRIGGER_FUNCTION = """
CREATE FUNCTION crawler_watch_rules_for_new_url() RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    part record;
BEGIN
    FOR part IN
        SELECT DISTINCT ON (w.part) w.part, w.value
        FROM watch_rules AS w
        WHERE crawler_pattern_matches(w.pattern, w.prefix, w.match_host_id, NEW.url,
                                      NEW.host_id)
        ORDER BY w.part, w.set_at DESC, w.id DESC
    LOOP
        CASE part.part
            WHEN 'exact' THEN NEW.watch_exact := part.value::boolean;
            WHEN 'watch' THEN NEW.watch_css := nullif(part.value, '');
            ELSE NEW.ignore_css := nullif(part.value, '');
        END CASE;
    END LOOP;
    RETURN NEW;
END
$$
"""

SYNC = """
CREATE FUNCTION crawler_sync_new_url_rules() RETURNS boolean
LANGUAGE plpgsql SECURITY DEFINER SET search_path FROM CURRENT AS $$
-- Each new-URL trigger disabled while its rule table is empty; while it holds rules, made
-- again (WHEN: only for URLs of the hosts its rules can match, when every rule names one)
-- and enabled ALWAYS. True when either is enabled. Waits for the transactions writing urls
-- in every case (see migration 0032).
DECLARE
    t record;
    keys bigint[];
    changed boolean := false;
    any_enabled boolean := false;
BEGIN
    FOR t IN
        SELECT g.tgname, g.tgenabled, g.tgfoid::regprocedure AS function,
               CASE g.tgname WHEN 'crawler_schedule_rules_for_new_urls'
                             THEN 'schedule_rules' ELSE 'watch_rules' END AS rules
        FROM pg_trigger AS g
        WHERE g.tgrelid = 'urls'::regclass
          AND g.tgname IN ('crawler_schedule_rules_for_new_urls',
                           'crawler_watch_rules_for_new_urls')
        ORDER BY g.tgname
    LOOP
        -- The distinct host keys of the rules, NULL among them for a rule of no one host.
        EXECUTE format('SELECT array_agg(DISTINCT match_host_id) FROM %I', t.rules) INTO keys;
        IF keys IS NULL THEN
            IF t.tgenabled <> 'D' THEN
                EXECUTE format('ALTER TABLE urls DISABLE TRIGGER %I', t.tgname);
                changed := true;
            END IF;
            CONTINUE;
        END IF;
        any_enabled := true;
        IF array_position(keys, NULL) IS NOT NULL OR cardinality(keys) > 1000 THEN
            keys := NULL;  -- every new URL
        END IF;
        IF current_setting('server_version_num')::integer < 140000 THEN  -- no OR REPLACE
            EXECUTE format('DROP TRIGGER %I ON urls', t.tgname);
        END IF;
        EXECUTE format('CREATE %s TRIGGER %I BEFORE INSERT ON urls FOR EACH ROW %s '
                       'EXECUTE FUNCTION %s',
                       CASE WHEN current_setting('server_version_num')::integer >= 140000
                            THEN 'OR REPLACE' ELSE '' END,
                       t.tgname,
                       CASE WHEN keys IS NOT NULL
                            THEN format('WHEN (NEW.host_id = ANY (%L::bigint[]))', keys)
                            ELSE '' END,
                       t.function);
        EXECUTE format('ALTER TABLE urls ENABLE ALWAYS TRIGGER %I', t.tgname);
        changed := true;
    END LOOP;
    IF NOT changed THEN
        LOCK TABLE urls IN SHARE MODE;
    END IF;
    RETURN any_enabled;
END
$$
"""

# In creation order (each after what it calls); dropped in reverse.
FUNCTIONS = {
    "crawler_pattern_prefix(text)": PATTERN_PREFIX,
    "crawler_pattern_host_id(text)": PATTERN_HOST_ID,
    "crawler_pattern_matches(text, text, bigint, text, bigint)": PATTERN_MATCHES,
    "crawler_rule_matches(text, text, bigint, text, text, bigint)": RULE_MATCHES,
    "crawler_bounded_due(timestamptz, timestamptz, float8, float8, timestamptz)": BOUNDED_DUE,
    "crawler_next_allowed(float8[], timestamptz)": NEXT_ALLOWED,
}
# Created once the rule tables have their new columns.
LATE_FUNCTIONS = {
    "crawler_schedule_rule(text, bigint)": SCHEDULE_RULE,
    "crawler_schedule_rules_for_new_url()": SCHEDULE_TRIGGER_FUNCTION,
    "crawler_watch_rules_for_new_url()": WATCH_TRIGGER_FUNCTION,
    "crawler_sync_new_url_rules()": SYNC,
}
TRIGGERS = {
    "crawler_schedule_rules_for_new_urls": "crawler_schedule_rules_for_new_url()",
    "crawler_watch_rules_for_new_urls": "crawler_watch_rules_for_new_url()",
}


def _backfill_window_spans() -> None:
    """Existing rules' windows as week spans, parsed by the function ``crawler bound`` uses."""
    from crawler.core.url_bounds import parse_windows

    conn = op.get_bind()
    rows = conn.execute(sa.text("SELECT id, windows FROM schedule_rules WHERE windows <> ''"))
    for rule_id, windows in rows.fetchall():
        parsed = parse_windows(windows)
        spans = [x for span in parsed.spans for x in span] if parsed else None
        conn.execute(sa.text("UPDATE schedule_rules SET window_spans = :spans WHERE id = :id"),
                     {"spans": spans, "id": rule_id})


def upgrade() -> None:
    for sql in FUNCTIONS.values():
        op.execute(sql)
    op.add_column("schedule_rules", sa.Column(
        "set_at", sa.DateTime(timezone=True), nullable=False, server_default=sa.text("now()")))
    op.execute("UPDATE schedule_rules SET set_at = created_at")
    op.add_column("schedule_rules", sa.Column(
        "window_spans", ARRAY(DOUBLE_PRECISION), nullable=True))
    op.add_column("schedule_rules", sa.Column(
        "match_host_id", sa.BigInteger, sa.Computed(SCHEDULE_MATCH_HOST_ID, persisted=True),
        nullable=True))
    op.add_column("schedule_rules", sa.Column(
        "prefix", sa.Text, sa.Computed(SCHEDULE_PREFIX, persisted=True), nullable=True))
    _backfill_window_spans()
    op.create_table(
        "watch_rules",
        sa.Column("id", sa.BigInteger, sa.Identity(always=False), primary_key=True),
        sa.Column("pattern", sa.Text, nullable=False),
        # 'exact' ('true' / 'false'), 'watch' or 'ignore' (a CSS selector, '' for none)
        sa.Column("part", sa.Text, nullable=False),
        sa.Column("value", sa.Text, nullable=False),
        sa.Column("set_at", sa.DateTime(timezone=True), nullable=False,
                  server_default=sa.text("now()")),
        sa.Column("match_host_id", sa.BigInteger,
                  sa.Computed(WATCH_MATCH_HOST_ID, persisted=True), nullable=True),
        sa.Column("prefix", sa.Text, sa.Computed(WATCH_PREFIX, persisted=True), nullable=True),
        sa.CheckConstraint("part IN ('exact', 'watch', 'ignore')", name="watch_rules_part"),
        sa.UniqueConstraint("pattern", "part", name="watch_rules_pattern_part_key"),
    )
    for sql in LATE_FUNCTIONS.values():
        op.execute(sql)
    for name, function in TRIGGERS.items():
        op.execute(f"CREATE TRIGGER {name} BEFORE INSERT ON urls "
                   f"FOR EACH ROW EXECUTE FUNCTION {function}")
    # Enabled only if rules were stored before this revision.
    op.execute("SELECT crawler_sync_new_url_rules()")


def downgrade() -> None:
    for name in TRIGGERS:
        op.execute(f"DROP TRIGGER IF EXISTS {name} ON urls")
    for signature in reversed(LATE_FUNCTIONS):
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
    op.drop_table("watch_rules")
    for column in ("prefix", "match_host_id", "window_spans", "set_at"):
        op.drop_column("schedule_rules", column)
    for signature in reversed(FUNCTIONS):
        op.execute(f"DROP FUNCTION IF EXISTS {signature}")
