"""What memory formed by itself, as context bundle entries: the facts believed about the
people of a space (its derived facts, beside the preference items already in the preferences
section) and its themes."""

from typing import Any

from psycopg import Connection

from memledger_query.core import context as packing
from memledger_query.core import views
from memledger_query.core.forming_views import themes
from memledger_schemas.api.reads import Basis

DERIVED_TAG = "derived"
MAX_THEMES = 20


def profile_entries(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis
                    ) -> list[packing.Entry]:
    """The derived facts of ``space`` true at ``at`` (preferences are in the section as
    preference items already), the most confident first."""
    facts = views.items(conn, s, tenant, space, at,
                        views.ItemFilters(kinds=["fact"], tags=[DERIVED_TAG]))
    ordered = sorted((i for i in facts if i.triple), key=lambda i: (-i.confidence, i.item_id))
    return [packing.Entry(f"- [fact] {i.content}", i.item_id, i.confidence) for i in ordered]


def theme_entries(conn: Connection[Any], s: str, tenant: str, space: str, at: Basis
                  ) -> list[packing.Entry]:
    """The largest themes of ``space`` at ``at``."""
    return [packing.Entry(f"- {t.label} ({t.size} memories)", t.theme_id)
            for t in themes(conn, s, tenant, space, at)[:MAX_THEMES]]
