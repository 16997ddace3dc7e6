"""Events for integration tests: uncommitted envelopes to append, and the whole log back."""

from typing import Any
from uuid import UUID

from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_platform.ids import uuid7
from memledger_schemas.envelope import EventEnvelope


def envelope(stream_id: UUID, version: int, *, tenant: str = "acme", space: str = "main",
             event_type: str = "memory.asserted", **fields: Any) -> EventEnvelope:
    """An uncommitted envelope; ``fields`` sets any other envelope field."""
    payload = fields.pop("payload", {"content": f"event {version} of {stream_id}"})
    return EventEnvelope(event_id=uuid7(), event_type=event_type, schema_version=1,
                         stream_id=stream_id, stream_version=version, tenant_id=tenant,
                         space_id=space, actor="test", payload=payload, **fields)


def read_everything(store: EventStore, page: int = 1_000) -> list[RecordedEvent]:
    found: list[RecordedEvent] = []
    while batch := store.read_all(found[-1].position if found else 0, page):
        found.extend(batch)
    return found
