"""The event store port (the system of record) and its adapters."""

from memledger_platform.eventstore.port import (
    Committed,
    EventStore,
    IdempotencyKeyTaken,
    IdempotencyRecord,
    Interrupted,
    NewEvent,
    RecordedEvent,
    StreamConflict,
)

__all__ = [
    "Committed",
    "EventStore",
    "IdempotencyKeyTaken",
    "IdempotencyRecord",
    "Interrupted",
    "NewEvent",
    "RecordedEvent",
    "StreamConflict",
]
