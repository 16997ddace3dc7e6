"""Plain reads the context bundle needs beyond ``views``: extracted preferences and the most
recently changed items of a space."""

from typing import Any

from psycopg import Connection, sql

from memledger_query.core.views import _ITEM_SELECT, _STATUS, _item, _params
from memledger_schemas.api.reads import Basis, Item, Preference


def extracted_preferences(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis,
                          limit: int = 100) -> list[Preference]:
    """What the extraction rules learned in ``space`` up to ``at.position``: the latest value
    of each (category, value) pair, most confident first."""
    rows = conn.execute(sql.SQL(
        "SELECT DISTINCT ON (category, lower(value)) category, value, confidence, rule_id, "
        "source_item_id::text, position, recorded_at FROM {}.preferences WHERE tenant_id = %s "
        "AND space_id = %s AND position <= %s ORDER BY category, lower(value), position DESC"
    ).format(sql.Identifier(s)), (tenant, space, at.position)).fetchall()
    found = [Preference(category=r[0], value=r[1], confidence=r[2], rule_id=r[3],
                        source_item_id=r[4], position=r[5], recorded_at=r[6]) for r in rows]
    return sorted(found, key=lambda p: (-p.confidence, -p.position))[:limit]


def recent_items(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis,
                 limit: int = 50) -> list[Item]:
    """Items true at ``at``, the most recently known version first."""
    query = sql.SQL(_ITEM_SELECT + " AND (i.archived_position IS NULL OR i.archived_position "
                    "> %(p)s) ORDER BY v.sys_from DESC LIMIT %(limit)s").format(
        s=sql.Identifier(s), status=sql.SQL(_STATUS))
    return [_item(r) for r in conn.execute(query, {**_params(tenant, space, at),
                                                   "limit": limit}).fetchall()]
