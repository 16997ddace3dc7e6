"""Every NATS subject, stream and header name memledger uses, in one place.

Subjects carry the tenant as a token so that NATS permissions can fence tenants:
``<prefix>.evt.<tenant>.<space>.<event_type>`` for events,
``<prefix>.in.<tenant>.<command>`` for a tenant's intake, ``<prefix>.dlq.<source>.<tenant>`` for
dead letters. memledger's own services send their commands on
``<prefix>.svc.<service>.<tenant>.<command>``: the service token is who sent it, so NATS
permissions must let only that service's user publish there, and no tenant account import it.
A service sends several commands in one message on ``<prefix>.svc.<service>.<tenant>.commands``
(``SERVICE_MANY``).

With ``MEMLEDGER_EVENT_PARTITIONS`` above 1 the events are split by tenant into that many
streams (docs/adr/0016-capacity-model.md): partition ``i`` is the stream ``<STEM>_EVENTS_P<i>``
on ``<prefix>.evt<i>.<tenant>.<space>.<event_type>`` (a root of its own, so the streams never
overlap, nor one left by an unpartitioned deployment). One partition is today's single stream.
"""

import zlib
from dataclasses import dataclass, replace

DEFAULT_PREFIX = "memledger"

SERVICE_MANY = "commands"
"""The command token of a service's message of several commands, ``{"commands": [...]}``: each
committed or refused on its own, answered in one reply ``{"results": [...]}`` in their order."""

HDR_MSG_ID = "Nats-Msg-Id"
HDR_EXPECTED_LAST_SEQ = "Nats-Expected-Last-Sequence"
HDR_EXPECTED_LAST_MSG_ID = "Nats-Expected-Last-Msg-Id"
HDR_POSITION = "Memledger-Position"
HDR_EVENT_TYPE = "Memledger-Event-Type"
HDR_SCHEMA_VERSION = "Memledger-Schema-Version"
HDR_TRACEPARENT = "traceparent"
HDR_REPLY_TO = "Memledger-Reply-To"
"""Intake: where to send the command's result. (A JetStream publish's own reply subject gets the
stream's PubAck, which only says the command was received, not that it was committed.)"""
HDR_DLQ_REASON = "Memledger-Dead-Letter-Reason"
HDR_DLQ_SUBJECT = "Memledger-Original-Subject"


def partition_of(tenant: str, partitions: int) -> int:
    """The partition of a tenant's events: CRC-32 of its id modulo ``partitions``, the same in
    every process and every release (Python's ``hash`` of a str is salted per process)."""
    if partitions <= 1:
        return 0
    return zlib.crc32(tenant.encode()) % partitions


@dataclass(frozen=True)
class Subjects:
    """Names derived from one subject prefix (``MEMLEDGER_NATS_PREFIX``), for the events of one
    partition (``partition`` of ``partitions``; the intake and dead-letter names are shared)."""

    prefix: str = DEFAULT_PREFIX
    partitions: int = 1
    partition: int = 0

    def __post_init__(self) -> None:
        if not 0 <= self.partition < max(1, self.partitions):
            raise ValueError(f"partition {self.partition} is not one of 0..{self.partitions - 1}")

    @property
    def partitioned(self) -> bool:
        return self.partitions > 1

    def of_partition(self, partition: int) -> "Subjects":
        """The names of another partition's events."""
        return replace(self, partition=partition)

    def every_partition(self) -> list["Subjects"]:
        """The names of each partition's events, in order (one: these)."""
        return [self.of_partition(i) for i in range(self.partitions)]

    def of_tenant(self, tenant: str) -> "Subjects":
        """The names of the partition ``tenant``'s events are in."""
        return self.of_partition(partition_of(tenant, self.partitions))

    @property
    def _events_root(self) -> str:
        return f"{self.prefix}.evt{self.partition}" if self.partitioned else f"{self.prefix}.evt"

    @property
    def _stem(self) -> str:
        return self.prefix.upper().replace(".", "_").replace("-", "_")

    @property
    def events_stream(self) -> str:
        if self.partitioned:
            return f"{self._stem}_EVENTS_P{self.partition}"
        return f"{self._stem}_EVENTS"

    @property
    def intake_stream(self) -> str:
        return f"{self._stem}_INTAKE"

    @property
    def dead_letter_stream(self) -> str:
        return f"{self._stem}_DLQ"

    @property
    def all_events(self) -> str:
        return f"{self._events_root}.>"

    @property
    def all_intake(self) -> str:
        return f"{self.prefix}.in.>"

    @property
    def all_service_intake(self) -> str:
        return f"{self.prefix}.svc.>"

    @property
    def all_dead_letters(self) -> str:
        return f"{self.prefix}.dlq.>"

    @property
    def intake_consumer(self) -> str:
        return "ingest-intake"

    def event(self, tenant: str, space: str, event_type: str) -> str:
        return f"{self._events_root}.{tenant}.{space}.{event_type}"

    def events_of_type(self, event_type: str) -> str:
        """A filter for one event type's events, of every tenant and space."""
        return f"{self._events_root}.*.*.{event_type}"

    def event_tenant(self, subject: str) -> str | None:
        """The tenant of an event subject of this partition, or ``None``."""
        head = f"{self._events_root}."
        return subject[len(head):].split(".", 1)[0] if subject.startswith(head) else None

    def intake(self, tenant: str, command: str) -> str:
        return f"{self.prefix}.in.{tenant}.{command}"

    def service_intake(self, service: str, tenant: str, command: str) -> str:
        return f"{self.prefix}.svc.{service}.{tenant}.{command}"

    def dead_letter(self, source: str, tenant: str) -> str:
        return f"{self.prefix}.dlq.{source}.{tenant}"

    def parse_intake(self, subject: str) -> tuple[str, str] | None:
        """``(tenant, command)`` of an intake subject, or ``None`` if it is not one."""
        head = f"{self.prefix}.in."
        if not subject.startswith(head):
            return None
        parts = subject[len(head):].split(".")
        return (parts[0], parts[1]) if len(parts) == 2 else None

    def parse_service_intake(self, subject: str) -> tuple[str, str, str] | None:
        """``(service, tenant, command)`` of a service's intake subject, or ``None``."""
        head = f"{self.prefix}.svc."
        if not subject.startswith(head):
            return None
        parts = subject[len(head):].split(".")
        return (parts[0], parts[1], parts[2]) if len(parts) == 3 else None
