"""Plain read functions over the PostgreSQL read models (one live projection schema).

Every function takes an open connection and the projection's schema name, and returns frozen
DTOs. Time travel: ``valid_at`` picks the valid instant, ``position`` the system state (every
row known at that position); an item's status is computed as of ``position`` too, so the same
basis always gives the same answer.
"""

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

import orjson
from psycopg import Connection, sql

from memledger_platform import partitions
from memledger_platform.readmodel.checkpoint import read_checkpoint
from memledger_platform.readmodel.projection import name_key
from memledger_schemas.api.reads import (
    Basis,
    Change,
    Conversation,
    Entity,
    Graph,
    History,
    Item,
    Message,
    Neighbour,
    Neighbours,
    Rectangle,
    Relation,
)

_STATUS = """CASE WHEN i.archived_position <= %(p)s THEN 'archived'
    WHEN i.superseded_position <= %(p)s THEN 'superseded'
    WHEN i.retracted_position <= %(p)s THEN 'retracted' ELSE 'active' END"""

_ITEM_SELECT = """
SELECT i.item_id::text, i.space_id, i.kind, {status} AS status, v.attrs, lower(v.valid),
       upper(v.valid), v.sys_from, i.session_id::text, i.agent_id
FROM {s}.item_versions v JOIN {s}.items i ON i.tenant_id = v.tenant_id AND i.item_id = v.item_id
WHERE v.tenant_id = %(tenant)s AND i.space_id = %(space)s AND v.valid @> %(valid_at)s
  AND v.sys_from <= %(p)s AND (v.sys_to IS NULL OR v.sys_to > %(p)s)"""
_NOT_ARCHIVED = "(i.archived_position IS NULL OR i.archived_position > %(p)s)"


def checkpoint(conn: Connection[Any], s: str) -> tuple[int, datetime | None]:
    """The position the read is based on: its tenant's partition's checkpoint (ADR 0016)."""
    found = read_checkpoint(conn, s, partition=partitions.checkpoint_partition())
    return found.position, found.recorded_at


def space_exists(conn: Connection[Any], s: str, tenant: str, space: str) -> bool:
    row = conn.execute(sql.SQL("SELECT 1 FROM {}.spaces WHERE tenant_id = %s AND space_id = %s"
                               ).format(sql.Identifier(s)), (tenant, space)).fetchone()
    return row is not None


def basis(conn: Connection[Any], s: str, valid_at: datetime, position: int | None,
          recorded_at: datetime | None) -> Basis:
    """The basis of a read: an explicit position, the last position recorded at or before
    ``recorded_at``, or (neither) everything projected so far."""
    latest, latest_at = checkpoint(conn, s)
    if position is None and recorded_at is None:
        return Basis(position=latest, recorded_at=latest_at, valid_at=valid_at)
    # One index probe: the last change at or before the position (or time); recorded_at
    # never decreases with position, so the newest by time is the newest by position too.
    query = ("SELECT position, recorded_at FROM {}.changes WHERE position <= %s "
             "ORDER BY position DESC LIMIT 1" if position is not None else
             "SELECT position, recorded_at FROM {}.changes WHERE recorded_at <= %s "
             "ORDER BY recorded_at DESC, position DESC LIMIT 1")
    row = conn.execute(sql.SQL(query).format(sql.Identifier(s)),
                       (position if position is not None else recorded_at,)).fetchone()
    found = int(row[0]) if row and row[0] is not None else 0
    at = row[1] if row else None
    return Basis(position=min(found, latest) if position is None else position,
                 recorded_at=at if position is None else (recorded_at or at), valid_at=valid_at)


def item(conn: Connection[Any], s: str, tenant: str, space: str, item_id: str, at: Basis
         ) -> Item | None:
    query = sql.SQL(_ITEM_SELECT + " AND v.item_id = %(item)s::uuid").format(
        s=sql.Identifier(s), status=sql.SQL(_STATUS))
    row = conn.execute(query, {**_params(tenant, space, at), "item": item_id}).fetchone()
    return _item(row) if row else None


@dataclass(frozen=True)
class ItemFilters:
    """Which items a listing keeps (``after``: the last item id of the page before)."""

    kinds: list[str] | None = None
    tags: list[str] | None = None
    session_id: str | None = None
    agent_id: str | None = None
    subject: str | None = None
    predicate: str | None = None
    include_archived: bool = False
    limit: int = 100
    after: str | None = None


def items(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis,
          filters: ItemFilters | None = None) -> list[Item]:
    """Items true at ``at.valid_at`` as known at ``at.position``, filtered, in item id order."""
    f = filters or ItemFilters()
    clauses, params = [], _params(tenant, space, at)
    for clause, name, value in (
            ("i.kind = ANY(%(kinds)s)", "kinds", f.kinds),
            ("v.attrs->'tags' @> %(tags)s::jsonb", "tags", _json_list(f.tags)),
            ("i.session_id = %(session)s::uuid", "session", f.session_id),
            ("i.agent_id = %(agent)s", "agent", f.agent_id),
            ("v.attrs->'triple'->>'subject' = %(subject)s", "subject", f.subject),
            ("v.attrs->'triple'->>'predicate' = %(predicate)s", "predicate", f.predicate),
            ("i.item_id > %(after)s::uuid", "after", f.after)):
        if value:
            clauses.append(clause)
            params[name] = value
    if not f.include_archived:
        clauses.append(_NOT_ARCHIVED)
    where = "".join(f" AND {c}" for c in clauses)
    query = sql.SQL(_ITEM_SELECT + where + " ORDER BY i.item_id LIMIT %(limit)s").format(
        s=sql.Identifier(s), status=sql.SQL(_STATUS))
    return [_item(r) for r in conn.execute(query, {**params, "limit": f.limit}).fetchall()]


def history(conn: Connection[Any], s: str, tenant: str, space: str, item_id: str, at: Basis
            ) -> History | None:
    """Every change of the item up to ``at.position`` and every version (rectangle) known
    then, on both time axes."""
    exists = conn.execute(sql.SQL("SELECT 1 FROM {}.items WHERE tenant_id = %s AND "
                                  "space_id = %s AND item_id = %s::uuid").format(
        sql.Identifier(s)), (tenant, space, item_id)).fetchone()
    if exists is None:
        return None
    changes = conn.execute(sql.SQL(_CHANGES + " AND subject = %s AND position <= %s "
                                   "ORDER BY position").format(sql.Identifier(s)),
                           (tenant, item_id, at.position)).fetchall()
    versions = conn.execute(sql.SQL(
        "SELECT lower(valid), upper(valid), sys_from, CASE WHEN sys_to <= %s THEN sys_to END, "
        "attrs, cause FROM {}.item_versions WHERE tenant_id = %s AND item_id = %s::uuid AND "
        "sys_from <= %s ORDER BY sys_from, lower(valid)").format(sql.Identifier(s)),
        (at.position, tenant, item_id, at.position)).fetchall()
    return History(basis=at, item_id=item_id, changes=[_change(r) for r in changes],
                   versions=[_rectangle(r) for r in versions])


_CHANGES = ("SELECT position, recorded_at, event_type, event_id::text, subject, space_id, "
            "actor, reason, valid_from, valid_to, payload FROM {}.changes WHERE tenant_id = %s")


def changes_after(conn: Connection[Any], s: str, tenant: str, space: str | None, *,
                  after_position: int = 0, since: datetime | None = None, limit: int = 100
                  ) -> list[Change]:
    """Changes strictly after a position (and strictly after ``since``, if given), oldest
    first."""
    query, params = _CHANGES + " AND position > %s", [tenant, after_position]
    if space is not None:
        query, params = query + " AND space_id = %s", [*params, space]
    if since is not None:
        query, params = query + " AND recorded_at > %s", [*params, since]
    rows = conn.execute(sql.SQL(query + " ORDER BY position LIMIT %s").format(
        sql.Identifier(s)), (*params, limit)).fetchall()
    return [_change(r) for r in rows]


def conversation(conn: Connection[Any], s: str, tenant: str, space: str, session_id: str,
                 at: Basis, limit: int = 200) -> Conversation | None:
    session = conn.execute(sql.SQL(
        "SELECT CASE WHEN ended_at IS NOT NULL AND updated_position <= %s THEN 'ended' "
        "ELSE 'active' END FROM {}.sessions WHERE tenant_id = %s AND space_id = %s AND "
        "session_id = %s::uuid").format(sql.Identifier(s)),
        (at.position, tenant, space, session_id)).fetchone()
    if session is None:
        return None
    rows = conn.execute(sql.SQL(
        "SELECT message_id::text, session_id::text, position, role, content, participant, "
        "agent_id, recorded_at, coalesce(said_at, recorded_at) FROM {}.messages WHERE "
        "tenant_id = %s AND session_id = %s::uuid AND position <= %s ORDER BY position DESC "
        "LIMIT %s").format(sql.Identifier(s)),
        (tenant, session_id, at.position, limit)).fetchall()
    messages = [Message(message_id=r[0], session_id=r[1], position=r[2], role=r[3],
                        content=r[4], participant=r[5], agent_id=r[6], recorded_at=r[7],
                        said_at=r[8])
                for r in reversed(rows)]
    return Conversation(basis=at, session_id=session_id, status=session[0], messages=messages)


# --- the graph -------------------------------------------------------------------------------
# Entities keep only their latest name and aliases (the read model holds no earlier ones): as
# of a position, an entity is there if it was created by then, under its latest name.

_ENTITY_SELECT = """SELECT entity_id, name, type, aliases FROM {s}.entities
WHERE tenant_id = %(tenant)s AND space_id = %(space)s AND created_position <= %(p)s"""
_RELATION_SELECT = """
SELECT relation_id::text, source_entity, relation_type, target_entity, confidence,
       CASE WHEN retracted_position <= %(p)s THEN 'retracted' ELSE 'active' END, valid_from,
       valid_to
FROM {s}.relations WHERE tenant_id = %(tenant)s AND space_id = %(space)s
  AND asserted_position <= %(p)s AND (valid_from IS NULL OR valid_from <= %(valid_at)s)
  AND (valid_to IS NULL OR valid_to > %(valid_at)s)"""
_LIVE = " AND (retracted_position IS NULL OR retracted_position > %(p)s)"
_TOUCHING = " AND (source_entity = ANY(%(ids)s) OR target_entity = ANY(%(ids)s))"
# The items whose latest extraction at or before the position names one of the keys.
_MENTIONED = """SELECT m.item_id FROM {s}.mentions m
WHERE m.tenant_id = %(tenant)s AND m.space_id = %(space)s AND m.name_key = ANY(%(keys)s)
  AND m.position <= %(p)s AND NOT EXISTS (
    SELECT 1 FROM {s}.mentions newer WHERE newer.tenant_id = m.tenant_id
      AND newer.item_id = m.item_id AND newer.position > m.position
      AND newer.position <= %(p)s)"""

MAX_DEPTH = 3
"""How far ``neighbours`` walks at most: what it reads grows with the fan-out to this power."""


def graph(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis) -> Graph:
    """Entities known at ``at.position`` and the relations asserted by then that hold at
    ``at.valid_at``; one retracted by then is listed with status ``retracted``."""
    params = _params(tenant, space, at)
    return Graph(basis=at, entities=_entities(conn, s, params),
                 relations=_relations(conn, s, params))


def entity(conn: Connection[Any], s: str, tenant: str, space: str, entity_id: str, at: Basis
           ) -> Entity | None:
    found = _entities(conn, s, {**_params(tenant, space, at), "ids": [entity_id]})
    return found[0] if found else None


def neighbours(conn: Connection[Any], s: str, tenant: str, space: str, entity_id: str,
               depth: int, at: Basis) -> Neighbours | None:
    """The entities up to ``depth`` relations away over the relations live at ``at`` (not
    retracted by ``at.position``, holding at ``at.valid_at``), either direction, nearest
    first; ``None`` if the entity is not known at ``at.position``."""
    start = entity(conn, s, tenant, space, entity_id, at)
    if start is None:
        return None
    params = _params(tenant, space, at)
    depths, walked = walk(entity_id, depth, lambda ids: _relations(
        conn, s, {**params, "ids": sorted(ids)}, _LIVE + _TOUCHING))
    reached = _entities(conn, s, {**params, "ids": [i for i, d in depths.items() if d]})
    found = sorted((Neighbour(**e.model_dump(), depth=depths[e.entity_id]) for e in reached),
                   key=lambda n: (n.depth, n.entity_id))
    return Neighbours(basis=at, entity=start, neighbours=found, relations=walked)


def walk(start: str, depth: int, touching: Callable[[set[str]], list[Relation]]
         ) -> tuple[dict[str, int], list[Relation]]:
    """Breadth-first from ``start``, ``depth`` steps at most, over the relations ``touching``
    returns for a set of entities (either end): each entity reached with its distance
    (``start``: 0), and every relation walked, in relation id order."""
    depths, frontier = {start: 0}, {start}
    walked: dict[str, Relation] = {}
    for step in range(1, depth + 1):
        if not frontier:
            break
        found = touching(frontier)
        walked.update((r.relation_id, r) for r in found)
        frontier = {end for r in found for end in (r.source_entity, r.target_entity)
                    if end not in depths}
        depths.update(dict.fromkeys(frontier, step))
    return depths, sorted(walked.values(), key=lambda r: r.relation_id)


def items_mentioning(conn: Connection[Any], s: str, tenant: str, space: str, entity_id: str,
                     at: Basis, limit: int = 100) -> list[Item] | None:
    """Items true at ``at.valid_at`` as known at ``at.position`` (archived ones left out)
    whose latest extraction by then mentions the entity (its id, name or an alias,
    casefolded), in item id order; ``None`` if the entity is not known at ``at.position``."""
    found = entity(conn, s, tenant, space, entity_id, at)
    if found is None:
        return None
    keys = sorted({name_key(n) for n in (found.entity_id, found.name, *found.aliases)})
    query = sql.SQL(_ITEM_SELECT + " AND v.item_id IN (" + _MENTIONED + ") AND "
                    + _NOT_ARCHIVED + " ORDER BY i.item_id LIMIT %(limit)s").format(
        s=sql.Identifier(s), status=sql.SQL(_STATUS))
    rows = conn.execute(query, {**_params(tenant, space, at), "keys": keys, "limit": limit})
    return [_item(r) for r in rows.fetchall()]


def _entities(conn: Connection[Any], s: str, params: dict[str, Any]) -> list[Entity]:
    """The entities known at the basis in ``params`` (only those in ``ids``, if given)."""
    where = " AND entity_id = ANY(%(ids)s)" if "ids" in params else ""
    query = sql.SQL(_ENTITY_SELECT + where + " ORDER BY entity_id").format(s=sql.Identifier(s))
    return [Entity(entity_id=r[0], name=r[1], type=r[2], aliases=list(r[3]))
            for r in conn.execute(query, params).fetchall()]


def _relations(conn: Connection[Any], s: str, params: dict[str, Any], where: str = ""
               ) -> list[Relation]:
    query = sql.SQL(_RELATION_SELECT + where + " ORDER BY relation_id").format(
        s=sql.Identifier(s))
    return [Relation(relation_id=r[0], source_entity=r[1], relation_type=r[2],
                     target_entity=r[3], confidence=r[4], status=r[5], valid_from=r[6],
                     valid_to=r[7]) for r in conn.execute(query, params).fetchall()]


def _params(tenant: str, space: str, at: Basis) -> dict[str, Any]:
    return {"tenant": tenant, "space": space, "valid_at": at.valid_at, "p": at.position}


def _json_list(values: list[str] | None) -> str | None:
    return orjson.dumps(values).decode() if values else None


def _item(row: tuple[Any, ...]) -> Item:
    item_id, space, kind, status, attrs, lower, upper, sys_from, session, agent = row
    return Item(item_id=item_id, space_id=space, kind=kind, status=status,
                content=attrs["content"], triple=attrs.get("triple"),
                confidence=attrs["confidence"], importance=attrs["importance"],
                tags=list(attrs.get("tags") or ()), sources=list(attrs.get("sources") or ()),
                valid_from=lower, valid_to=upper, known_since_position=sys_from,
                session_id=session, agent_id=agent,
                layer=attrs.get("layer") or ("session" if session else "project"))


def _change(row: tuple[Any, ...]) -> Change:
    (position, recorded_at, event_type, event_id, subject, space, actor, reason, valid_from,
     valid_to, payload) = row
    return Change(position=position, recorded_at=recorded_at, event_type=event_type,
                  event_id=event_id, subject=subject, space_id=space, actor=actor,
                  reason=reason, valid_from=valid_from, valid_to=valid_to, payload=payload)


def _rectangle(row: tuple[Any, ...]) -> Rectangle:
    lower, upper, sys_from, sys_to, attrs, cause = row
    return Rectangle(valid_from=lower, valid_to=upper, sys_from=sys_from, sys_to=sys_to,
                     attrs=attrs, event_id=cause.get("event_id", ""),
                     actor=cause.get("actor", ""))
