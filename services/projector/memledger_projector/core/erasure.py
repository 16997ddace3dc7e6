"""Scrubbing a data subject from the PostgreSQL read models when ``subject.erased`` arrives,
then taking what the scrub left below SQL out of PostgreSQL's files.

The subject's events are found in the event store: those whose envelope names the subject, and
those sealed with one of its destroyed keys (an audited query sealed under several subjects
names only one). Every row built from them gets the same placeholders a replay or rebuild
shows once the keys are gone (``crypto.PERSONAL``), so a scrubbed live model and a model
rebuilt after the erasure are equal. Idempotent: scrubbing twice changes nothing more.

An UPDATE leaves the old row version, plaintext included, in the table's pages (and index
entries pointing at it) until a VACUUM; ANALYZE may have sampled it into ``pg_statistic``; and
the write-ahead log holds every version written. ``erase`` deals with each (see ADR 0007 for
what stays: freed page space and recycled WAL segments until overwritten).
"""

import contextlib
import time
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, LiteralString

import orjson
import psycopg
from psycopg import Connection, sql

from memledger_platform import pg_vacuum
from memledger_platform.crypto import COMBINED, ERASED, PERSONAL
from memledger_platform.eventstore.postgres import EVENTS_TABLE
from memledger_schemas.event_types import EventType

Purged = dict[str, Any]
Events = dict[str, list[tuple[int, dict[str, Any]]]]
"""Event type → (position, payload as stored) of the subject's events."""

SCRUBBED = ("item_versions", "messages", "preferences", "mentions", "entities", "sessions",
            "changes")
"""The read-model tables a scrub changes (so that ``erase`` vacuums)."""

SETTLE_SECONDS = 20.0
"""How long an erasure's VACUUMs wait, in all, for transactions older than the scrub (which
still see the scrubbed rows' old versions) to end; a table still holding some then is left
out of the receipt's ``vacuumed``, and autovacuum removes them once they end."""


def scrub(conn: Connection[Any], schema: str, base: str, tenant: str, subject: str,
          before: int, key_ids: Sequence[str] = ()) -> Purged:
    """Scrub every row built from ``subject``'s events (in ``tenant``, before position
    ``before``; ``key_ids``: its destroyed keys); how many rows of each table were scrubbed."""
    events = _subject_events(conn, base, tenant, subject, before, key_ids)
    by_type: Events = defaultdict(list)
    for position, event_type, payload in events:
        by_type[event_type].append((position, payload))
    s = sql.Identifier(schema)
    return {**_scrub_items(conn, s, tenant, by_type), **_scrub_talk(conn, s, tenant, by_type),
            "changes": _scrub_changes(conn, schema, events)}


def _scrub_items(conn: Connection[Any], s: sql.Identifier, tenant: str, by_type: Events
                 ) -> Purged:
    item_ids = [p["item_id"] for t in (EventType.MEMORY_ASSERTED, EventType.MEMORY_REVISED)
                for _, p in by_type[t]]
    erased: dict[str, Any] = {"content": ERASED, "triple": None, "tags": []}
    return {
        "item_versions": _count(conn, sql.SQL(
            "UPDATE {}.item_versions SET attrs = attrs || %s::jsonb WHERE tenant_id = %s AND "
            "item_id = ANY(%s::uuid[])").format(s),
            (orjson.dumps(erased).decode(), tenant, item_ids)),
        "preferences": _count(conn, sql.SQL(
            "UPDATE {}.preferences SET value = %s WHERE tenant_id = %s AND "
            "position = ANY(%s)").format(s),
            (ERASED, tenant, [pos for pos, _ in by_type[EventType.PREFERENCE_EXTRACTED]])),
        "mentions": _scrub_mentions(conn, s, tenant, [
            pos for pos, _ in by_type[EventType.ENTITIES_EXTRACTED]]),
        "entities": _count(conn, sql.SQL(
            "UPDATE {}.entities SET name = %s, aliases = '{{}}' WHERE tenant_id = %s AND "
            "entity_id = ANY(%s)").format(s),
            (ERASED, tenant, [p["entity_id"] for _, p in by_type[EventType.ENTITY_UPSERTED]]))}


def _scrub_talk(conn: Connection[Any], s: sql.Identifier, tenant: str, by_type: Events
                ) -> Purged:
    """Messages, and the titles of sessions (those that had one: a title left out stays
    null, as a rebuild leaves it)."""
    titled = [p["session_id"] for _, p in by_type[EventType.SESSION_STARTED]
              if p.get("title") is not None]
    return {
        "messages": _count(conn, sql.SQL(
            "UPDATE {}.messages SET content = %s, participant = NULL WHERE tenant_id = %s AND "
            "message_id = ANY(%s::uuid[])").format(s),
            (ERASED, tenant, [p["message_id"] for _, p in
                              by_type[EventType.MESSAGE_APPENDED]])),
        "sessions": _count(conn, sql.SQL(
            "UPDATE {}.sessions SET title = %s WHERE tenant_id = %s AND "
            "session_id = ANY(%s::uuid[]) AND title IS DISTINCT FROM %s").format(s),
            (ERASED, tenant, titled, ERASED))}


def _subject_events(conn: Connection[Any], base: str, tenant: str, subject: str, before: int,
                    key_ids: Sequence[str]) -> list[tuple[int, str, dict[str, Any]]]:
    # A scan of the log: erasures are rare, and the log is the one place that knows every
    # event of the subject (the read models keep no subject column).
    rows = conn.execute(sql.SQL(
        "SELECT notification_id, doc FROM (SELECT notification_id, convert_from(state, "
        "'UTF8')::jsonb AS doc FROM {}.{} WHERE notification_id < %s) e WHERE "
        "doc->>'tenant_id' = %s AND (doc->>'subject_id' = %s OR "
        "string_to_array(doc->>'key_id', %s) && %s::text[]) ORDER BY notification_id"
    ).format(sql.Identifier(base), sql.Identifier(EVENTS_TABLE)),
        (before, tenant, subject, COMBINED, list(key_ids))).fetchall()
    return [(int(position), doc["event_type"], doc["payload"]) for position, doc in rows]


def _scrub_mentions(conn: Connection[Any], s: sql.Identifier, tenant: str, positions: list[int]
                    ) -> int:
    """Each extraction keeps its first row, nameless: what a rebuild makes of an extraction
    whose entities open to ``[]``."""
    params = (tenant, positions)
    return _count(conn, sql.SQL(
        "DELETE FROM {}.mentions WHERE tenant_id = %s AND position = ANY(%s) AND ordinal > 0"
    ).format(s), params) + _count(conn, sql.SQL(
        "UPDATE {}.mentions SET name = NULL, name_key = NULL, type = NULL WHERE tenant_id = %s "
        "AND position = ANY(%s) AND name IS NOT NULL").format(s), params)


def _scrub_changes(conn: Connection[Any], schema: str,
                   events: list[tuple[int, str, dict[str, Any]]]) -> int:
    """The change log keeps each event's payload (its vector left out) and its reason: its
    personal fields get their placeholders, exactly where the event had a value."""
    changed = 0
    s = sql.Identifier(schema)
    for position, event_type, payload in events:
        fields = {name: placeholder for name, placeholder in PERSONAL.get(event_type, {}).items()
                  if payload.get(name) not in (None, [], {}) and name != "vector"}
        if fields:
            patch = orjson.dumps(fields).decode()
            changed += _count(conn, sql.SQL(
                "UPDATE {}.changes SET payload = payload || %s::jsonb, reason = "
                "coalesce(%s, reason) WHERE position = %s AND payload IS DISTINCT FROM "
                "payload || %s::jsonb").format(s),
                (patch, fields.get("reason"), position, patch))
    return changed


def _count(conn: Connection[Any], query: sql.Composed, params: tuple[Any, ...]) -> int:
    return conn.execute(query, params).rowcount


def erase(conn: Connection[Any], schemas: Sequence[str], base: str, tenant: str,
          subject: str, before: int, key_ids: Sequence[str]) -> Purged:
    """``scrub`` each read-model version of ``schemas`` (the live one first: the counts are
    its), vacuum and analyze the scrubbed tables, then ``pg_statistic`` and the WAL. A later
    version that a rebuild dropped meanwhile is skipped: nothing of it is left to scrub."""
    deadline = time.monotonic() + SETTLE_SECONDS
    counts = scrub(conn, schemas[0], base, tenant, subject, before, key_ids)
    vacuumed = _vacuum_tables(conn, schemas[0], deadline)
    for older in schemas[1:]:
        with contextlib.suppress(psycopg.errors.UndefinedTable,
                                 psycopg.errors.InvalidSchemaName):
            scrub(conn, older, base, tenant, subject, before, key_ids)
            _vacuum_tables(conn, older, deadline)
    return {**counts, "vacuumed": vacuumed, "analyzed": vacuumed == list(SCRUBBED),
            **statistics_and_wal(conn)}


def _vacuum_tables(conn: Connection[Any], schema: str, deadline: float) -> list[str]:
    """VACUUM each scrubbed table (index entries included) and ANALYZE it, so the planner's
    statistics are sampled again from what is left, again until no dead row version is kept
    or ``deadline`` passes; those it vacuumed clean."""
    return [table for table in SCRUBBED if pg_vacuum.vacuum_until_removed(
        conn, sql.SQL("{}.{}").format(sql.Identifier(schema), sql.Identifier(table)),
        max(0.0, deadline - time.monotonic()), pg_vacuum.CLEAN + ", ANALYZE")]


def statistics_and_wal(conn: Connection[Any]) -> Purged:
    """After the scrubbed tables were vacuumed (``conn`` in autocommit): VACUUM
    ``pg_statistic`` (its old rows hold the old samples), then switch to a new WAL segment and
    CHECKPOINT, after which the segments that logged the scrubbed rows are no longer needed
    and are removed (or, with ``wal_recycle`` on, recycled). What was done, for the receipt; a
    step the role may not take is ``False``.

    A transaction older than the scrub (a long read) keeps the old row versions from the
    VACUUM; autovacuum removes them once it ends."""
    statistics = pg_vacuum.vacuum(conn, sql.SQL("pg_catalog.pg_statistic"))
    return {"statistics_vacuumed": statistics,
            "wal_switched": _allowed(conn, "SELECT pg_switch_wal()"),
            "checkpoint": _allowed(conn, "CHECKPOINT")}


def _allowed(conn: Connection[Any], statement: LiteralString) -> bool:
    try:
        conn.execute(statement)
    except psycopg.errors.InsufficientPrivilege:
        return False
    return True
