"""A schema ready for Citus: host_id is a hash of the origin and in every host-owned key.

(issue 13, "A schema ready for Citus".) Every host-owned table carries host_id, and its primary
and unique keys and its foreign keys to other host-owned tables include it, so that the tables
can be distributed on host_id and co-located (all of a host's rows on one node):

- hosts.id (the hosts table's own host_id) is no longer a sequence: it is
  ``crawler_host_id(origin)``, the first 8 bytes of SHA-256 of the origin as a signed BIGINT
  (crawler.core.hostid computes the same in Python). Existing hosts are re-keyed and every
  urls.host_id follows. Two origins with one key are refused: the migration fails, naming
  them, rather than merge two hosts. The unique key on origin alone goes (a distributed table
  cannot have it): the primary key is the origin's hash, and statements find a host by it.
- urls: primary key (id, host_id) (ids still come from their sequence), unique (host_id, url);
  its foreign key to hosts is re-created.
- observations, stored_records, change_events (partitioned by month, 0008) and links gain
  host_id, filled from their URL. Primary keys become (id, fetched_at, host_id) (the partition
  key stays in), (from_url_id, to_url_id, host_id) for links; the unique (url_id, fetched_at)
  keys gain host_id; the foreign keys to urls become (url_id, host_id) -> urls (id, host_id)
  (for links, both ends: a page's links stay on its host).

It also defines ``crawler_url_host_id(url)`` (the key of a normalised URL's host), which lets a
statement that names a URL constrain host_id without its caller computing it.

Every row is kept. It rewrites urls and the four tables once (an UPDATE of every row): on a
large database expect minutes. The downgrade gives hosts sequence keys again (in origin order)
and drops host_id from the tables that gained it.

Revision ID: 0010_citus
Revises: 0009_readiness
Create Date: 2026-11-23
"""

from __future__ import annotations

from alembic import op
from sqlalchemy import text

revision = "0010_citus"
down_revision = "0009_readiness"
branch_labels = None
depends_on = None

# The per-fetch tables, partitioned by month (0008).
PER_FETCH = ("observations", "stored_records", "change_events")

HOST_ID_FUNCTIONS = ("""
CREATE OR REPLACE FUNCTION crawler_host_id(origin text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT ('x' || left(encode(sha256(convert_to(origin, 'UTF8')), 'hex'), 16))
             ::bit(64)::bigint $$
""", """
CREATE OR REPLACE FUNCTION crawler_url_host_id(url text) RETURNS bigint
LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE
AS $$ SELECT crawler_host_id(split_part(url, '://', 1) || '://'
                             || split_part(substr(url, strpos(url, '://') + 3), '/', 1)) $$
""")


def _rows(sql: str) -> list[tuple[object, ...]]:
    return [tuple(r) for r in op.get_bind().execute(text(sql)).fetchall()]


def _foreign_keys_to(table: str) -> list[tuple[str, str]]:
    """(referencing table, constraint name) of every foreign key pointing at ``table``,
    declared on a table's root (not the copies PostgreSQL puts on partitions)."""
    return [
        (str(t), str(name))
        for t, name in _rows(
            "SELECT c.conrelid::regclass::text, c.conname FROM pg_constraint c "
            f"WHERE c.contype = 'f' AND c.confrelid = '{table}'::regclass "
            "AND c.conparentid = 0 ORDER BY 1, 2"
        )
    ]


def _drop_foreign_keys_to(table: str) -> None:
    for referencing, name in _foreign_keys_to(table):
        op.execute(f'ALTER TABLE {referencing} DROP CONSTRAINT "{name}"')


def upgrade() -> None:
    for function in HOST_ID_FUNCTIONS:
        op.execute(function)
    _drop_foreign_keys_to("urls")
    _drop_foreign_keys_to("hosts")

    # hosts: re-key by the hash of the origin, refusing collisions.
    collisions = _rows(
        "SELECT crawler_host_id(origin), string_agg(origin, ', ' ORDER BY origin) FROM hosts "
        "GROUP BY 1 HAVING count(*) > 1 LIMIT 5"
    )
    if collisions:
        raise RuntimeError(
            "host_id collision: these origins hash to one key and cannot be migrated "
            f"without merging hosts: {collisions}"
        )
    op.execute(
        "CREATE TEMPORARY TABLE crawler_host_keys ON COMMIT DROP AS "
        "SELECT id AS old_id, crawler_host_id(origin) AS new_id FROM hosts"
    )
    sequence = _rows("SELECT pg_get_serial_sequence('hosts', 'id')")[0][0]
    op.execute("ALTER TABLE hosts ALTER COLUMN id DROP DEFAULT")
    if sequence is not None:
        op.execute(f"DROP SEQUENCE {sequence}")
    # Checked row by row: should a new key equal an old key not yet moved (a chance of about
    # hosts/2^64), the migration fails and changes nothing.
    op.execute(
        "UPDATE hosts AS h SET id = k.new_id FROM crawler_host_keys AS k WHERE h.id = k.old_id"
    )
    op.execute(
        "UPDATE urls AS u SET host_id = k.new_id FROM crawler_host_keys AS k "
        "WHERE u.host_id = k.old_id"
    )
    # The key is the origin's hash: an origin is unique with it, and found by it.
    op.execute("ALTER TABLE hosts DROP CONSTRAINT hosts_origin_key")

    # urls: keys with host_id.
    op.execute("ALTER TABLE urls DROP CONSTRAINT urls_pkey")
    op.execute("ALTER TABLE urls ADD CONSTRAINT urls_pkey PRIMARY KEY (id, host_id)")
    op.execute("ALTER TABLE urls DROP CONSTRAINT urls_url_key")
    op.execute("ALTER TABLE urls ADD CONSTRAINT urls_host_id_url_key UNIQUE (host_id, url)")
    op.execute(
        "ALTER TABLE urls ADD CONSTRAINT urls_host_id_fkey FOREIGN KEY (host_id) "
        "REFERENCES hosts (id) ON DELETE CASCADE"
    )

    # The per-fetch tables and links: host_id from their URL, then keys with it.
    for table in PER_FETCH:
        op.execute(f"ALTER TABLE {table} ADD COLUMN host_id bigint")
        op.execute(
            f"UPDATE {table} AS t SET host_id = u.host_id FROM urls AS u WHERE u.id = t.url_id"
        )
        op.execute(f"ALTER TABLE {table} ALTER COLUMN host_id SET NOT NULL")
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey")
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey "
            "PRIMARY KEY (id, fetched_at, host_id)"
        )
        op.execute(f"DROP INDEX {table}_url_fetched_idx")
        op.execute(
            f"CREATE UNIQUE INDEX {table}_url_fetched_idx ON {table} "
            "(url_id, fetched_at, host_id)"
        )
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_url_id_host_id_fkey "
            "FOREIGN KEY (url_id, host_id) REFERENCES urls (id, host_id) ON DELETE CASCADE"
        )
        op.execute(f"ANALYZE {table}")

    op.execute("ALTER TABLE links ADD COLUMN host_id bigint")
    op.execute(
        "UPDATE links AS l SET host_id = u.host_id FROM urls AS u WHERE u.id = l.from_url_id"
    )
    # A link whose two ends are on different hosts cannot be co-located; windows only follow
    # links within the page's host, so there should be none. Such a link is dropped (the next
    # fetch of its page rebuilds the page's links).
    op.execute(
        "DELETE FROM links AS l USING urls AS u "
        "WHERE u.id = l.to_url_id AND u.host_id <> l.host_id"
    )
    op.execute("ALTER TABLE links ALTER COLUMN host_id SET NOT NULL")
    op.execute("ALTER TABLE links DROP CONSTRAINT links_pkey")
    op.execute(
        "ALTER TABLE links ADD CONSTRAINT links_pkey "
        "PRIMARY KEY (from_url_id, to_url_id, host_id)"
    )
    for end in ("from", "to"):
        op.execute(
            f"ALTER TABLE links ADD CONSTRAINT links_{end}_url_id_host_id_fkey "
            f"FOREIGN KEY ({end}_url_id, host_id) REFERENCES urls (id, host_id) "
            "ON DELETE CASCADE"
        )
    op.execute("ANALYZE hosts")
    op.execute("ANALYZE urls")
    op.execute("ANALYZE links")


def downgrade() -> None:
    _drop_foreign_keys_to("urls")
    _drop_foreign_keys_to("hosts")
    op.execute("ALTER TABLE links DROP CONSTRAINT links_pkey")
    op.execute("ALTER TABLE links DROP COLUMN host_id")
    op.execute("ALTER TABLE links ADD CONSTRAINT links_pkey PRIMARY KEY (from_url_id, to_url_id)")
    for table in PER_FETCH:
        op.execute(f"ALTER TABLE {table} DROP CONSTRAINT {table}_pkey")
        op.execute(f"DROP INDEX {table}_url_fetched_idx")
        op.execute(f"ALTER TABLE {table} DROP COLUMN host_id")
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_pkey PRIMARY KEY (id, fetched_at)"
        )
        op.execute(
            f"CREATE UNIQUE INDEX {table}_url_fetched_idx ON {table} (url_id, fetched_at)"
        )

    op.execute("ALTER TABLE urls DROP CONSTRAINT urls_host_id_url_key")
    op.execute("ALTER TABLE urls ADD CONSTRAINT urls_url_key UNIQUE (url)")
    op.execute("ALTER TABLE urls DROP CONSTRAINT urls_pkey")
    op.execute("ALTER TABLE urls ADD CONSTRAINT urls_pkey PRIMARY KEY (id)")
    for table in PER_FETCH:
        op.execute(
            f"ALTER TABLE {table} ADD CONSTRAINT {table}_url_id_fkey "
            "FOREIGN KEY (url_id) REFERENCES urls (id) ON DELETE CASCADE"
        )
    for end in ("from", "to"):
        op.execute(
            f"ALTER TABLE links ADD CONSTRAINT links_{end}_url_id_fkey "
            f"FOREIGN KEY ({end}_url_id) REFERENCES urls (id) ON DELETE CASCADE"
        )

    # hosts: sequence keys again, in origin order.
    op.execute(
        "CREATE TEMPORARY TABLE crawler_host_keys ON COMMIT DROP AS "
        "SELECT id AS old_id, row_number() OVER (ORDER BY origin) AS new_id FROM hosts"
    )
    op.execute("CREATE SEQUENCE hosts_id_seq OWNED BY hosts.id")
    op.execute(
        "UPDATE hosts AS h SET id = k.new_id FROM crawler_host_keys AS k WHERE h.id = k.old_id"
    )
    op.execute(
        "UPDATE urls AS u SET host_id = k.new_id FROM crawler_host_keys AS k "
        "WHERE u.host_id = k.old_id"
    )
    op.execute("ALTER TABLE hosts ADD CONSTRAINT hosts_origin_key UNIQUE (origin)")
    op.execute("SELECT setval('hosts_id_seq', GREATEST((SELECT max(id) FROM hosts), 1))")
    op.execute("ALTER TABLE hosts ALTER COLUMN id SET DEFAULT nextval('hosts_id_seq')")
    op.execute(
        "ALTER TABLE urls ADD CONSTRAINT urls_host_id_fkey FOREIGN KEY (host_id) "
        "REFERENCES hosts (id) ON DELETE CASCADE"
    )
    op.execute("DROP FUNCTION IF EXISTS crawler_url_host_id(text)")
    op.execute("DROP FUNCTION IF EXISTS crawler_host_id(text)")
