"""Event export for operators: the log in position order, narrowed by position and recording
time, tenant, space and event type (what ``memledger replay`` writes as NDJSON and the gRPC
``Replay`` stream sends)."""

from dataclasses import dataclass
from datetime import datetime

from memledger_platform.eventstore import EventStore, RecordedEvent

READ_BATCH = 5_000


@dataclass(frozen=True)
class Selection:
    """Which events to export (``None`` or empty: no condition)."""

    tenant: str | None = None
    space: str | None = None
    types: frozenset[str] = frozenset()
    since: datetime | None = None
    """Recorded strictly after."""
    until: datetime | None = None
    """Recorded at or before."""

    def wants(self, event: RecordedEvent) -> bool:
        if self.since is not None and event.recorded_at <= self.since:
            return False
        if self.until is not None and event.recorded_at > self.until:
            return False
        if self.types and event.event_type not in self.types:
            return False
        if self.tenant is None and self.space is None:
            return True
        fields = event.fields()
        return (self.tenant in (None, fields["tenant_id"])
                and self.space in (None, fields["space_id"]))


@dataclass(frozen=True)
class Scanned:
    """One read of the log: the events selected, and the last position looked at."""

    events: list[RecordedEvent]
    through: int
    done: bool


def scan(store: EventStore, after: int, last: int, selection: Selection) -> Scanned:
    """The selected events of the next batch after position ``after``, up to ``last``
    (inclusive); ``done`` once ``last`` or the end of the log is reached."""
    read = store.read_all(after, READ_BATCH)
    batch = [e for e in read if e.position <= last]
    through = batch[-1].position if batch else after
    done = len(read) < READ_BATCH or len(batch) < len(read) or through >= last
    return Scanned([e for e in batch if selection.wants(e)], through, done)
