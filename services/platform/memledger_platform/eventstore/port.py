"""``EventStore``: append-only streams with a global, gapless-safe order.

Contract shared by every adapter (and checked by one test suite run against each):

- ``append`` is atomic: all events and idempotency records of the call commit, or none do.
- Positions are assigned at commit, strictly increasing, and never reused; a reader that has
  seen position N never later finds a new event at a position below N (gapless-safe).
- ``recorded_at`` is assigned at commit and never decreases in position order.
- A stream version can be taken once: a second event at the same (stream, version) makes the
  whole append fail with ``StreamConflict``. A second record for the same (tenant, key) makes it
  fail with ``IdempotencyKeyTaken``.
- Each event belongs to its tenant's partition of the log (``partition_of(tenant_id,
  partitions)``, ``partitions`` as the store was opened with, recorded at commit:
  docs/adr/0016). ``read_partition`` reads one partition as ``read_all`` reads the whole log;
  with one partition every event is in partition 0.
"""

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from uuid import UUID

import orjson

from memledger_schemas.envelope import EventEnvelope


@dataclass(frozen=True)
class Committed:
    position: int
    recorded_at: datetime


@dataclass(frozen=True)
class RecordedEvent:
    """A committed event as stored: its envelope JSON without the commit fields, plus those."""

    position: int
    recorded_at: datetime
    stream_id: UUID
    stream_version: int
    event_type: str
    data: bytes

    def document(self) -> bytes:
        """The full envelope as JSON, commit fields included (what is published and exported)."""
        tail = orjson.dumps({"global_position": self.position,
                             "recorded_at": self.recorded_at.isoformat()})
        # Splice rather than re-encode: ``data`` is a JSON object without these two keys.
        return self.data[:-1] + b"," + tail[1:]

    def fields(self) -> dict[str, Any]:
        """The stored envelope fields, decoded (cheap; no validation)."""
        decoded: dict[str, Any] = orjson.loads(self.data)
        return decoded

    def envelope(self) -> EventEnvelope:
        """The validated envelope, commit fields included."""
        return EventEnvelope.model_validate_json(self.document())


@dataclass(frozen=True)
class IdempotencyRecord:
    """What a command with an idempotency key produced, kept to answer its retries."""

    tenant_id: str
    key: str
    request_hash: str
    stream_id: UUID
    first_version: int
    last_version: int
    response: dict[str, Any]


@dataclass(frozen=True)
class IdempotentResult:
    """A stored idempotency record with the positions its events were committed at."""

    record: IdempotencyRecord
    positions: tuple[int, ...]


class StreamConflict(Exception):
    """A stream version in the append was already taken by another writer."""


class IdempotencyKeyTaken(Exception):
    """An idempotency key in the append was already recorded by another writer."""


class Interrupted(Exception):
    """The call was cut short by ``EventStore.interrupt``. An interrupted ``append`` may or
    may not have committed (its commit may have been under way)."""


def encode(envelope: EventEnvelope) -> bytes:
    """The stored form of an uncommitted envelope (commit fields are the store's to add)."""
    return envelope.model_dump_json(exclude={"global_position", "recorded_at"}).encode()


@dataclass(frozen=True, slots=True)
class NewEvent:
    """An uncommitted event in its stored form: ``data`` is the envelope JSON without the
    commit fields. The writer builds these directly (one JSON encoding per event); anything
    else can pass ``EventEnvelope`` objects to ``append``."""

    event_id: UUID
    stream_id: UUID
    stream_version: int
    event_type: str
    data: bytes

    @classmethod
    def of(cls, envelope: "EventEnvelope | NewEvent") -> "NewEvent":
        if isinstance(envelope, NewEvent):
            return envelope
        return cls(envelope.event_id, envelope.stream_id, envelope.stream_version,
                   envelope.event_type, encode(envelope))


class EventStore(ABC):
    @abstractmethod
    def append(self, events: Sequence["EventEnvelope | NewEvent"],
               keys: Sequence[IdempotencyRecord] = ()) -> list[Committed]:
        """Commit ``events`` (uncommitted) and ``keys`` atomically; return one ``Committed``
        per event, in order. Raises ``StreamConflict``/``IdempotencyKeyTaken``."""

    @abstractmethod
    def read_streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[RecordedEvent]]:
        """Every event of each named stream, in version order (absent streams are omitted)."""

    @abstractmethod
    def read_all(self, after: int, limit: int) -> list[RecordedEvent]:
        """Up to ``limit`` events with position > ``after``, in position order."""

    @abstractmethod
    def read_partition(self, partition: int, after: int, limit: int) -> list[RecordedEvent]:
        """Up to ``limit`` events of ``partition`` (the partition recorded with each at commit)
        with position > ``after``, in position order: ``read_all`` of one partition."""

    @abstractmethod
    def max_position(self) -> int:
        """The highest committed position, 0 for an empty store."""

    @abstractmethod
    def find_idempotent(self, tenant_id: str, keys: Sequence[str]
                        ) -> dict[str, IdempotentResult]:
        """The stored results of those keys that have been used in this tenant."""

    @abstractmethod
    def interrupt(self) -> None:
        """Make every call in progress on this store (in other threads) fail soon with
        ``Interrupted``, and return once they have or are sure to; later calls work as usual
        (on fresh connections where one had to be broken). For a caller that gave up on a
        call past its deadline; an adapter whose calls never wait on anything does nothing."""
