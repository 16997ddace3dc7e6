"""The relay: the single writer of the JetStream events stream.

It tails the event store's notification log in position order and publishes each committed
event on ``<prefix>.evt.<tenant>.<space>.<event_type>`` with ``Nats-Msg-Id = event_id`` (the
stream drops a duplicate) and ``Nats-Expected-Last-Sequence`` (the stream refuses a message if
anything else was published since the relay last looked), so the stream holds every event once,
in position order. It resumes from the position in the stream's last message, so a crash at any
point neither loses nor repeats an event. A JetStream ack is not durability: the event store is.
"""

import asyncio
import contextlib
import logging
from collections.abc import Sequence
from typing import Any

import structlog
from nats.aio.client import Client
from nats.js import JetStreamContext

from memledger_platform import telemetry
from memledger_platform.bus import Ack, PipelinedPublisher
from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_platform.stream_cursor import Cursor, RelayOutOfSync, stream_cursor
from memledger_schemas.subjects import (
    HDR_EVENT_TYPE,
    HDR_EXPECTED_LAST_MSG_ID,
    HDR_EXPECTED_LAST_SEQ,
    HDR_MSG_ID,
    HDR_POSITION,
    HDR_SCHEMA_VERSION,
    HDR_TRACEPARENT,
    Subjects,
)

log = logging.getLogger(__name__)
_tracer = telemetry.tracer(__name__)

ACK_TIMEOUT_SECONDS = 30.0


class Relay:
    def __init__(self, store: EventStore, js: JetStreamContext, subjects: Subjects, *,
                 batch: int = 2_000, poll_seconds: float = 0.5) -> None:
        """``subjects``: the names of the stream to publish, one partition's when partitioned
        (the relay then reads only that partition's events from the store)."""
        self._store = store
        self._js = js
        self._nc: Client = js._nc
        self._publisher: PipelinedPublisher | None = None
        self._subjects = subjects
        self._batch = batch
        self._poll = poll_seconds
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cursor = Cursor()

    @property
    def subjects(self) -> Subjects:
        """The names of the stream this relay publishes."""
        return self._subjects

    def notify(self, position: int) -> None:
        """Called from any thread (the listener of the store's NOTIFY) after a commit: there
        is something new to relay."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set. Never dies: on any failure (NATS, the database, a
        stream that is not as the relay left it) it logs, backs off, re-reads where the stream
        stands and carries on."""
        self._loop = asyncio.get_running_loop()
        failures = 0
        while not stop.is_set():
            self._wake.clear()  # before reading: a commit from now on wakes the next idle
            try:
                if failures or self.cursor == Cursor():
                    self.cursor = await self.resume()
                moved = await self.relay_once()
                failures = 0
            except Exception as error:
                failures += 1
                with structlog.contextvars.bound_contextvars(
                        relayed_position=self.cursor.position):
                    log.warning("relay failed (%d in a row), will resync: %s", failures, error)
                await _wait(stop, min(5.0, 0.1 * 2 ** failures))
                continue
            if not moved:
                await self._idle(stop)

    async def resume(self) -> Cursor:
        """The stream's last sequence and the event-store position of its last message."""
        return await stream_cursor(self._js, self._subjects)

    async def relay_once(self) -> int:
        """Publish the next batch of committed events; return how many."""
        events = await asyncio.to_thread(self._read, self.cursor.position)
        if not events:
            return 0
        await self._publish(events)
        return len(events)

    def _read(self, after: int) -> list[RecordedEvent]:
        if self._subjects.partitioned:
            return self._store.read_partition(self._subjects.partition, after, self._batch)
        return self._store.read_all(after, self._batch)

    async def _publish(self, events: Sequence[RecordedEvent]) -> None:
        if self._publisher is None:
            self._publisher = PipelinedPublisher(self._nc)
            await self._publisher.start()
        # Each publish names its predecessor (sequence and event id), so the stream accepts a
        # message only right after the one before it: once one is refused, every later one is
        # too. The last message's ack therefore vouches for the whole batch, in order, and is
        # the only one asked for.
        previous, start = self.cursor.event_id, self.cursor.sequence
        last = len(events) - 1
        for i, event in enumerate(events):
            fields = event.fields()
            subject = self._subjects.event(fields["tenant_id"], fields["space_id"],
                                           event.event_type)
            headers = _headers(event, fields, start + i, previous, subject)
            if i < last:
                await self._nc.publish(subject, event.document(), headers=headers)
            else:
                final = await self._publisher.publish(subject, event.document(), headers)
            previous = fields["event_id"]
        [ack] = await self._publisher.settle([final], ACK_TIMEOUT_SECONDS)
        self._advance(events[-1], previous, start + len(events), ack)
        telemetry.EVENTS_PUBLISHED.add(len(events))
        if log.isEnabledFor(logging.DEBUG):
            with structlog.contextvars.bound_contextvars(first_position=events[0].position,
                                                         last_position=events[-1].position):
                log.debug("published %d events", len(events))

    def _advance(self, event: RecordedEvent, event_id: str, expected_seq: int,
                 ack: Ack | BaseException) -> None:
        if isinstance(ack, BaseException) or ack.duplicate or ack.seq != expected_seq:
            raise RelayOutOfSync(f"publish up to position {event.position} refused: {ack}")
        self.cursor = Cursor(event.position, ack.seq, event_id)

    async def _idle(self, stop: asyncio.Event) -> None:
        # LISTEN/NOTIFY's role is played by ``notify`` from the in-process writer; the timeout
        # is the polling fallback that also catches commits made by other processes.
        waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait(waiters, timeout=self._poll, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()


def _headers(event: RecordedEvent, fields: dict[str, Any], last_sequence: int,
             last_event_id: str, subject: str) -> dict[str, str]:
    headers = {HDR_MSG_ID: fields["event_id"], HDR_EXPECTED_LAST_SEQ: str(last_sequence),
               HDR_POSITION: str(event.position), HDR_EVENT_TYPE: event.event_type,
               HDR_SCHEMA_VERSION: str(fields["schema_version"])}
    if last_event_id:
        headers[HDR_EXPECTED_LAST_MSG_ID] = last_event_id
    if fields.get("traceparent"):
        headers[HDR_TRACEPARENT] = _publish_traceparent(fields, event.position, subject)
    return headers


def _publish_traceparent(fields: dict[str, Any], position: int, subject: str) -> str:
    """The context consumers continue from: a publish span, the child of the write's context
    stored in the event (that context itself when tracing is off)."""
    if not telemetry.enabled():
        return str(fields["traceparent"])
    return telemetry.child_traceparent(_tracer, "relay publish", fields["traceparent"],
                                       attributes={"messaging.system": "nats",
                                                   "messaging.destination.name": subject,
                                                   "memledger.event_id": fields["event_id"],
                                                   "memledger.global_position": position}
                                       ) or str(fields["traceparent"])


async def _wait(stop: asyncio.Event, seconds: float) -> None:
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
