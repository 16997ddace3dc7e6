"""The plain reads that HTTP routes and gRPC methods share, each run on a pooled connection by
``Reader.run`` (``conn``, the read-model schema ``s``, then its arguments), and the change
feed's cursor."""

import base64
import binascii
from datetime import datetime
from typing import Any

import orjson

from memledger_query.core import views
from memledger_query.entrypoints.api import At, Problem
from memledger_schemas.api.reads import (
    Basis,
    ChangePage,
    Conversation,
    Graph,
    History,
    Item,
    Neighbours,
)


def item(conn: Any, s: str, tenant: str, space: str, item_id: str, at: At
         ) -> tuple[Basis, Item | None]:
    basis = at.basis(conn, s)
    return basis, views.item(conn, s, tenant, space, item_id, basis)


def items(conn: Any, s: str, tenant: str, space: str, at: At, filters: views.ItemFilters
          ) -> tuple[Basis, list[Item]]:
    basis = at.basis(conn, s)
    found = views.items(conn, s, tenant, space, basis, filters)
    known_space(conn, s, tenant, space, empty=not found)
    return basis, found


def history(conn: Any, s: str, tenant: str, space: str, item_id: str, at: At
            ) -> History | None:
    return views.history(conn, s, tenant, space, item_id, at.basis(conn, s))


def changes(conn: Any, s: str, tenant: str, space: str | None, since: datetime | None, after: int,
            limit: int) -> ChangePage:
    position, _ = views.checkpoint(conn, s)
    found = views.changes_after(conn, s, tenant, space, after_position=after, since=since,
                                limit=limit)
    if space is not None:
        known_space(conn, s, tenant, space, empty=not found)
    last = found[-1].position if found else max(after, position if since is None else after)
    return ChangePage(changes=found, next_cursor=encode_cursor(last), position=position)


def conversation(conn: Any, s: str, tenant: str, space: str, session: str, at: At,
                 limit: int) -> Conversation | None:
    return views.conversation(conn, s, tenant, space, session, at.basis(conn, s), limit)


def graph(conn: Any, s: str, tenant: str, space: str, at: At) -> Graph:
    found = views.graph(conn, s, tenant, space, at.basis(conn, s))
    known_space(conn, s, tenant, space, empty=not (found.entities or found.relations))
    return found


def neighbours(conn: Any, s: str, tenant: str, space: str, entity: str, depth: int, at: At
               ) -> tuple[Basis, Neighbours | None]:
    basis = at.basis(conn, s)
    return basis, views.neighbours(conn, s, tenant, space, entity, depth, basis)


def mentioning(conn: Any, s: str, tenant: str, space: str, entity: str, at: At, limit: int
               ) -> tuple[Basis, list[Item] | None]:
    basis = at.basis(conn, s)
    return basis, views.items_mentioning(conn, s, tenant, space, entity, basis, limit)


def known_space(conn: Any, s: str, tenant: str, space: str, *, empty: bool) -> None:
    """An empty answer about a space the tenant does not have is 404, not an empty list
    (looked up only for an empty answer, so other reads pay nothing for it)."""
    if empty and not views.space_exists(conn, s, tenant, space):
        raise Problem(404, "not_found", f"space {space!r} not found")


def no_entity(entity: str, space: str, at: Basis) -> Problem:
    return Problem(404, "not_found", f"entity {entity!r} not found in space {space!r} as of "
                   f"position {at.position}")


def encode_cursor(position: int) -> str:
    """An opaque, resumable position in the change feed."""
    return base64.urlsafe_b64encode(orjson.dumps({"v": 1, "p": position})).decode().rstrip("=")


def decode_cursor(value: str | None) -> int:
    """The position ``encode_cursor`` made ``value`` of (0 for none; 400 ``invalid_cursor``
    for anything else)."""
    if value is None:
        return 0
    try:
        decoded = orjson.loads(base64.urlsafe_b64decode(value + "=" * (-len(value) % 4)))
        position = decoded["p"]
        if decoded.get("v") != 1 or not isinstance(position, int) or position < 0:
            raise ValueError(value)
    except (binascii.Error, orjson.JSONDecodeError, ValueError, KeyError, TypeError):
        raise Problem(400, "invalid_cursor", "not a cursor this service issued",
                      "query.after") from None
    return position
