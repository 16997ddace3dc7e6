"""The relay: the single writer of the JetStream events stream.

It tails the event store's notification log in position order and publishes each committed
event on ``<prefix>.evt.<tenant>.<space>.<event_type>`` with ``Nats-Msg-Id = event_id`` (the
stream drops a duplicate) and ``Nats-Expected-Last-Sequence`` (the stream refuses a message if
anything else was published since the relay last looked), so the stream holds every event once,
in position order. It resumes from the position in the stream's last message, so a crash at any
point neither loses nor repeats an event. A JetStream ack is not durability: the event store is.
"""

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import nats
from nats.js import JetStreamContext
from nats.js.api import PubAck

from memledger_platform.eventstore import EventStore, RecordedEvent
from memledger_schemas.subjects import (
    HDR_EVENT_TYPE,
    HDR_EXPECTED_LAST_SEQ,
    HDR_MSG_ID,
    HDR_POSITION,
    HDR_SCHEMA_VERSION,
    HDR_TRACEPARENT,
    Subjects,
)

log = logging.getLogger(__name__)


@dataclass
class Cursor:
    """Where the stream stands: the last relayed position and the stream's last sequence."""

    position: int = 0
    sequence: int = 0


class RelayOutOfSync(Exception):
    """The stream did not accept a publish as the next message; re-read where it stands."""


class Relay:
    def __init__(self, store: EventStore, js: JetStreamContext, subjects: Subjects, *,
                 batch: int = 2_000, poll_seconds: float = 0.5) -> None:
        self._store = store
        self._js = js
        self._subjects = subjects
        self._batch = batch
        self._poll = poll_seconds
        self._wake = asyncio.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.cursor = Cursor()

    def notify(self, position: int) -> None:
        """Called from any thread after a commit: there is something new to relay."""
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._wake.set)

    async def run(self, stop: asyncio.Event) -> None:
        """Relay until ``stop`` is set; survive NATS and database outages by retrying."""
        self._loop = asyncio.get_running_loop()
        self.cursor = await self.resume()
        while not stop.is_set():
            self._wake.clear()  # before reading: a commit from now on wakes the next idle
            try:
                moved = await self.relay_once()
            except (RelayOutOfSync, nats.errors.Error, OSError) as error:
                log.warning("relay resyncing after: %s", error)
                await asyncio.sleep(0.2)
                self.cursor = await self._resume_quietly()
                continue
            if not moved:
                await self._idle(stop)

    async def resume(self) -> Cursor:
        """The stream's last sequence and the event-store position of its last message."""
        info = await self._js.stream_info(self._subjects.events_stream)
        last = info.state.last_seq
        if last == 0:
            return Cursor(0, 0)
        msg = await self._js.get_msg(self._subjects.events_stream, seq=last)
        return Cursor(int((msg.headers or {})[HDR_POSITION]), last)

    async def relay_once(self) -> int:
        """Publish the next batch of committed events; return how many."""
        events = await asyncio.to_thread(self._store.read_all, self.cursor.position, self._batch)
        if not events:
            return 0
        await self._publish(events)
        return len(events)

    async def _publish(self, events: Sequence[RecordedEvent]) -> None:
        start = self.cursor.sequence
        futures = []
        for i, event in enumerate(events):
            fields = event.fields()
            subject = self._subjects.event(fields["tenant_id"], fields["space_id"],
                                           event.event_type)
            futures.append(await self._js.publish_async(
                subject, event.document(), headers=_headers(event, fields, start + i)))
        acks: list[PubAck | BaseException] = await asyncio.gather(*futures,
                                                                  return_exceptions=True)
        self._advance(events, acks)

    def _advance(self, events: Sequence[RecordedEvent],
                 acks: Sequence[PubAck | BaseException]) -> None:
        for event, ack in zip(events, acks, strict=True):
            if isinstance(ack, BaseException) or ack.duplicate:
                raise RelayOutOfSync(f"publish of position {event.position} refused: {ack}")
            self.cursor = Cursor(event.position, ack.seq)

    async def _idle(self, stop: asyncio.Event) -> None:
        # LISTEN/NOTIFY's role is played by ``notify`` from the in-process writer; the timeout
        # is the polling fallback that also catches commits made by other processes.
        waiters = [asyncio.ensure_future(self._wake.wait()), asyncio.ensure_future(stop.wait())]
        await asyncio.wait(waiters, timeout=self._poll, return_when=asyncio.FIRST_COMPLETED)
        for waiter in waiters:
            waiter.cancel()

    async def _resume_quietly(self) -> Cursor:
        try:
            return await self.resume()
        except (nats.errors.Error, OSError) as error:
            log.warning("relay cannot read the stream yet: %s", error)
            await asyncio.sleep(1.0)
            return self.cursor


def _headers(event: RecordedEvent, fields: dict[str, Any], last_sequence: int) -> dict[str, str]:
    headers = {HDR_MSG_ID: fields["event_id"], HDR_EXPECTED_LAST_SEQ: str(last_sequence),
               HDR_POSITION: str(event.position), HDR_EVENT_TYPE: event.event_type,
               HDR_SCHEMA_VERSION: str(fields["schema_version"])}
    if fields.get("traceparent"):
        headers[HDR_TRACEPARENT] = fields["traceparent"]
    return headers
