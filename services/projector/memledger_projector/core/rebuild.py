"""Blue/green rebuild of the PostgreSQL read models from the event store.

The new version fills its own schema from position 1 while the live one keeps answering and
the projector keeps feeding it. To switch, the rebuild takes the pointer row FOR UPDATE (the
projector holds it FOR SHARE per batch, so it pauses), applies what is left, flips the pointer
and commits: the projector then continues on the new version from its checkpoint. The
previous version is kept for a rollback; older ones are dropped.
"""

import hashlib
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import psycopg
from psycopg import Connection, sql
from psycopg.conninfo import make_conninfo

from memledger_platform.crypto import Opener
from memledger_platform.events import VECTOR, decode
from memledger_platform.eventstore import EventStore
from memledger_platform.eventstore.opened import OpenedEventStore
from memledger_platform.eventstore.postgres import PostgresEventStore
from memledger_platform.logshare import Record, StreamShare
from memledger_platform.readmodel import schema
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_projector.core import bulk, store
from memledger_projector.core.bulk import RebuildStopped
from memledger_projector.core.fold_worker import Folded, FoldWorker
from memledger_projector.core.readahead import PAGE, Pages, ReadFailed

__all__ = ["BULK_EVENTS", "PARALLEL_FROM", "RebuildStopped", "Rebuilt", "model_hash",
           "rebuild", "routed_to_worker"]

Progress = Callable[[int, int], None]
"""Called with (position reached, target position)."""

BULK_EVENTS = 500_000
"""How many positions of the log a rebuild folds in memory before writing (bounds its
memory)."""
PARALLEL_FROM = 20_000
"""The length of log from which a rebuild folds in two processes (below it, starting the
second one costs more than it saves)."""
WORKER_SHARE = StreamShare("memory.", 9, 4)
"""The fold worker's share of the log: the memory events of 4 streams in 9 (an item's
events are all in its stream; the rebuild folds every other event). A little under half:
the worker starts later than the rebuild, which also has the few other events to fold."""
_HASHED = {
    "spaces": "tenant_id, space_id", "agents": "tenant_id, agent_id",
    "sessions": "tenant_id, session_id", "messages": "tenant_id, message_id",
    "preferences": "tenant_id, position", "signals": "tenant_id, position",
    "mentions": "tenant_id, position, ordinal",
    "items": "tenant_id, item_id", "entities": "tenant_id, space_id, entity_id",
    "relations": "tenant_id, relation_id", "changes": "position",
}


@dataclass(frozen=True)
class Rebuilt:
    version: int
    previous: int
    position: int
    events: int
    processes: int = 1
    """How many processes folded the log (2: the rebuild and its fold worker)."""


def rebuild(conn: Connection[Any], event_store: EventStore, names: schema.Names,
            progress: Progress | None = None, *, parallel: bool | None = None) -> Rebuilt:
    """Rebuild into a new version and switch to it; return what was done. ``parallel``: fold
    in two processes (by default from ``PARALLEL_FROM`` events on; the result is the same),
    if the log is in PostgreSQL (the second process reads its share from there). An
    ``OpenedEventStore`` is read sealed, and each event opened as the fold parses it."""
    event_store, opener = _sealed(event_store)
    store.tune(conn)
    live = schema.ensure_pointer(conn, names)
    version = live + 1
    conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
        sql.Identifier(names.schema(version))))  # a leftover of an interrupted rebuild
    until = event_store.max_position()
    target = schema.create(conn, names, version, indexes=False)
    parallel = until >= PARALLEL_FROM if parallel is None else parallel
    log = _Log(event_store, opener)
    # The fold stays alive until released during the index phase: the cycle collector,
    # resumed before then, would traverse its millions of objects for nothing.
    with _commits_unawaited(conn), bulk.cycle_collector_paused():
        loaded = _bulk(conn, log, target, until, progress, parallel)
        _add_indexes(conn, target, loaded, until)
        if loaded.last is not None:  # the load is complete only now, change log included
            store.write_checkpoint(conn, target, *loaded.last)
        events = loaded.count + _fill(conn, log, target, until, progress)
    with conn.transaction():  # awaited: its commit puts every one before it on disk too
        schema.live_version(conn, names, lock="FOR UPDATE")
        events += _fill(conn, log, target, None, progress)
        schema.switch(conn, names, version)
    _drop_older(conn, names, live)
    return Rebuilt(version, live, read_checkpoint(conn, target).position, events,
                   loaded.processes)


@dataclass(frozen=True)
class _Log:
    """The log as the rebuild reads it: sealed, and how to open an event."""

    store: EventStore
    opener: Opener | None


def _sealed(event_store: EventStore) -> tuple[EventStore, Opener | None]:
    # Opening as the fold parses saves the opened store's parse and re-encoding of every
    # sealed event, and lets the fold worker open its own share; each key's cipher is made
    # once for the rebuild.
    if isinstance(event_store, OpenedEventStore):
        sealed, opener = event_store.sealed
        return sealed, opener.for_run()
    return event_store, None


@dataclass(frozen=True)
class _Loaded:
    """What the bulk load wrote: how many events, folded in how many processes; the change
    log's lines, one part per process (written with the indexes); the position and time of
    the last event (``None``: there was none)."""

    count: int
    processes: int
    change_log: tuple[bulk.ChangeLog, ...]
    last: tuple[int, datetime] | None
    loader: bulk.Loader
    """This process' fold, written: to release while the server builds the indexes."""


def _bulk(conn: Connection[Any], log: _Log, target: str, until: int,
          progress: Progress | None, parallel: bool, limit: int = BULK_EVENTS) -> _Loaded:
    """Fold the log up to position ``until`` (``limit`` at most) in memory and load it into
    the empty ``target`` (no per-batch reads or updates; indexes come after), all but the
    change log. ``parallel``: with a fold worker reading and folding its share of the memory
    items."""
    until = min(until, limit)
    if parallel and isinstance(log.store, PostgresEventStore):
        loaded = _bulk_in_two(conn, log.store, log.opener, target, until, progress)
        if loaded is not None:
            return loaded
    return _bulk_in_one(conn, log, target, until, progress)


def _bulk_in_one(conn: Connection[Any], log: _Log, target: str, until: int,
                 progress: Progress | None) -> _Loaded:
    def pages(after: int) -> list[Record]:
        return [(e.position, e.recorded_at, e.data)
                for e in log.store.read_all(after, PAGE) if e.position <= until]

    loader = bulk.Loader(conn, target, log.opener)
    with conn.transaction(), _stopping(loader):
        count, last = _fold_log(loader, pages, until, progress)
        loader.write()
    return _Loaded(count, 1, (loader.change_log,), last, loader)


def _bulk_in_two(conn: Connection[Any], log: PostgresEventStore, opener: Opener | None,
                 target: str, until: int, progress: Progress | None) -> _Loaded | None:
    """Like ``_bulk_in_one``, with a worker process reading, folding and writing its share
    of the log meanwhile. ``None`` (nothing written) if an item turned up on both sides (its
    events were not all in one stream)."""
    keys = opener.keys if opener is not None else None
    worker = FoldWorker(_conninfo(conn), target, log.address(), WORKER_SHARE, until, keys)
    mine = WORKER_SHARE.other()
    loader = bulk.Loader(conn, target, opener)
    try:
        with conn.transaction(), _stopping(loader):
            try:
                count, last = _fold_log(
                    loader, lambda after: log.read_share(after, until, PAGE, mine), until,
                    progress)
            except RebuildStopped as stopped:
                raise _earliest(stopped, worker) from stopped.__cause__
            folded = worker.finish()
            if not _apart(folded, loader):
                worker.conclude(write=False)
                raise psycopg.Rollback
            worker.conclude(write=True)
            loader.write()  # meanwhile the worker writes its rows (no two rows are the same)
            theirs = worker.done()  # committed
            last = max(filter(None, (last, folded.last)), default=None)
            if last is not None and progress is not None:
                progress(last[0], until)
            return _Loaded(count + folded.count, 2, (loader.change_log, theirs), last, loader)
    finally:
        worker.close()
    return None


def _apart(folded: Folded, loader: bulk.Loader) -> bool:
    """Whether the worker folded only items, none of which this process folded too."""
    return folded.only_items and folded.item_keys.isdisjoint(loader.item_keys())


def _fold_log(loader: bulk.Loader, pages: Pages, until: int, progress: Progress | None
              ) -> tuple[int, tuple[int, datetime] | None]:
    """Fold the pages of the log, reporting each page's last position to ``progress``."""
    def seen(page: list[Record]) -> None:
        if progress is not None:
            progress(page[-1][0], until)

    return bulk.fold_pages(loader, pages, seen)


def routed_to_worker(stream_id: UUID, event_type: str) -> bool:
    """Whether a parallel rebuild has its fold worker fold this event."""
    return WORKER_SHARE.holds(stream_id, event_type)


def _earliest(stopped: RebuildStopped, worker: FoldWorker) -> RebuildStopped:
    """The first batch that failed: ``stopped``, unless the worker failed on an earlier one."""
    try:
        worker.finish()
    except RebuildStopped as earlier:
        return earlier if earlier.first < stopped.first else stopped
    except Exception:  # noqa: S110 -- the rebuild stops for ``stopped`` anyway
        pass
    return stopped


@contextmanager
def _stopping(loader: bulk.Loader) -> Iterator[None]:
    """Any error but a read's stops the rebuild (a read's is raised as the store raised it)."""
    try:
        yield
    except (RebuildStopped, psycopg.Rollback):
        raise
    except ReadFailed as failed:
        raise failed.error from None
    except Exception as error:
        raise RebuildStopped(1, loader.reached, error) from error


def _add_indexes(conn: Connection[Any], target: str, loaded: _Loaded, until: int) -> None:
    """Write the change log and build its indexes on a second connection, while this one
    builds the other tables' indexes and the no-overlap constraint: two server processes,
    and the second would otherwise have been idle (the constraint takes the longest). The
    fold is released meanwhile too, while this thread only waits for the server."""
    rest = [t for t in schema.INDEXED if t != "changes"]
    with _sibling(conn) as other, ThreadPoolExecutor(2, "rebuild-index") as pool:
        log = pool.submit(_write_change_log, other, target, loaded.change_log, until)
        pool.submit(loaded.loader.release)
        schema.add_indexes(conn, target, rest)
        log.result()


def _write_change_log(conn: Connection[Any], target: str,
                      change_log: tuple[bulk.ChangeLog, ...], until: int) -> None:
    try:
        with conn.transaction():
            bulk.write_change_log(conn, target, *change_log)
    except psycopg.Error as error:  # the server refused a line (the error says which)
        raise RebuildStopped(1, until, error) from error
    schema.add_indexes(conn, target, ("changes",))


def _sibling(conn: Connection[Any]) -> Connection[Any]:
    """Another connection to the same database as ``conn``, as the same user, whose commits
    are not awaited (``_commits_unawaited``)."""
    other = psycopg.connect(_conninfo(conn), autocommit=True)
    other.execute("SET synchronous_commit = off")
    return other


@contextmanager
def _commits_unawaited(conn: Connection[Any]) -> Iterator[None]:
    """Within the block, a commit on ``conn`` returns before its WAL is on disk
    (``synchronous_commit`` off). Safe for what a rebuild writes before it switches: nobody
    reads the new schema until then; a crash meanwhile leaves a partial schema that the next
    rebuild drops; and the switch's own commit is awaited, which puts all the WAL before it
    on disk. Otherwise each bulk commit would wait for the disk."""
    before = conn.execute("SHOW synchronous_commit").fetchone()
    conn.execute("SET synchronous_commit = off")
    try:
        yield
    finally:
        if before is not None and not conn.broken:
            conn.execute("SELECT set_config('synchronous_commit', %s, false)", (before[0],))


def _conninfo(conn: Connection[Any]) -> str:
    return make_conninfo(conn.info.dsn, password=conn.info.password or None)


def _fill(conn: Connection[Any], log: _Log, target: str, until: int | None,
          progress: Progress | None) -> int:
    """Apply events after ``target``'s checkpoint, up to ``until`` (``None``: all there are)."""
    count = 0
    end = until if until is not None else log.store.max_position()
    while True:
        after = read_checkpoint(conn, target).position
        batch = log.store.read_all(after, PAGE)
        if until is not None:
            batch = [e for e in batch if e.position <= until]
        if not batch:
            return count
        try:
            with conn.transaction():
                store.apply_to(conn, target, [
                    decode(e.data, position=e.position, recorded_at=e.recorded_at,
                           opener=log.opener, skip=VECTOR) for e in batch])
        except Exception as error:
            raise RebuildStopped(batch[0].position, batch[-1].position, error) from error
        count += len(batch)
        if progress is not None:
            progress(batch[-1].position, max(end, batch[-1].position))


def _drop_older(conn: Connection[Any], names: schema.Names, keep_from: int) -> None:
    for version in range(1, keep_from):
        conn.execute(sql.SQL("DROP SCHEMA IF EXISTS {} CASCADE").format(
            sql.Identifier(names.schema(version))))


def model_hash(conn: Connection[Any], schema_name: str) -> str:
    """A digest of a projection's content: equal for two models built from the same events
    (row ids and other storage details left out)."""
    digest = hashlib.sha256()
    for table, order in _HASHED.items():
        _hash_rows(conn, digest, sql.SQL("SELECT * FROM {}.{} ORDER BY {}").format(
            sql.Identifier(schema_name), sql.Identifier(table), sql.SQL(order)))
    _hash_rows(conn, digest, sql.SQL(
        "SELECT tenant_id, item_id, valid, sys_from, sys_to, attrs, cause FROM "
        "{}.item_versions ORDER BY tenant_id, item_id, sys_from, lower(valid)").format(
        sql.Identifier(schema_name)))
    checkpoint = read_checkpoint(conn, schema_name)
    digest.update(str(checkpoint.position).encode())
    return digest.hexdigest()


def _hash_rows(conn: Connection[Any], digest: "hashlib._Hash", query: sql.Composed) -> None:
    with conn.cursor() as cur:
        cur.execute(query)
        for row in cur:
            digest.update(repr(row).encode())
