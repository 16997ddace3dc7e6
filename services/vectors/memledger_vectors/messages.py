"""The conversation messages of the vector read model: one index point per message, valid from
when it was said (its event's ``valid_from``, else when it was recorded) and known from the
position it was appended at, with its keyword vector from the start and its dense vector once
the enricher's ``conversation.message_embedded`` arrives. A message is never changed nor ended
(only erased, which removes its point), so its point has open upper bounds on both axes.

Idempotent like the item fold: appending a message at position P makes the same point (same id,
no dense vector yet) however often it is applied, and its embedding, later in the log, is
applied again after it whenever a suffix of the log is redelivered.
"""

import uuid
from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from memledger_platform.crypto import ERASED
from memledger_platform.events import Event
from memledger_platform.vectorindex import sparse
from memledger_platform.vectorindex.port import (
    EMBEDDED_FROM,
    MESSAGE_KIND,
    MESSAGE_LAYER,
    OPEN,
    IndexedPoint,
    message_text,
)
from memledger_schemas.event_types import EventType
from memledger_vectors.message_context import Context, Sessions, Turn

APPENDED, EMBEDDED = EventType.MESSAGE_APPENDED, EventType.MESSAGE_EMBEDDED
EVENT_TYPES = (APPENDED, EMBEDDED)
IMPORTANCE, CONFIDENCE = 0.5, 1.0
"""What ranking reads of a message: neutral importance, full confidence (it was said)."""

_NAMESPACE = uuid.UUID("5f4c2a1e-8b0d-4c6e-9a7f-2d3b1c0e9f41")
_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

Loader = Callable[[str, str], list[IndexedPoint]]
"""Every point of (tenant, message id) as the index holds it."""


class MessageFold:
    """Folds message events into points; ``take()`` hands over what changed since the last
    call (points to upsert whole, point ids to delete)."""

    def __init__(self, load: Loader, *, sessions: Sessions | None = None,
                 cache: int = 20_000) -> None:
        self._load = load
        self._context = Context(sessions, cache=cache)
        self._points: OrderedDict[tuple[str, str], IndexedPoint] = OrderedDict()
        self._cache = cache
        self._dirty: dict[str, IndexedPoint] = {}
        self._gone: set[str] = set()

    def appended(self, e: Event, subject_id: str | None) -> None:
        """The message as appended: a new point without a dense vector (an erased message,
        opened to its placeholder, makes none, and removes one written before)."""
        message = str(e.payload["message_id"])
        point_id = point_id_of(e.tenant_id, message)
        content = e.payload["content"]
        if content == ERASED:
            self._points.pop((e.tenant_id, message), None)
            self._dirty.pop(point_id, None)
            self._gone.add(point_id)
            return
        session = str(e.payload["session_id"])
        before = self._context.before(e.tenant_id, session, e.position, subject_id)
        point = message_point(e, subject_id, point_id, str(content), before)
        self._context.said(e.tenant_id, session, Turn(
            e.position, subject_id, message_text(e.payload.get("participant"), str(content))))
        self._keep((e.tenant_id, message), point)

    def embedded(self, e: Event) -> None:
        """The message's dense vector; a message the index does not hold (erased, or not
        yet folded) is left alone."""
        key = (e.tenant_id, str(e.payload["message_id"]))
        point = self._points.get(key)
        if point is None and point_id_of(*key) not in self._gone:
            # (not one removed since the last write: the index still holds it until then)
            found = self._load(*key)
            point = found[0] if found else None
        if point is not None and e.payload["vector"] is not None:  # None: subject erased
            self._keep(key, replace(point, vector=list(e.payload["vector"]), payload={
                **point.payload, EMBEDDED_FROM: float(e.position)}))

    def forget_subject(self, tenant: str, subject_id: str) -> None:
        """After the index dropped a subject's points: drop its messages here too."""
        for key, point in list(self._points.items()):
            if key[0] == tenant and point.payload.get("subject_id") == subject_id:
                del self._points[key]
                self._dirty.pop(point.point_id, None)
        self._context.forget_subject(tenant, subject_id)

    def forget(self) -> None:
        self._points.clear()
        self._context.forget()
        self._dirty, self._gone = {}, set()

    def take(self) -> tuple[list[IndexedPoint], list[str]]:
        upserts, gone = list(self._dirty.values()), sorted(self._gone - set(self._dirty))
        self._dirty, self._gone = {}, set()
        while len(self._points) > self._cache:
            self._points.popitem(last=False)
        return upserts, gone

    def _keep(self, key: tuple[str, str], point: IndexedPoint) -> None:
        self._points[key] = point
        self._points.move_to_end(key)
        self._dirty[point.point_id] = point
        self._gone.discard(point.point_id)


def message_point(e: Event, subject_id: str | None, point_id: str, content: str,
                  before: Sequence[str] = ()) -> IndexedPoint:
    """The point of a message appended by ``e`` (no dense vector yet): its keywords those of
    the message as a reader sees it and of the turns ``before`` it (``message_context``)."""
    said = _epoch(e.valid_from or e.recorded_at)
    payload: dict[str, Any] = {
        "tenant": e.tenant_id, "item_id": str(e.payload["message_id"]),
        "space": e.space_id, "session": str(e.payload["session_id"]), "agent": e.agent_id,
        "kind": MESSAGE_KIND, "role": e.payload["role"],
        "participant": e.payload.get("participant"),
        "content": content, "tags": [], "importance": IMPORTANCE, "confidence": CONFIDENCE,
        "subject": None, "predicate": None, "content_version": 1,
        # A message ages from when it was said: imported history is as old as it is.
        "content_at": said, "valid_from": said, "valid_to": OPEN,
        "sys_from": float(e.position), "sys_to": OPEN, "archived_from": OPEN,
        "subject_id": subject_id, "layer": MESSAGE_LAYER}
    text = message_text(e.payload.get("participant"), content)
    return IndexedPoint(point_id, None, payload,
                        sparse.encode_document("\n".join([*before, text])))


def point_id_of(tenant: str, message_id: str) -> str:
    # One point per message for good: nothing ever makes a second version of it.
    return str(uuid.uuid5(_NAMESPACE, f"{tenant}/message/{message_id}"))


def _epoch(instant: datetime) -> float:
    return (instant - _EPOCH).total_seconds()
