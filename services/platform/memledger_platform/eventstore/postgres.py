"""``EventStore`` on PostgreSQL: a recorder of memledger's own on the eventsourcing library's
datastore and table (docs/adr/0002-event-store.md says why).

From the library: the connection pool, the events table with its optimistic concurrency
primary key (stream, version) and the notification ids that are our global positions, and the
EXCLUSIVE table lock that makes commit order equal position order, so a reader that tails
positions never skips a late commit. Ours: the insert (never the library's ``insert_events``),
which writes in one transaction the idempotency records, the events and a ``recorded_at``
assigned under that lock (so it never decreases in position order, even if the clock steps
back), sent with its COMMIT as one pipeline whose exit flushes everything before it waits, so
a large append cannot wedge (docs/adr/0003); and every read.
"""

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Self
from uuid import UUID

import orjson
import psycopg
from eventsourcing.persistence import (
    IntegrityError,
    InterfaceError,
    OperationalError,
    StoredEvent,
)
from eventsourcing.postgres import PostgresApplicationRecorder, PostgresDatastore
from eventsourcing.utils import retry
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.rows import DictRow
from psycopg.sql import SQL, Composed, Identifier, Literal

from memledger_platform.eventstore.interrupting import BusyConnections
from memledger_platform.eventstore.port import (
    Committed,
    EventStore,
    IdempotencyKeyTaken,
    IdempotencyRecord,
    IdempotentResult,
    NewEvent,
    RecordedEvent,
    StreamConflict,
)
from memledger_platform.logshare import Address, Record, StreamShare, read_share
from memledger_platform.pg_locks import creating, exclusively
from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.subjects import partition_of

EVENTS_TABLE = "memledger_events"
_BEGIN, _COMMIT = SQL("BEGIN"), SQL("COMMIT")
_INLINE_OPTION = "toast_tuple_target=8160"
"""Rows up to a page's size are kept whole (the largest value PostgreSQL takes)."""
_COLUMNS = "originator_id, originator_version, topic, state, notification_id, recorded_at"


class _Recorder(PostgresApplicationRecorder):
    """Our recorder. It subclasses the library's only to reuse the table's DDL, the lock
    statements and the notify channel it builds (attributes, not a documented API); it never
    calls the library's insert or overrides its private hooks."""

    def __init__(self, datastore: PostgresDatastore, table: str, partitions: int = 1) -> None:
        super().__init__(datastore, events_table_name=table)
        self.partitions = partitions
        ids = {"schema": Identifier(datastore.schema), "table": Identifier(table),
               "keys": Identifier(f"{table}_idempotency"),
               "type": Identifier(self.stored_event_type_name),
               "index": Identifier(f"{table}_recorded_at_idx"),
               "by_partition": Identifier(f"{table}_partition_idx")}
        self.sql_create_statements.extend([
            SQL("ALTER TABLE {schema}.{table} ADD COLUMN IF NOT EXISTS recorded_at timestamptz "
                "NOT NULL DEFAULT clock_timestamp()").format(**ids),
            SQL("CREATE INDEX IF NOT EXISTS {index} ON {schema}.{table} (recorded_at)"
                ).format(**ids),
            # An event up to a page's size stays in its row: an imported embedding's (~6 KB
            # sealed) was otherwise moved out to the TOAST table in 2 KB chunks, each a row
            # and an index entry of its own, and joined again by every read.
            # Set only when missing: altering takes a lock every process's start would wait on.
            SQL("DO $$ BEGIN IF NOT EXISTS (SELECT FROM pg_class c JOIN pg_namespace n ON "
                "n.oid = c.relnamespace WHERE n.nspname = {schema_name} AND c.relname = "
                "{table_name} AND {option} = ANY(c.reloptions)) THEN ALTER TABLE "
                "{schema}.{table} SET ({option_sql}); END IF; END $$").format(
                schema_name=Literal(datastore.schema), table_name=Literal(table),
                option=Literal(_INLINE_OPTION), option_sql=SQL(_INLINE_OPTION), **ids),
            # The event's partition (ADR 0016), set at commit so every relay agrees on it.
            # Adding a column with a constant default rewrites nothing; its index is built
            # only once partitioned, so one partition's writes cost what they did.
            SQL("ALTER TABLE {schema}.{table} ADD COLUMN IF NOT EXISTS tenant_partition "
                "smallint NOT NULL DEFAULT 0").format(**ids),
            *([SQL("CREATE INDEX IF NOT EXISTS {by_partition} ON {schema}.{table} "
                   "(tenant_partition, notification_id)").format(**ids)]
              if partitions > 1 else []),
            SQL("CREATE TABLE IF NOT EXISTS {schema}.{keys} (tenant_id text NOT NULL, "
                "key text NOT NULL, request_hash text NOT NULL, stream_id uuid NOT NULL, "
                "first_version bigint NOT NULL, last_version bigint NOT NULL, "
                "response jsonb NOT NULL, PRIMARY KEY (tenant_id, key))").format(**ids),
        ])
        # The max() initplan runs after the table lock is taken, so each commit's timestamps
        # start at or after the previous commit's last one. Binary arrays rather than the
        # library's array of composites, for the idempotency records too: psycopg dumps
        # composites and text arrays by escaping each element in Python, which cost more CPU
        # than everything else in an append.
        self.insert_events_statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state, "
            "recorded_at) SELECT e.*, greatest(clock_timestamp(), "
            "(SELECT max(recorded_at) FROM {schema}.{table})) FROM unnest(%b::uuid[], "
            "%b::int8[], %b::text[], %b::bytea[]) AS e RETURNING notification_id, recorded_at"
        ).format(**ids)
        self.insert_partitioned_statement = SQL(
            "INSERT INTO {schema}.{table} (originator_id, originator_version, topic, state, "
            "tenant_partition, recorded_at) SELECT e.*, greatest(clock_timestamp(), "
            "(SELECT max(recorded_at) FROM {schema}.{table})) FROM unnest(%b::uuid[], "
            "%b::int8[], %b::text[], %b::bytea[], %b::int2[]) AS e "
            "RETURNING notification_id, recorded_at").format(**ids)
        self.insert_keys_statement = SQL(
            "INSERT INTO {schema}.{keys} SELECT t, k, h, s, f, l, r::jsonb FROM unnest("
            "%b::text[], %b::text[], %b::text[], %b::uuid[], %b::int8[], %b::int8[], "
            "%b::text[]) AS e (t, k, h, s, f, l, r)").format(**ids)
        self.notify_statement = SQL("NOTIFY {0}").format(Identifier(self.channel_name))

    def append_on(self, conn: psycopg.Connection[DictRow], stored_events: Sequence[StoredEvent],
                  keys: Sequence[IdempotencyRecord]) -> list[Committed]:
        """Insert the keys, then the events under the table lock, in one transaction sent as
        one pipeline: one round trip, the commit in it.

        BEGIN, the statements and COMMIT are queued, then the pipeline's exit flushes all of
        them and reads every result, so the rows are read only once committed. Not the
        library's insert, nor ``Pipeline.sync()``: that flushes its output once and then waits
        for the server, so with part of a large INSERT still unsent both sides waited for
        ever; the exit flushes all of it first (docs/adr/0003). Fetching the rows before
        the COMMIT is sent (as before) waits a second round trip with the table lock held,
        the larger part of a single write's acknowledgement on a busy machine. The keys go
        first, before the lock, as the library orders them: a writer waiting for another's
        key under the table lock would deadlock with it."""
        columns: tuple[list[Any], ...] = (
            [e.originator_id for e in stored_events],
            [e.originator_version for e in stored_events],
            [e.topic for e in stored_events], [e.state for e in stored_events])
        insert = self.insert_events_statement
        if self.partitions > 1:
            insert = self.insert_partitioned_statement
            columns = (*columns, [partition_of(orjson.loads(e.state)["tenant_id"],
                                               self.partitions) for e in stored_events])
        with conn.cursor() as curs, conn.cursor() as inserted:
            try:
                with conn.pipeline():
                    curs.execute(_BEGIN)
                    if keys:
                        curs.execute(self.insert_keys_statement, _key_columns(keys))
                    for statement in self.lock_table_statements:
                        curs.execute(statement, prepare=True)
                    curs.execute(self.notify_statement)
                    inserted.execute(insert, columns)
                    curs.execute(_COMMIT)
            except psycopg.Error as error:  # the pool rolls the failed transaction back
                raise _first_error(error) from None
            return [Committed(row["notification_id"], row["recorded_at"])
                    for row in inserted.fetchall()]


def _first_error(error: psycopg.Error) -> psycopg.Error:
    """The error that failed an append: the statements after a failed one in a pipeline
    fail as ``PipelineAborted``, which may be raised in its stead (with it as its context)."""
    found: BaseException | None = error
    while isinstance(found, psycopg.errors.PipelineAborted):
        found = found.__context__
    return found if isinstance(found, psycopg.Error) else error


def _key_columns(keys: Sequence[IdempotencyRecord]) -> list[list[Any]]:
    return [[k.tenant_id for k in keys], [k.key for k in keys], [k.request_hash for k in keys],
            [k.stream_id for k in keys], [k.first_version for k in keys],
            [k.last_version for k in keys],
            [orjson.dumps(k.response).decode() for k in keys]]


def datastore_from_dsn(dsn: str, *, schema: str = "", pool_size: int = 4) -> PostgresDatastore:
    """A library datastore (connection pool) for a libpq connection string."""
    params = conninfo_to_dict(dsn)
    return PostgresDatastore(
        dbname=str(params.get("dbname", "postgres")), host=str(params.get("host", "127.0.0.1")),
        port=str(params.get("port", 5432)), user=str(params.get("user", "postgres")),
        password=str(params.get("password", "")), pool_size=pool_size, max_overflow=pool_size,
        # No pool_open_timeout: with it, every checkout calls pool.open(wait=True), and
        # psycopg_pool asserts when two threads wait for a full pool at once.
        schema=schema, connect_timeout=10.0)


class PostgresEventStore(EventStore):
    """The system of record. Thread-safe: the pool hands each call its own connection."""

    def __init__(self, datastore: PostgresDatastore, table: str = EVENTS_TABLE, *,
                 partitions: int = 1) -> None:
        """``partitions``: how many the events are split into by tenant (each event's is
        recorded with it at commit: ``MEMLEDGER_EVENT_PARTITIONS``)."""
        self._datastore = datastore
        self._recorder = _Recorder(datastore, table, partitions)
        self._table_name = table
        self._table = Identifier(datastore.schema), Identifier(table)
        self._keys_table = Identifier(datastore.schema), Identifier(f"{table}_idempotency")
        self._busy = BusyConnections()

    @classmethod
    def at(cls, address: Address) -> Self:
        """The store at ``address``, over a connection of its own."""
        return cls(datastore_from_dsn(address.conninfo, schema=address.schema, pool_size=1),
                   address.table)

    def address(self) -> Address:
        """Where this store's log is, for another process to open it (``at``) or read it
        (``logshare.read_share``)."""
        with self._datastore.get_connection() as conn:
            conninfo = make_conninfo(conn.info.dsn, password=conn.info.password or None)
        return Address(conninfo, self._datastore.schema, self._table_name)

    def create_tables(self) -> None:
        """Create the schema objects if missing (safe to call on every start, from several
        processes at once: ``pg_locks.exclusively``)."""
        with self._datastore.get_connection() as conn, exclusively(
                conn, creating(self._datastore.schema)):
            with self._datastore.transaction(commit=True) as curs:
                curs.execute(SQL("CREATE SCHEMA IF NOT EXISTS {0}").format(self._table[0]))
            self._recorder.create_table()

    def close(self) -> None:
        self._datastore.close()

    def append(self, events: Sequence[EventEnvelope | NewEvent],
               keys: Sequence[IdempotencyRecord] = ()) -> list[Committed]:
        stored = [StoredEvent(originator_id=e.stream_id, originator_version=e.stream_version,
                              topic=e.event_type, state=e.data) for e in map(NewEvent.of, events)]
        try:
            committed: list[Committed] = self._append(stored, keys)  # (the retry is untyped)
        except IntegrityError as error:
            raise _classify(error) from error
        return committed

    # A connection the pool kept across a PostgreSQL restart fails on first use: try another,
    # as the library's own insert does. Never after an interrupt: its caller has given up.
    @retry((InterfaceError, OperationalError), max_attempts=10, wait=0.2)
    def _append(self, stored: Sequence[StoredEvent], keys: Sequence[IdempotencyRecord]
                ) -> list[Committed]:
        with self._connection() as conn:
            return self._recorder.append_on(conn, stored, keys)

    def interrupt(self) -> None:
        self._busy.interrupt()

    def read_streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[RecordedEvent]]:
        if not stream_ids:
            return {}
        query = SQL("SELECT {cols} FROM {0}.{1} WHERE originator_id = ANY(%s) "
                    "ORDER BY originator_id, originator_version").format(
            *self._table, cols=SQL(_COLUMNS))
        found: dict[UUID, list[RecordedEvent]] = {}
        for event in self._select(query, (list(stream_ids),)):
            found.setdefault(event.stream_id, []).append(event)
        return found

    def read_all(self, after: int, limit: int) -> list[RecordedEvent]:
        query = SQL("SELECT {cols} FROM {0}.{1} WHERE notification_id > %s "
                    "ORDER BY notification_id LIMIT %s").format(*self._table, cols=SQL(_COLUMNS))
        return list(self._select(query, (after, limit)))

    def read_partition(self, partition: int, after: int, limit: int) -> list[RecordedEvent]:
        """Like ``read_all``, of one partition's events only (what its relay publishes)."""
        query = SQL("SELECT {cols} FROM {0}.{1} WHERE tenant_partition = %s AND "
                    "notification_id > %s ORDER BY notification_id LIMIT %s").format(
            *self._table, cols=SQL(_COLUMNS))
        return list(self._select(query, (partition, after, limit)))

    def read_share(self, after: int, until: int, limit: int, share: StreamShare
                   ) -> list[Record]:
        """Like ``read_all``, of the events of ``share`` up to position ``until`` only, each
        as (position, recorded_at, data): ``logshare.read_share``."""
        with self._connection() as conn:
            return read_share(conn, self._datastore.schema, self._table_name, after, until,
                              limit, share)

    def max_position(self) -> int:
        return self._recorder.max_notification_id() or 0

    def find_idempotent(self, tenant_id: str, keys: Sequence[str]
                        ) -> dict[str, IdempotentResult]:
        if not keys:
            return {}
        query = found_keys_query((*self._table, self._keys_table[1]))
        with self._cursor() as curs:
            curs.execute(query, (tenant_id, list(keys)))
            return {row["key"]: _idempotent_result(row) for row in curs.fetchall()}

    def _select(self, query: SQL | Any, params: tuple[Any, ...]) -> Iterator[RecordedEvent]:
        with self._cursor() as curs:
            curs.execute(query, params)
            for row in curs.fetchall():
                yield _recorded(row)

    @contextmanager
    def _cursor(self) -> Iterator[psycopg.Cursor[DictRow]]:
        # Results in binary: an event's bytea comes as it is stored, not hex-encoded by the
        # server and decoded here, a large part of reading the log (docs/adr/0002).
        with self._connection() as conn, conn.cursor(binary=True) as curs:
            yield curs

    @contextmanager
    def _connection(self) -> Iterator[psycopg.Connection[DictRow]]:
        """A pooled connection, known to ``interrupt`` while in use."""
        with self._datastore.get_connection() as conn, self._busy.track(conn):
            yield conn


def found_keys_query(ids: tuple[Identifier, Identifier, Identifier]) -> Composed:
    """The idempotency records of a tenant's keys (``%s``: the tenant, the keys), each with
    the positions of its events. ``ids``: the schema, the events table, the keys table. Each
    key found reads its own events by the stream's primary key, not by a join: without fresh
    statistics a join is planned as a hash of the keys and a scan of the whole log."""
    return SQL("SELECT * FROM (SELECT k.*, ARRAY(SELECT e.notification_id FROM {0}.{1} e "
               "WHERE e.originator_id = k.stream_id AND e.originator_version BETWEEN "
               "k.first_version AND k.last_version ORDER BY e.originator_version) AS positions "
               "FROM {0}.{2} k WHERE k.tenant_id = %s AND k.key = ANY(%s)) found "
               "WHERE cardinality(positions) > 0").format(*ids)


def _recorded(row: DictRow) -> RecordedEvent:
    return RecordedEvent(position=row["notification_id"], recorded_at=row["recorded_at"],
                         stream_id=row["originator_id"], stream_version=row["originator_version"],
                         event_type=row["topic"], data=bytes(row["state"]))


def _idempotent_result(row: DictRow) -> IdempotentResult:
    record = IdempotencyRecord(
        tenant_id=row["tenant_id"], key=row["key"], request_hash=row["request_hash"],
        stream_id=row["stream_id"], first_version=row["first_version"],
        last_version=row["last_version"], response=row["response"])
    return IdempotentResult(record, tuple(row["positions"]))


def _classify(error: IntegrityError) -> Exception:
    cause = error.__cause__
    constraint = getattr(getattr(cause, "diag", None), "constraint_name", "") or ""
    if constraint.endswith("_idempotency_pkey"):
        return IdempotencyKeyTaken(str(error))
    return StreamConflict(str(error))

