"""Plain reads of the ``signals`` read model (feedback and reaffirmations of items): the
signals ranking counts, and the corrections whose ratings make them steering-rule candidates.
Every read is as of a position, so a replay at a basis counts exactly what the original did.
"""

from collections.abc import Collection
from typing import Any
from uuid import UUID

from psycopg import Connection, sql

from memledger_query.core.ranking import Signals
from memledger_query.core.views import _ITEM_SELECT, _STATUS, _item, _params
from memledger_schemas.api.reads import Basis, Item

STEERING_CEILING = 2.0
"""A correction whose mean rating is at most this is a steering-rule candidate."""


def signals(conn: Connection[Any], s: str, tenant: str, item_ids: Collection[str],
            position: int) -> dict[str, Signals]:
    """The signals of each of ``item_ids`` recorded at or before ``position`` (one query;
    items without any are left out)."""
    ids = [i for i in item_ids if _is_uuid(i)]
    if not ids:
        return {}
    rows = conn.execute(sql.SQL(
        "SELECT item_id::text, count(*) FILTER (WHERE signal = 'used'), "
        "count(*) FILTER (WHERE signal = 'unused'), "
        "count(*) FILTER (WHERE signal = 'reaffirmed'), count(rating), "
        "coalesce(sum(rating), 0) FROM {}.signals WHERE tenant_id = %s AND "
        "item_id = ANY(%s::uuid[]) AND position <= %s GROUP BY item_id").format(
        sql.Identifier(s)), (tenant, ids, position)).fetchall()
    return {r[0]: Signals(*(int(n) for n in r[1:])) for r in rows}


def steering_candidates(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis,
                        limit: int = 20) -> list[tuple[Item, float, int]]:
    """Corrections of ``space`` true at ``at`` whose mean rating (as of ``at.position``) is at
    most ``STEERING_CEILING``: each with its mean rating and number of ratings, the lowest
    rated first (then the most rated)."""
    rated = conn.execute(sql.SQL(
        "SELECT item_id::text, avg(rating)::float8, count(*) FROM {}.signals WHERE "
        "tenant_id = %s AND space_id = %s AND signal = 'rating' AND position <= %s "
        "GROUP BY item_id HAVING avg(rating) <= %s").format(sql.Identifier(s)),
        (tenant, space, at.position, STEERING_CEILING)).fetchall()
    ratings = {r[0]: (float(r[1]), int(r[2])) for r in rated}
    if not ratings:
        return []
    query = sql.SQL(_ITEM_SELECT + " AND v.item_id = ANY(%(ids)s::uuid[]) AND "
                    "i.kind = 'correction' AND (i.archived_position IS NULL OR "
                    "i.archived_position > %(p)s)").format(
        s=sql.Identifier(s), status=sql.SQL(_STATUS))
    found = [_item(r) for r in conn.execute(
        query, {**_params(tenant, space, at), "ids": list(ratings)}).fetchall()]
    ranked = sorted(found, key=lambda i: (ratings[i.item_id][0], -ratings[i.item_id][1],
                                          i.item_id))
    return [(i, *ratings[i.item_id]) for i in ranked[:limit]]


def _is_uuid(value: str) -> bool:
    # Every item id is a UUID; anything else (a hand-made test point) has no signals.
    try:
        UUID(value)
    except ValueError:
        return False
    return True
