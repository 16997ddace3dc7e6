"""Plain reads of a memory's lifecycle: its supersession chain, a space's policy versions and
the merges consolidation suggested, each as of a basis (like ``views``)."""

from typing import Any

from psycopg import Connection, sql

from memledger_schemas.api.reads import (
    Basis,
    ChainAnswer,
    ChainItem,
    ChainLink,
    MergeSuggestion,
    PolicyVersion,
)

_MAX_CHAIN = 200
"""Items walked at most: a chain is built one supersession at a time, never this long."""


def chain(conn: Connection[Any], s: str, tenant: str, space: str, item_id: str, at: Basis
          ) -> ChainAnswer | None:
    """Every item connected to ``item_id`` by supersessions known at ``at.position`` (its
    predecessors and successors, merges included), oldest first, with each link's reason."""
    ids, links = _walk(conn, s, tenant, space, item_id, at.position)
    if not ids:
        return None
    rows = conn.execute(sql.SQL(
        "SELECT i.item_id::text, i.kind, {status}, i.created_position, v.attrs, "
        "lower(v.valid), upper(v.valid) FROM {s}.items i LEFT JOIN LATERAL (SELECT attrs, "
        "valid FROM {s}.item_versions w WHERE w.tenant_id = i.tenant_id AND w.item_id = "
        "i.item_id AND w.sys_from <= %(p)s AND (w.sys_to IS NULL OR w.sys_to > %(p)s) "
        "ORDER BY lower(w.valid) DESC LIMIT 1) v ON true WHERE i.tenant_id = %(tenant)s AND "
        "i.item_id = ANY(%(ids)s::uuid[]) AND i.created_position <= %(p)s "
        "ORDER BY i.created_position").format(s=sql.Identifier(s), status=sql.SQL(_STATUS)),
        {"p": at.position, "tenant": tenant, "ids": sorted(ids)}).fetchall()
    items = [ChainItem(item_id=r[0], kind=r[1], status=r[2], created_position=r[3],
                       content=(r[4] or {}).get("content"), triple=(r[4] or {}).get("triple"),
                       valid_from=r[5], valid_to=r[6]) for r in rows]
    return ChainAnswer(basis=at, item_id=item_id, items=items,
                       links=sorted(links, key=lambda link: link.position))


_STATUS = """CASE WHEN i.archived_position <= %(p)s THEN 'archived'
    WHEN i.superseded_position <= %(p)s THEN 'superseded'
    WHEN i.retracted_position <= %(p)s THEN 'retracted' ELSE 'active' END"""


def _walk(conn: Connection[Any], s: str, tenant: str, space: str, item_id: str, position: int
          ) -> tuple[set[str], list[ChainLink]]:
    start = conn.execute(sql.SQL(
        "SELECT 1 FROM {}.items WHERE tenant_id = %s AND space_id = %s AND item_id = %s::uuid "
        "AND created_position <= %s").format(sql.Identifier(s)),
        (tenant, space, item_id, position)).fetchone()
    if start is None:
        return set(), []
    seen, frontier, links = {item_id}, [item_id], {}
    while frontier and len(seen) < _MAX_CHAIN:
        for link in _links_touching(conn, s, tenant, frontier, position):
            links[(link.item_id, link.superseded_by)] = link
        frontier = [i for link in links.values() for i in (link.item_id, link.superseded_by)
                    if i not in seen]
        seen.update(frontier)
    return seen, list(links.values())


def _links_touching(conn: Connection[Any], s: str, tenant: str, ids: list[str], position: int
                    ) -> list[ChainLink]:
    # The supersession events themselves (the change log), so each link has its reason and
    # the valid time it closed the old item at.
    rows = conn.execute(sql.SQL(
        "SELECT payload->>'item_id', payload->>'superseded_by', payload->>'reason', position, "
        "recorded_at, payload->>'valid_until', actor FROM {}.changes WHERE tenant_id = %s AND "
        "event_type = 'memory.superseded' AND position <= %s AND (payload->>'item_id' = "
        "ANY(%s) OR payload->>'superseded_by' = ANY(%s))").format(sql.Identifier(s)),
        (tenant, position, ids, ids)).fetchall()
    return [ChainLink(item_id=r[0], superseded_by=r[1], reason=r[2], position=r[3],
                      recorded_at=r[4], valid_until=r[5], actor=r[6]) for r in rows]


def policies(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis
             ) -> list[PolicyVersion]:
    """Every policy version of the space known at ``at.position``, oldest first."""
    rows = conn.execute(sql.SQL(
        "SELECT position, recorded_at, actor, payload FROM {}.changes WHERE tenant_id = %s AND "
        "space_id = %s AND event_type = 'space.policy_set' AND position <= %s ORDER BY "
        "position").format(sql.Identifier(s)), (tenant, space, at.position)).fetchall()
    return [PolicyVersion(policy_version=int(r[3]["policy_version"]), position=r[0],
                          recorded_at=r[1], actor=r[2], policy=r[3]) for r in rows]


def merge_suggestions(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis,
                      limit: int = 100) -> list[MergeSuggestion]:
    """Suggested merges known at ``at.position`` whose two items are both still active."""
    rows = conn.execute(sql.SQL(
        "SELECT c.payload->>'item_id', c.payload->>'similar_to', "
        "(c.payload->>'similarity')::float8, (c.payload->>'policy_version')::int, c.position, "
        "c.recorded_at FROM {s}.changes c WHERE c.tenant_id = %(tenant)s AND c.space_id = "
        "%(space)s AND c.event_type = 'memory.merge_suggested' AND c.position <= %(p)s AND "
        "NOT EXISTS (SELECT 1 FROM {s}.items i WHERE i.tenant_id = c.tenant_id AND i.item_id "
        "IN ((c.payload->>'item_id')::uuid, (c.payload->>'similar_to')::uuid) AND "
        "(i.archived_position <= %(p)s OR i.superseded_position <= %(p)s OR "
        "i.retracted_position <= %(p)s)) ORDER BY c.position DESC LIMIT %(limit)s").format(
        s=sql.Identifier(s)), {"tenant": tenant, "space": space, "p": at.position,
                               "limit": limit}).fetchall()
    return [MergeSuggestion(item_id=r[0], similar_to=r[1], similarity=r[2],
                            policy_version=r[3], position=r[4], recorded_at=r[5])
            for r in rows]
