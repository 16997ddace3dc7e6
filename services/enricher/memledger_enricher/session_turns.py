"""``SessionTurns``: the messages of a session, for a summary of them. Read from the event
store (the session's stream holds every message in the order appended, and a message the
enricher sees is already committed there), opened with the subjects' keys.
"""

from abc import ABC, abstractmethod
from uuid import UUID

from memledger_enricher.extractor import Turn
from memledger_platform.crypto import ERASED, Opener
from memledger_platform.events import Event, decode
from memledger_platform.eventstore import EventStore
from memledger_schemas.event_types import EventType


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
            if (event.event_type != EventType.MESSAGE_APPENDED
                    or event.stream_version > up_to_version):
                continue
            said = decode(event.data, position=event.position, recorded_at=event.recorded_at,
                          opener=self._open)
            turn = turn_of(said) if said.tenant_id == tenant else None
            if turn is not None:
                found.append(turn)
        return found


def turn_of(message: Event) -> Turn | None:
    """The turn a ``conversation.message_appended`` event holds (``None``: erased)."""
    payload = message.payload
    text = payload["content"]
    if not text or text == ERASED:
        return None
    return Turn(UUID(str(payload["message_id"])), str(payload["role"]), str(text),
                payload.get("participant"), message.valid_from, message.subject_id)
