"""Plain reads of what memory formed by itself: a person's or agent's profile (the facts and
preferences currently believed about them) and a space's themes, each as of a basis.

A profile is the space's active facts and preferences whose triple subject is the one asked
for (matched without regard to case), true at the basis' valid time as known at its position:
a superseded preference is not in it, an archived one neither.

Themes are read from the change log (``theme.formed`` and ``theme.updated``): the latest
event of each theme up to the basis' position, dissolved ones (no members) left out.
"""

from typing import Any

from psycopg import Connection, sql

from memledger_query.core.views import _ITEM_SELECT, _NOT_ARCHIVED, _STATUS, _item, _params
from memledger_schemas.api.forming import Theme
from memledger_schemas.api.reads import Basis, Item

PROFILE_KINDS = ("fact", "preference")


def profile(conn: Connection[Any], s: str, tenant: str, space: str, subject: str, at: Basis,
            limit: int = 500) -> list[Item]:
    """What is believed about ``subject`` in ``space`` at ``at``."""
    query = sql.SQL(_ITEM_SELECT + " AND i.kind = ANY(%(kinds)s) AND lower(v.attrs->'triple'"
                    "->>'subject') = lower(%(subject)s) AND " + _NOT_ARCHIVED
                    + " AND {status} = 'active' ORDER BY i.item_id LIMIT %(limit)s").format(
        s=sql.Identifier(s), status=sql.SQL(_STATUS))
    rows = conn.execute(query, {**_params(tenant, space, at), "kinds": list(PROFILE_KINDS),
                                "subject": subject, "limit": limit}).fetchall()
    found = [_item(r) for r in rows]
    return sorted(found, key=lambda i: (i.kind != "preference",
                                        str((i.triple or {}).get("predicate", "")).casefold(),
                                        -i.confidence, i.item_id))


_THEMES = """
SELECT DISTINCT ON (subject) subject, event_type, payload, position, recorded_at
FROM {s}.changes WHERE tenant_id = %(tenant)s AND space_id = %(space)s AND position <= %(p)s
  AND event_type IN ('theme.formed', 'theme.updated')
ORDER BY subject, position DESC"""
_FORMED = """
SELECT subject, min(position) FROM {s}.changes WHERE tenant_id = %(tenant)s
  AND space_id = %(space)s AND position <= %(p)s AND event_type = 'theme.formed'
GROUP BY subject"""


def themes(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis,
           theme_id: str | None = None) -> list[Theme]:
    """The themes of ``space`` at ``at.position`` (only ``theme_id``, if given), the largest
    first."""
    params = {**_params(tenant, space, at)}
    latest = conn.execute(sql.SQL(_THEMES).format(s=sql.Identifier(s)), params).fetchall()
    formed = dict(conn.execute(sql.SQL(_FORMED).format(s=sql.Identifier(s)), params).fetchall())
    found = [_theme(row, formed.get(row[0], row[3])) for row in latest
             if row[2].get("members") and (theme_id is None or row[0] == theme_id)]
    return sorted(found, key=lambda t: (-t.size, t.label, t.theme_id))


def _theme(row: tuple[Any, ...], formed: int) -> Theme:
    theme_id, _, payload, position, recorded_at = row
    return Theme(theme_id=theme_id, label=payload["label"], size=payload["size"],
                 members=[str(m) for m in payload["members"]],
                 threshold=payload["threshold"], policy_version=payload["policy_version"],
                 formed_position=formed, updated_position=position, updated_at=recorded_at)


_MEMBERS = """
SELECT payload FROM {s}.changes WHERE tenant_id = %s AND subject = %s AND position <= %s
  AND event_type IN ('theme.formed', 'theme.updated')
ORDER BY position DESC LIMIT 1"""


def members(conn: Connection[Any], s: str, tenant: str, theme_id: str, at: Basis
            ) -> list[str]:
    """The members of a theme at ``at.position`` (empty: unknown then, or dissolved)."""
    row = conn.execute(sql.SQL(_MEMBERS).format(s=sql.Identifier(s)),
                       (tenant, theme_id, at.position)).fetchone()
    return [str(m) for m in row[0].get("members") or ()] if row else []
