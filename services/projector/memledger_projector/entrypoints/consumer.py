"""The projector's JetStream consumer: events in stream order → read models, ack after commit.

The platform consumer (``memledger_platform.consumer``) settles the messages; this handler
applies them. A batch commits in one transaction with its checkpoint, then its messages are
acked. A lost database connection is ``Transient``: the batch is retried in place, kept in
progress (never nak'd: the consumer would then deliver later events first, and the checkpoint
would make the earlier ones look applied). An event that cannot be applied at all (poison:
undecodable, a payload the fold cannot read, or refused by the database) is dead-lettered to
``<prefix>.dlq.projector.<tenant>`` with the reason, and the rest goes on. A redelivered event
at or below the checkpoint changes nothing.

The consumer is recreated at every start from the checkpoint's stream sequence: a projector
killed with a batch in flight leaves those messages pending on the old consumer, which would
redeliver them only after the later ones, when the checkpoint already makes them look applied
(a kill -9 lost writes that way, found by the fault suite). A batch that does not follow on
from the last one resubscribes the same way.
"""

import asyncio
import logging
from collections.abc import Callable
from typing import Any, TypeVar

import psycopg
from nats.aio.msg import Msg
from nats.js import JetStreamContext

from memledger_platform import logs, receipts
from memledger_platform.consumer import Batch, Consumer, Handling, Subscription, Transient
from memledger_platform.crypto import Opener
from memledger_platform.events import VECTOR, Event, decode
from memledger_platform.readmodel.checkpoint import Checkpoint, read_checkpoint
from memledger_platform.readmodel.schema import Names, kept_versions, live_version
from memledger_projector.core import erasure, store
from memledger_schemas.event_types import EventType
from memledger_schemas.subjects import HDR_EVENT_TYPE, Subjects

log = logging.getLogger(__name__)
T = TypeVar("T")

DURABLE = "projector-postgres"
ACK_WAIT_SECONDS = 15.0
"""Short, so a batch a crashed projector left unacked is redelivered soon after restart."""


class Projector:
    """The read-model projector: a ``Consumer`` of the events stream with ``ReadModels``."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], js: JetStreamContext,
                 subjects: Subjects, names: Names, *, batch: int = 500,
                 opener: Opener | None = None) -> None:
        self._models = ReadModels(connect, names, opener or Opener(None),
                                  subjects.partition if subjects.partitioned else None)
        self._consumer = Consumer(js, subjects, Subscription(
            name="projector", stream=subjects.events_stream, durable=DURABLE,
            subject=subjects.all_events, batch=batch, ack_wait=ACK_WAIT_SECONDS,
            start=self._models.checkpoint), self._models)

    @property
    def position(self) -> int:
        """The log position the read models are at (as this process last committed)."""
        return self._models.position

    @property
    def dead_letters(self) -> int:
        return self._consumer.dead_letters.count

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, always in stream order from the checkpoint on."""
        await self._consumer.run(stop)

    async def handle(self, msgs: list[Msg]) -> None:
        """Apply fetched messages and settle every one of them."""
        await self._consumer.handle(msgs)


class ReadModels(Handling):
    """Applies batches of events to the live read models (the consumer's handler)."""

    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], names: Names,
                 opener: Opener, partition: int | None = None) -> None:
        """``partition``: the events are that partition's, with a checkpoint of their own."""
        self._connect = connect
        self._names = names
        self._partition = partition
        self._open = opener
        self._conn: psycopg.Connection[Any] | None = None
        self.position = 0

    async def checkpoint(self) -> int:
        """The stream sequence the live read models are at (the consumer starts after it)."""
        return (await self._db(self._read_checkpoint, "reading its checkpoint")).stream_seq

    async def handle(self, batch: Batch) -> None:
        """Apply a batch. An erasure splits it: the events before it are applied, the
        subject's rows scrubbed, then the rest."""
        msgs, start = batch.pending, 0
        for index, msg in enumerate(msgs):
            if (msg.headers or {}).get(HDR_EVENT_TYPE) == EventType.SUBJECT_ERASED:
                await self._apply(batch, msgs[start:index])
                await self._scrub(batch, msg)
                start = index
        await self._apply(batch, msgs[start:])

    async def _db(self, work: Callable[..., T], doing: str, *args: Any) -> T:
        """``work(*args)`` in a worker thread; a lost connection is ``Transient``."""
        try:
            return await asyncio.to_thread(work, *args)
        except psycopg.OperationalError as error:
            self._conn = None
            raise Transient(f"projector {doing}: {error}") from error

    def _connection(self) -> psycopg.Connection[Any]:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return self._conn

    def _read_checkpoint(self) -> Checkpoint:
        conn = self._connection()
        return read_checkpoint(conn, self._names.schema(live_version(conn, self._names)),
                               partition=self._partition)

    async def _scrub(self, batch: Batch, msg: Msg) -> None:
        # Before the erasure event itself is applied (and checkpointed): a crash in between
        # scrubs again on redelivery, which changes nothing more. Decoding it drops the erased
        # keys from the keyring's cache.
        erased = decode(msg.data, opener=self._open)
        tenant, subject = erased.tenant_id, str(erased.payload["subject_id"])
        key_ids = str(erased.payload.get("key_id", "")).split(",")
        # Its VACUUMs may wait for older transactions to end, longer than the ack wait.
        scrubbing = asyncio.ensure_future(self._db(
            self._scrub_now, "scrubbing an erasure", tenant, subject, erased.position, key_ids))
        while not (await asyncio.wait({scrubbing}, timeout=ACK_WAIT_SECONDS / 3))[0]:
            await batch.keep()
        purged = scrubbing.result()
        log.info("erased subject %s of %s from the read models: %s", subject, tenant, purged)

    def _scrub_now(self, tenant: str, subject: str, position: int, key_ids: list[str]
                   ) -> dict[str, Any]:
        """Scrub the live version and the one kept for a rollback (the counts are the live
        one's), then vacuum them."""
        conn = self._connection()
        versions = kept_versions(conn, self._names)
        purged = {"versions": versions, **erasure.erase(
            conn, [self._names.schema(v) for v in versions], self._names.base, tenant,
            subject, position, key_ids)}
        receipts.record(conn, self._names.base, tenant, subject, position, "postgres", purged)
        return purged

    async def _apply(self, batch: Batch, msgs: list[Msg]) -> None:
        events, good = await self._decode(batch, msgs)
        if not events:
            return
        try:
            checkpoint = await self._db(self._apply_now, "applying a batch", events,
                                        good[-1].metadata.sequence.stream)
        except Transient:
            raise
        except Exception:
            await self._one_by_one(batch, events, good)
            return
        self.position = checkpoint.position
        await batch.ack(good)

    async def _decode(self, batch: Batch, msgs: list[Msg]) -> tuple[list[Event], list[Msg]]:
        events, good = [], []
        for msg in msgs:
            try:
                events.append(decode(msg.data, opener=self._open, skip=VECTOR))
                good.append(msg)
            except (ValueError, KeyError, TypeError) as error:
                await batch.dead_letter(msg, f"undecodable event: {error!r}")
        return events, good

    async def _one_by_one(self, batch: Batch, events: list[Event], msgs: list[Msg]) -> None:
        # A batch failed for a reason other than the connection: find the poison event(s)
        # by applying the batch's events one at a time; the others go through.
        for event, msg in zip(events, msgs, strict=True):
            with logs.bound_event(msg.headers, tenant=event.tenant_id):
                try:
                    checkpoint = await self._db(self._apply_now, "applying an event",
                                                [event], msg.metadata.sequence.stream)
                except Transient:
                    raise
                except Exception as error:
                    await batch.dead_letter(msg, f"position {event.position}: {error!r}")
                    continue
                self.position = checkpoint.position
                await batch.ack([msg])

    def _apply_now(self, events: list[Event], last_seq: int) -> Checkpoint:
        return store.apply_batch(self._connection(), self._names, events, last_seq,
                                 self._partition)
