"""The projector's JetStream consumer: events in stream order → read models, ack after commit.

Acknowledgement policy: a batch commits in one transaction with its checkpoint, then every
message of it is acked. A lost database connection is retried in place, with backoff, keeping
the batch in progress (never nak'd: the consumer would then deliver later events first, and the
checkpoint would make the earlier ones look applied). An event that cannot be applied at all
(poison: undecodable, a payload the fold cannot read, or refused by the database) is sent to
``<prefix>.dlq.projector.<tenant>`` with the reason and terminated, and the consumer goes on.
A redelivered event at or below the checkpoint changes nothing.
"""

import asyncio
import contextlib
import logging
from collections.abc import Callable
from typing import Any

import orjson
import psycopg
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from memledger_platform import logs, receipts, telemetry
from memledger_platform.bus import fetch_ready
from memledger_platform.crypto import Opener
from memledger_platform.readmodel.checkpoint import Checkpoint, read_checkpoint
from memledger_platform.readmodel.projection import Event, event_from, unread_dropped
from memledger_platform.readmodel.schema import Names, kept_versions, live_version
from memledger_projector.core import erasure, store
from memledger_schemas.subjects import HDR_DLQ_REASON, HDR_DLQ_SUBJECT, HDR_EVENT_TYPE, Subjects

log = logging.getLogger(__name__)
_tracer = telemetry.tracer(__name__)

DURABLE = "projector-postgres"
RETRY_SECONDS = 0.5
MAX_RETRY_SECONDS = 10.0
ACK_WAIT_SECONDS = 15.0
"""Short, so a batch a crashed projector left unacked is redelivered soon after restart."""


class Projector:
    def __init__(self, connect: Callable[[], psycopg.Connection[Any]], js: JetStreamContext,
                 subjects: Subjects, names: Names, *, batch: int = 500,
                 opener: Opener | None = None) -> None:
        self._connect = connect
        self._js = js
        self._subjects = subjects
        self._names = names
        self._batch = batch
        self._open = opener or Opener(None)
        self._conn: psycopg.Connection[Any] | None = None
        self.position = 0
        self.dead_letters = 0
        self._next_seq = 0
        """The stream sequence the next batch must start at (0: not known yet)."""

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, always in stream order from the checkpoint on.

        The consumer is recreated at every start from the checkpoint's stream sequence: a
        projector killed with a batch in flight leaves those messages pending on the old
        consumer, which would redeliver them only after the later ones, when the checkpoint
        already makes them look applied (a kill -9 lost writes that way, found by the fault
        suite). A batch that does not follow on from the last one resubscribes the same way.
        """
        while not stop.is_set():
            sub = await self._subscribe()
            try:
                while not stop.is_set():
                    msgs = await fetch_ready(sub, self._batch, wait=0.5)
                    if msgs:
                        await self.handle(msgs)
            except _OutOfOrder as gap:
                log.warning("projector resubscribing from its checkpoint: %s", gap)
            finally:
                with contextlib.suppress(Exception):
                    await sub.unsubscribe()

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        checkpoint = await self._checkpoint_retrying()
        self._next_seq = checkpoint.stream_seq + 1
        with contextlib.suppress(NotFoundError):
            await self._js.delete_consumer(self._subjects.events_stream, DURABLE)
        start = ({"deliver_policy": DeliverPolicy.BY_START_SEQUENCE,
                  "opt_start_seq": self._next_seq} if checkpoint.stream_seq else
                 {"deliver_policy": DeliverPolicy.ALL})
        return await self._js.pull_subscribe(
            self._subjects.all_events, durable=DURABLE, stream=self._subjects.events_stream,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_SECONDS,
                                  max_ack_pending=self._batch, **start))

    async def _checkpoint_retrying(self) -> Checkpoint:
        delay = RETRY_SECONDS
        while True:
            try:
                return await asyncio.to_thread(self._read_checkpoint)
            except psycopg.OperationalError as error:
                log.warning("projector retrying its checkpoint in %.1fs: %s", delay, error)
                self._conn = None
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)

    def _read_checkpoint(self) -> Checkpoint:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        live = self._names.schema(live_version(self._conn, self._names))
        return read_checkpoint(self._conn, live)

    async def handle(self, msgs: list[Msg]) -> None:
        """Apply a fetched batch and settle every message of it. An erasure splits the batch:
        the events before it are applied, the subject's rows scrubbed, then the rest."""
        first = msgs[0].metadata.sequence.stream
        if self._next_seq and first > self._next_seq:
            raise _OutOfOrder(f"stream sequence {first} follows {self._next_seq - 1}")
        with telemetry.consuming(_tracer, "projector", msgs):
            await self._handle_batch(msgs)
        self._next_seq = max(self._next_seq, msgs[-1].metadata.sequence.stream + 1)

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        start = 0
        for index, msg in enumerate(msgs):
            if (msg.headers or {}).get(HDR_EVENT_TYPE) == "subject.erased":
                await self._handle(msgs[start:index])
                await self._scrub(msg)
                start = index
        await self._handle(msgs[start:])

    async def _scrub(self, msg: Msg) -> None:
        # Before the erasure event itself is applied (and checkpointed): a crash in between
        # scrubs again on redelivery, which changes nothing more.
        document = orjson.loads(msg.data)
        self._open(document)  # drops the erased keys from the keyring's cache
        tenant, subject = document["tenant_id"], document["payload"]["subject_id"]
        key_ids = str(document["payload"].get("key_id", "")).split(",")
        position = int(document["global_position"])
        delay = RETRY_SECONDS
        while True:
            try:
                purged = await asyncio.to_thread(self._scrub_now, tenant, subject, position,
                                                 key_ids)
                break
            except psycopg.OperationalError as error:
                log.warning("projector retrying an erasure in %.1fs: %s", delay, error)
                self._conn = None
                await msg.in_progress()
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)
        log.info("erased subject %s of %s from the read models: %s", subject, tenant, purged)

    def _scrub_now(self, tenant: str, subject: str, position: int, key_ids: list[str]
                   ) -> dict[str, Any]:
        """Scrub the live version and the one kept for a rollback (the counts are the live
        one's), then vacuum them."""
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        versions = kept_versions(self._conn, self._names)
        purged = {"versions": versions, **erasure.erase(
            self._conn, [self._names.schema(v) for v in versions], self._names.base, tenant,
            subject, position, key_ids)}
        receipts.record(self._conn, self._names.base, tenant, subject, position, "postgres",
                        purged)
        return purged

    async def _handle(self, msgs: list[Msg]) -> None:
        if not msgs:
            return
        events, good = await self._decode(msgs)
        if not events:
            return
        last_seq = good[-1].metadata.sequence.stream
        try:
            checkpoint = await self._apply_retrying(events, last_seq, good)
        except Exception:
            await self._one_by_one(events, good)
            return
        self.position = checkpoint.position
        await asyncio.gather(*(m.ack() for m in good))

    async def _apply_retrying(self, events: list[Event], last_seq: int, msgs: list[Msg]
                              ) -> Checkpoint:
        """Apply, retrying a lost connection until it works (messages kept in progress)."""
        delay = RETRY_SECONDS
        while True:
            try:
                return await asyncio.to_thread(self._apply, events, last_seq)
            except psycopg.OperationalError as error:
                log.warning("projector retrying a batch in %.1fs: %s", delay, error)
                self._conn = None
                await asyncio.gather(*(m.in_progress() for m in msgs))
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _decode(self, msgs: list[Msg]) -> tuple[list[Event], list[Msg]]:
        events, good = [], []
        for msg in msgs:
            try:
                events.append(event_from(self._open(unread_dropped(orjson.loads(msg.data)))))
                good.append(msg)
            except (ValueError, KeyError, TypeError) as error:
                await self._dead_letter(msg, f"undecodable event: {error!r}")
        return events, good

    async def _one_by_one(self, events: list[Event], msgs: list[Msg]) -> None:
        # A batch failed for a reason other than the connection: find the poison event(s)
        # by applying the batch's events one at a time; the others go through.
        for event, msg in zip(events, msgs, strict=True):
            with logs.bound_event(msg.headers, tenant=event.tenant_id):
                try:
                    checkpoint = await self._apply_retrying(
                        [event], msg.metadata.sequence.stream, [msg])
                    self.position = checkpoint.position
                    await msg.ack()
                except Exception as error:
                    await self._dead_letter(msg, f"position {event.position}: {error!r}")

    def _apply(self, events: list[Event], last_seq: int) -> Checkpoint:
        if self._conn is None or self._conn.closed:
            self._conn = self._connect()
        return store.apply_batch(self._conn, self._names, events, last_seq)

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        tenant = _tenant_of(msg.subject, self._subjects)
        await self._js.publish(self._subjects.dead_letter("projector", tenant), msg.data,
                               headers={HDR_DLQ_REASON: reason[:1024],
                                        HDR_DLQ_SUBJECT: msg.subject})
        self.dead_letters += 1
        telemetry.DEAD_LETTERS.add(1, {"source": "projector"})
        with logs.bound_event(msg.headers, msg.data, tenant=tenant):
            log.error("projector dead-lettered %s: %s", msg.subject, reason)
        await msg.term()


class _OutOfOrder(Exception):
    """A batch skipped messages (redelivered out of order): resubscribe from the checkpoint."""


def _tenant_of(subject: str, subjects: Subjects) -> str:
    head = f"{subjects.prefix}.evt."
    return subject[len(head):].split(".", 1)[0] if subject.startswith(head) else "_invalid"
