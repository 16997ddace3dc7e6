"""``SessionTurns``: the messages of a session, for a summary of them. Read from the event
store (the session's stream holds every message in the order appended, and a message the
enricher sees is already committed there), opened with the subjects' keys.
"""

from abc import ABC, abstractmethod
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson

from memledger_enricher.extractor import Turn
from memledger_platform.crypto import ERASED, Opener
from memledger_platform.eventstore import EventStore

MESSAGE = "conversation.message_appended"


class SessionTurns(ABC):
    @abstractmethod
    def turns(self, tenant: str, stream_id: UUID, up_to_version: int) -> list[Turn]:
        """The messages of ``tenant``'s session stream ``stream_id`` up to (and with) stream
        version ``up_to_version``, in order; erased ones left out."""


class EventStoreTurns(SessionTurns):
    def __init__(self, store: EventStore, opener: Opener) -> None:
        self._store = store
        self._open = opener

    def turns(self, tenant: str, stream_id: UUID, up_to_version: int) -> list[Turn]:
        events = self._store.read_streams([stream_id]).get(stream_id, [])
        found = []
        for event in events:
            if event.event_type != MESSAGE or event.stream_version > up_to_version:
                continue
            document = self._open(orjson.loads(event.data))
            turn = turn_of(document) if document.get("tenant_id") == tenant else None
            if turn is not None:
                found.append(turn)
        return found


def turn_of(document: dict[str, Any]) -> Turn | None:
    """The turn a ``conversation.message_appended`` document holds (``None``: erased)."""
    payload = document["payload"]
    text = payload.get("content", payload.get("text"))
    if not text or text == ERASED:
        return None
    said = document.get("valid_from")
    return Turn(UUID(str(payload["message_id"])), str(payload["role"]), str(text),
                payload.get("participant"),
                datetime.fromisoformat(said) if isinstance(said, str) else said,
                document.get("subject_id"))
