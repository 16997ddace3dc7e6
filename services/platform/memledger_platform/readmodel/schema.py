"""The read models' tables. Each projection version lives in its own PostgreSQL schema
(``memledger_rm_<n>``), so a rebuild can fill a new one while the live one answers; the
``memledger_projection`` table says which one is live."""

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any, Literal

from psycopg import Connection, sql

from memledger_platform import receipts
from memledger_platform.pg_locks import creating, exclusively

POINTER_TABLE = "memledger_projection"
PROJECTION = "postgres"

_TABLES = """
CREATE EXTENSION IF NOT EXISTS btree_gist;
CREATE SCHEMA IF NOT EXISTS {s};
CREATE TABLE IF NOT EXISTS {s}.checkpoint (
    id int PRIMARY KEY DEFAULT 1 CHECK (id = 1), position bigint NOT NULL,
    stream_seq bigint NOT NULL DEFAULT 0, recorded_at timestamptz);
INSERT INTO {s}.checkpoint (position) VALUES (0) ON CONFLICT DO NOTHING;
CREATE TABLE IF NOT EXISTS {s}.spaces (
    tenant_id text, space_id text, name text, description text, status text NOT NULL,
    policy jsonb, policy_version int NOT NULL, created_position bigint NOT NULL,
    updated_position bigint NOT NULL, created_at timestamptz, updated_at timestamptz,
    PRIMARY KEY (tenant_id, space_id));
CREATE TABLE IF NOT EXISTS {s}.agents (
    tenant_id text, agent_id text, name text, description text, registered_at timestamptz,
    position bigint, PRIMARY KEY (tenant_id, agent_id));
CREATE TABLE IF NOT EXISTS {s}.sessions (
    tenant_id text, space_id text NOT NULL, session_id uuid, agent_id text, title text,
    status text NOT NULL, started_at timestamptz, ended_at timestamptz,
    updated_position bigint,
    PRIMARY KEY (tenant_id, session_id));
CREATE TABLE IF NOT EXISTS {s}.messages (
    tenant_id text, space_id text NOT NULL, session_id uuid NOT NULL, message_id uuid,
    position bigint NOT NULL, role text NOT NULL, content text NOT NULL, participant text,
    agent_id text, recorded_at timestamptz NOT NULL, said_at timestamptz,
    PRIMARY KEY (tenant_id, message_id));
CREATE TABLE IF NOT EXISTS {s}.preferences (
    tenant_id text, space_id text NOT NULL, position bigint, source_item_id uuid NOT NULL,
    rule_id text NOT NULL, category text NOT NULL, value text NOT NULL,
    confidence float8 NOT NULL, recorded_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, position));
-- one row per feedback.recorded (signal rating, used or unused) and memory.reaffirmed
-- (signal reaffirmed): what an item's learned utility is computed from, as of a position
CREATE TABLE IF NOT EXISTS {s}.signals (
    tenant_id text, space_id text NOT NULL, position bigint, item_id uuid NOT NULL,
    signal text NOT NULL, rating smallint, recorded_at timestamptz NOT NULL,
    PRIMARY KEY (tenant_id, position));
-- one row per entity an extraction found (ordinal: its place in the list); an extraction
-- that found none (or whose entities were erased) keeps one nameless row, so it still
-- counts as the item's latest extraction
CREATE TABLE IF NOT EXISTS {s}.mentions (
    tenant_id text, space_id text NOT NULL, item_id uuid NOT NULL, item_version int NOT NULL,
    position bigint, ordinal int, name text, name_key text, type text,
    PRIMARY KEY (tenant_id, position, ordinal));
CREATE TABLE IF NOT EXISTS {s}.items (
    tenant_id text, space_id text NOT NULL, item_id uuid, kind text NOT NULL,
    status text NOT NULL, superseded_by uuid, session_id uuid, agent_id text,
    version int NOT NULL, created_position bigint NOT NULL, updated_position bigint NOT NULL,
    created_at timestamptz, updated_at timestamptz, reaffirmed_at timestamptz,
    retracted_position bigint, superseded_position bigint, archived_position bigint,
    PRIMARY KEY (tenant_id, item_id));
CREATE TABLE IF NOT EXISTS {s}.item_versions (
    row_id bigserial PRIMARY KEY, tenant_id text NOT NULL, item_id uuid NOT NULL,
    valid tstzrange NOT NULL, sys_from bigint NOT NULL, sys_to bigint,
    attrs jsonb NOT NULL, cause jsonb NOT NULL,
    CHECK (sys_to IS NULL OR sys_to > sys_from));
CREATE TABLE IF NOT EXISTS {s}.entities (
    tenant_id text, space_id text, entity_id text, name text NOT NULL, type text NOT NULL,
    aliases text[] NOT NULL, created_position bigint NOT NULL, updated_position bigint,
    PRIMARY KEY (tenant_id, space_id, entity_id));
CREATE TABLE IF NOT EXISTS {s}.relations (
    tenant_id text, space_id text NOT NULL, relation_id uuid, source_entity text NOT NULL,
    relation_type text NOT NULL, target_entity text NOT NULL, confidence float8,
    status text NOT NULL, valid_from timestamptz, valid_to timestamptz,
    asserted_position bigint, retracted_position bigint, PRIMARY KEY (tenant_id, relation_id));
CREATE TABLE IF NOT EXISTS {s}.changes (
    position bigint PRIMARY KEY, tenant_id text NOT NULL, space_id text NOT NULL,
    event_type text NOT NULL, event_id uuid NOT NULL, subject text NOT NULL, actor text,
    reason text, recorded_at timestamptz NOT NULL, valid_from timestamptz,
    valid_to timestamptz, payload jsonb NOT NULL);
"""

_ADDED_COLUMNS = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM information_schema.columns WHERE table_schema = {name}
                   AND table_name = 'messages' AND column_name = 'said_at') THEN
        -- a projection made before messages had a said_at: theirs is when they were
        -- recorded (none could name another), as a rebuild would make it
        ALTER TABLE {s}.messages ADD COLUMN said_at timestamptz;
        UPDATE {s}.messages SET said_at = recorded_at;
    END IF;
END $$;
"""
"""Columns added to a published table, added (and filled) in a projection that lacks them."""

_INDEXES = {
    "messages": "CREATE INDEX IF NOT EXISTS messages_by_session ON {s}.messages "
                "(tenant_id, session_id, position);",
    "sessions": "CREATE INDEX IF NOT EXISTS sessions_by_space ON {s}.sessions "
                "(tenant_id, space_id, started_at, session_id);",
    "preferences": "CREATE INDEX IF NOT EXISTS preferences_by_space ON {s}.preferences "
                   "(tenant_id, space_id, position);",
    "signals": """
CREATE INDEX IF NOT EXISTS signals_by_item ON {s}.signals (tenant_id, item_id, position);
CREATE INDEX IF NOT EXISTS signals_by_space ON {s}.signals (tenant_id, space_id, signal,
                                                            position);
""",
    "mentions": """
CREATE INDEX IF NOT EXISTS mentions_by_name ON {s}.mentions (tenant_id, space_id, name_key,
                                                              position);
CREATE INDEX IF NOT EXISTS mentions_by_item ON {s}.mentions (tenant_id, item_id, position);
""",
    "items": "CREATE INDEX IF NOT EXISTS items_by_space ON {s}.items "
             "(tenant_id, space_id, status);",
    "item_versions": "CREATE INDEX IF NOT EXISTS versions_by_item ON {s}.item_versions "
                     "(tenant_id, item_id, sys_from);",
    "relations": """
CREATE INDEX IF NOT EXISTS relations_by_source ON {s}.relations (tenant_id, space_id,
                                                                 source_entity);
CREATE INDEX IF NOT EXISTS relations_by_target ON {s}.relations (tenant_id, space_id,
                                                                 target_entity);
""",
    "changes": """
CREATE INDEX IF NOT EXISTS changes_by_space ON {s}.changes (tenant_id, space_id, position);
CREATE INDEX IF NOT EXISTS changes_by_subject ON {s}.changes (tenant_id, subject, position);
CREATE INDEX IF NOT EXISTS changes_by_time ON {s}.changes (tenant_id, recorded_at);
CREATE INDEX IF NOT EXISTS changes_recorded ON {s}.changes (recorded_at, position);
""",
}
INDEXED = tuple(_INDEXES)
"""The tables with secondary indexes (``item_versions`` also has the no-overlap constraint)."""

_NO_OVERLAP = """
DO $$ BEGIN
    IF NOT EXISTS (SELECT 1 FROM pg_constraint WHERE conname = 'current_rows_never_overlap'
                   AND connamespace = {name}::regnamespace) THEN
        -- no two current rows of an item overlap in valid time (item_id first: the most
        -- selective column leads, so checking a row is one narrow descent, not a scan of
        -- the tenant's part of the tree; it made building the constraint 2.5x faster)
        ALTER TABLE {s}.item_versions ADD CONSTRAINT current_rows_never_overlap
            EXCLUDE USING gist (item_id WITH =, tenant_id WITH =, valid WITH &&)
            WHERE (sys_to IS NULL);
    END IF;
END $$;
"""


_PARTITIONS = """
ALTER TABLE {s}.checkpoint ADD COLUMN IF NOT EXISTS tenant_partition int NOT NULL DEFAULT 0;
ALTER TABLE {s}.checkpoint DROP CONSTRAINT IF EXISTS checkpoint_id_check;
CREATE UNIQUE INDEX IF NOT EXISTS checkpoint_by_partition ON {s}.checkpoint (tenant_partition);
INSERT INTO {s}.checkpoint (id, tenant_partition, position)
    SELECT p + 1, p, 0 FROM generate_series(1, {last}) AS p ON CONFLICT DO NOTHING;
"""
"""One checkpoint row per partition of the events (docs/adr/0016): the table had one row
(``id`` 1) before partitions, which stays partition 0's; partition ``p``'s row has ``id``
``p + 1``."""


@dataclass(frozen=True)
class Names:
    """Where the read models live: the pointer table in ``base`` (the configured schema), the
    projection versions in schemas named after it. ``partitions``: how many the events are
    split into (a checkpoint each)."""

    base: str = "public"
    partitions: int = 1

    @property
    def pointer(self) -> sql.Composed:
        return sql.SQL("{}.{}").format(sql.Identifier(self.base), sql.Identifier(POINTER_TABLE))

    def schema(self, version: int) -> str:
        return f"{self._stem}_rm_{version}"

    @property
    def projected(self) -> str:
        """The channel on which each projector batch's commit announces the live checkpoint it
        reached (``projected_notice``)."""
        return f"{self._stem}_projected"

    @property
    def written(self) -> str:
        """The channel on which a consumer's record of the position it has written up to (the
        vector index's) announces it (``ConsumerPositions.record_written``)."""
        return f"{self._stem}_written"

    @property
    def _stem(self) -> str:
        return "memledger" if self.base == "public" else self.base


def projected_notice(position: int, partition: int | None) -> str:
    """What a projector batch announces: the live read models' checkpoint, ``position`` (the
    whole log's), or ``"<partition> <position>"`` (one partition's)."""
    return str(position) if partition is None else f"{partition} {position}"


def whole_log_position(notice: str) -> int | None:
    """The checkpoint a ``projected_notice`` of the whole log's events announces, else
    ``None`` (one partition's, or not a notice)."""
    return int(notice) if notice.isdigit() else None


def create(conn: Connection[Any], names: Names, version: int, *, indexes: bool = True) -> str:
    """Create (if missing) the tables of projection ``version``; return the schema name.
    ``indexes=False`` leaves out the secondary indexes and the exclusion constraint, for a
    bulk load (``add_indexes`` afterwards builds each in one pass)."""
    name = names.schema(version)
    conn.execute(sql.SQL(_TABLES).format(s=sql.Identifier(name)))
    conn.execute(sql.SQL(_ADDED_COLUMNS).format(s=sql.Identifier(name), name=sql.Literal(name)))
    conn.execute(sql.SQL(_PARTITIONS).format(s=sql.Identifier(name),
                                             last=sql.Literal(names.partitions - 1)))
    if indexes:
        add_indexes(conn, name)
    return name


def add_indexes(conn: Connection[Any], name: str, tables: Collection[str] = INDEXED) -> None:
    """The secondary indexes of ``tables`` and, with ``item_versions``, the no-overlap
    constraint (which also checks the rows)."""
    for table in tables:
        conn.execute(sql.SQL(_INDEXES[table]).format(s=sql.Identifier(name)))
    if "item_versions" in tables:
        conn.execute(sql.SQL(_NO_OVERLAP).format(s=sql.Identifier(name), name=sql.Literal(name)))


def prepare(conn: Connection[Any], names: Names) -> int:
    """``ensure_pointer`` and the erasure receipts table, created by one process at a time
    (the query service and the projector start together: ``pg_locks.exclusively``)."""
    with exclusively(conn, creating(names.base)):
        receipts.ensure(conn, names.base)
        return ensure_pointer(conn, names)


def ensure_pointer(conn: Connection[Any], names: Names) -> int:
    """The live projection version, creating version 1 on first use."""
    conn.execute(sql.SQL("CREATE SCHEMA IF NOT EXISTS {}").format(sql.Identifier(names.base)))
    conn.execute(sql.SQL("CREATE TABLE IF NOT EXISTS {} (name text PRIMARY KEY, "
                         "version int NOT NULL)").format(names.pointer))
    conn.execute(sql.SQL("INSERT INTO {} VALUES (%s, 1) ON CONFLICT DO NOTHING").format(
        names.pointer), (PROJECTION,))
    version = live_version(conn, names)
    create(conn, names, version)
    return version


Lock = Literal["", "FOR SHARE", "FOR UPDATE"]


def live_version(conn: Connection[Any], names: Names, *, lock: Lock = "") -> int:
    """The live projection version (``lock``: "FOR SHARE" or "FOR UPDATE" inside a
    transaction, to serialise with a blue/green switch)."""
    row = conn.execute(sql.SQL("SELECT version FROM {} WHERE name = %s " + lock).format(  # noqa: S608
        names.pointer), (PROJECTION,)).fetchone()
    if row is None:
        raise LookupError("no projection yet: the projector has not started")
    return int(row[0])


def kept_versions(conn: Connection[Any], names: Names) -> list[int]:
    """The live version, then the previous one if a rebuild kept it for a rollback."""
    live = live_version(conn, names)
    previous = conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s",
                            (names.schema(live - 1),)).fetchone()
    return [live, live - 1] if previous is not None and live > 1 else [live]


def switch(conn: Connection[Any], names: Names, version: int) -> None:
    conn.execute(sql.SQL("UPDATE {} SET version = %s WHERE name = %s").format(names.pointer),
                 (version, PROJECTION))
