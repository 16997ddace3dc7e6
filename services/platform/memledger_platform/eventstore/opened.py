"""An event store seen through the subjects' keys: what it reads has its sealed personal fields
opened (or replaced by placeholders once erased). For the operator paths that fold the log
themselves (rebuild, verify, export), so they need not know about sealing at all."""

from collections.abc import Sequence
from dataclasses import replace
from uuid import UUID

import orjson

from memledger_platform.crypto import PREFIX, Opener
from memledger_platform.eventstore.port import (
    Committed,
    EventStore,
    IdempotencyRecord,
    IdempotentResult,
    NewEvent,
    RecordedEvent,
)
from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.event_types import EventType

_SEALED = PREFIX.encode()


class OpenedEventStore(EventStore):
    def __init__(self, inner: EventStore, opener: Opener) -> None:
        self._inner = inner
        self._open = opener

    @property
    def sealed(self) -> tuple[EventStore, Opener]:
        """The store underneath and the opener: for a reader that opens events itself, once,
        as it parses them (``events.decode(..., opener=opener)``)."""
        return self._inner, self._open

    def append(self, events: Sequence[EventEnvelope | NewEvent],
               keys: Sequence[IdempotencyRecord] = ()) -> list[Committed]:
        return self._inner.append(events, keys)

    def read_streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[RecordedEvent]]:
        return {k: [self._opened(e) for e in v]
                for k, v in self._inner.read_streams(stream_ids).items()}

    def read_all(self, after: int, limit: int) -> list[RecordedEvent]:
        return [self._opened(e) for e in self._inner.read_all(after, limit)]

    def read_partition(self, partition: int, after: int, limit: int) -> list[RecordedEvent]:
        return [self._opened(e) for e in self._inner.read_partition(partition, after, limit)]

    def max_position(self) -> int:
        return self._inner.max_position()

    def find_idempotent(self, tenant_id: str, keys: Sequence[str]
                        ) -> dict[str, IdempotentResult]:
        return self._inner.find_idempotent(tenant_id, keys)

    def interrupt(self) -> None:
        self._inner.interrupt()

    def _opened(self, event: RecordedEvent) -> RecordedEvent:
        if _SEALED not in event.data and event.event_type != EventType.SUBJECT_ERASED:
            return event  # the common case, at no cost
        return replace(event, data=orjson.dumps(self._open(orjson.loads(event.data))))
