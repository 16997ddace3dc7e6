"""An in-memory ``EventStore`` for unit tests: same contract, no durability."""

import itertools
import threading
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from uuid import UUID

import orjson

from memledger_platform.eventstore.port import (
    Committed,
    EventStore,
    IdempotencyKeyTaken,
    IdempotencyRecord,
    IdempotentResult,
    NewEvent,
    RecordedEvent,
    StreamConflict,
)
from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.subjects import partition_of


class InMemoryEventStore(EventStore):
    def __init__(self, *, partitions: int = 1) -> None:
        """``partitions``: how many the events are split into by tenant (as the PostgreSQL
        adapter's)."""
        self._lock = threading.Lock()
        self._partitions = partitions
        self._log: list[RecordedEvent] = []
        self._partition_of: list[int] = []
        """Each event's partition, by position - 1 (recorded at commit)."""
        self._versions: set[tuple[UUID, int]] = set()
        self._keys: dict[tuple[str, str], IdempotencyRecord] = {}

    def append(self, events: Sequence[EventEnvelope | NewEvent],
               keys: Sequence[IdempotencyRecord] = ()) -> list[Committed]:
        new = [NewEvent.of(event) for event in events]
        with self._lock:
            self._check(new, keys)
            return [self._commit(event) for event in new] + self._remember(keys)

    def _check(self, events: Sequence[NewEvent], keys: Sequence[IdempotencyRecord]) -> None:
        slots = [(e.stream_id, e.stream_version) for e in events]
        if len(set(slots)) != len(slots) or self._versions.intersection(slots):
            raise StreamConflict(f"stream version taken among {slots}")
        names = [(k.tenant_id, k.key) for k in keys]
        if len(set(names)) != len(names) or set(names) & self._keys.keys():
            raise IdempotencyKeyTaken(f"idempotency key taken among {names}")

    def _commit(self, event: NewEvent) -> Committed:
        now = datetime.now(UTC)
        if self._log and now <= self._log[-1].recorded_at:
            now = self._log[-1].recorded_at + timedelta(microseconds=1)
        recorded = RecordedEvent(len(self._log) + 1, now, event.stream_id, event.stream_version,
                                 event.event_type, event.data)
        self._log.append(recorded)
        self._partition_of.append(
            partition_of(event_tenant(event), self._partitions) if self._partitions > 1 else 0)
        self._versions.add((event.stream_id, event.stream_version))
        return Committed(recorded.position, recorded.recorded_at)

    def _remember(self, keys: Sequence[IdempotencyRecord]) -> list[Committed]:
        for key in keys:
            self._keys[(key.tenant_id, key.key)] = key
        return []

    def read_streams(self, stream_ids: Sequence[UUID]) -> dict[UUID, list[RecordedEvent]]:
        wanted = set(stream_ids)
        found: dict[UUID, list[RecordedEvent]] = {}
        with self._lock:
            for event in self._log:
                if event.stream_id in wanted:
                    found.setdefault(event.stream_id, []).append(event)
        for events in found.values():
            events.sort(key=lambda event: event.stream_version)
        return found

    def read_all(self, after: int, limit: int) -> list[RecordedEvent]:
        with self._lock:
            return self._log[after:after + limit]

    def read_partition(self, partition: int, after: int, limit: int) -> list[RecordedEvent]:
        with self._lock:
            found = (e for e, p in zip(self._log[after:], self._partition_of[after:], strict=True)
                     if p == partition)
            return list(itertools.islice(found, limit))

    def max_position(self) -> int:
        with self._lock:
            return len(self._log)

    def find_idempotent(self, tenant_id: str, keys: Sequence[str]
                        ) -> dict[str, IdempotentResult]:
        with self._lock:
            found = {k: self._keys[(tenant_id, k)] for k in keys if (tenant_id, k) in self._keys}
            return {k: IdempotentResult(r, self._positions(r)) for k, r in found.items()}

    def interrupt(self) -> None:
        """Nothing to do: no call here waits on anything but a short in-process lock."""

    def _positions(self, record: IdempotencyRecord) -> tuple[int, ...]:
        versions = range(record.first_version, record.last_version + 1)
        return tuple(e.position for e in self._log
                     if e.stream_id == record.stream_id and e.stream_version in versions)


def event_tenant(event: NewEvent) -> str:
    """The tenant of an event in its stored form."""
    tenant: str = orjson.loads(event.data)["tenant_id"]
    return tenant
