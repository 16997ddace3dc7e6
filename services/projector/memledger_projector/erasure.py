"""Scrubbing a data subject from the PostgreSQL read models when ``subject.erased`` arrives.

The subject's events are found in the event store (their envelopes name the subject in the
clear; only personal fields are sealed); every row built from them gets the same placeholders
a replay or rebuild shows once the keys are gone (``crypto.PERSONAL``), so a scrubbed live
model and a model rebuilt after the erasure are equal. Idempotent: scrubbing twice changes
nothing more.
"""

from collections import defaultdict
from typing import Any

import orjson
from psycopg import Connection, sql

from memledger_platform.crypto import ERASED, PERSONAL
from memledger_platform.eventstore.postgres import EVENTS_TABLE

Purged = dict[str, int]


def scrub(conn: Connection[Any], schema: str, base: str, tenant: str, subject: str,
          before: int) -> Purged:
    """Scrub every row built from ``subject``'s events (in ``tenant``, before position
    ``before``); how many rows of each table were scrubbed."""
    events = _subject_events(conn, base, tenant, subject, before)
    keys: dict[str, list[Any]] = defaultdict(list)
    for position, event_type, payload in events:
        keys[event_type].append((position, payload))
    s = sql.Identifier(schema)
    item_ids = [p["item_id"] for t in ("memory.asserted", "memory.revised")
                for _, p in keys[t]]
    return {
        "item_versions": _count(conn, sql.SQL(
            "UPDATE {}.item_versions SET attrs = attrs || %s::jsonb WHERE tenant_id = %s AND "
            "item_id = ANY(%s::uuid[])").format(s),
            (orjson.dumps({"content": ERASED, "triple": None}).decode(), tenant, item_ids)),
        "messages": _count(conn, sql.SQL(
            "UPDATE {}.messages SET content = %s, participant = NULL WHERE tenant_id = %s AND "
            "message_id = ANY(%s::uuid[])").format(s),
            (ERASED, tenant, [p["message_id"] for _, p in
                              keys["conversation.message_appended"]])),
        "preferences": _count(conn, sql.SQL(
            "UPDATE {}.preferences SET value = %s WHERE tenant_id = %s AND "
            "position = ANY(%s)").format(s),
            (ERASED, tenant, [pos for pos, _ in keys["preference.extracted"]])),
        "mentions": _scrub_mentions(conn, s, tenant, [
            pos for pos, _ in keys["memory.entities_extracted"]]),
        "entities": _count(conn, sql.SQL(
            "UPDATE {}.entities SET name = %s, aliases = '{{}}' WHERE tenant_id = %s AND "
            "entity_id = ANY(%s)").format(s),
            (ERASED, tenant, [p["entity_id"] for _, p in keys["entity.upserted"]])),
        "changes": _scrub_changes(conn, schema, events)}


def _subject_events(conn: Connection[Any], base: str, tenant: str, subject: str, before: int
                    ) -> list[tuple[int, str, dict[str, Any]]]:
    # A scan of the log: erasures are rare, and the log is the one place that knows every
    # event of the subject (the read models keep no subject column).
    rows = conn.execute(sql.SQL(
        "SELECT notification_id, convert_from(state, 'UTF8')::jsonb FROM {}.{} WHERE "
        "notification_id < %s AND convert_from(state, 'UTF8')::jsonb->>'tenant_id' = %s AND "
        "convert_from(state, 'UTF8')::jsonb->>'subject_id' = %s ORDER BY notification_id"
    ).format(sql.Identifier(base), sql.Identifier(EVENTS_TABLE)),
        (before, tenant, subject)).fetchall()
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
    """The change log keeps each event's payload (its vector left out): its personal fields
    get their placeholders, exactly where the event had a value."""
    changed = 0
    s = sql.Identifier(schema)
    for position, event_type, payload in events:
        fields = {name: placeholder for name, placeholder in PERSONAL.get(event_type, {}).items()
                  if payload.get(name) is not None and name != "vector"}
        if fields:
            changed += _count(conn, sql.SQL(
                "UPDATE {}.changes SET payload = payload || %s::jsonb WHERE position = %s "
                "AND payload IS DISTINCT FROM payload || %s::jsonb").format(s),
                (orjson.dumps(fields).decode(), position, orjson.dumps(fields).decode()))
    return changed


def _count(conn: Connection[Any], query: sql.Composed, params: tuple[Any, ...]) -> int:
    return conn.execute(query, params).rowcount
