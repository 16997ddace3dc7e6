"""The vector projector: events in stream order → the vector index, ack after the write.

It reads every event (its position is then the log's, so a read with ``min_position`` from
any write can wait on it) but decodes only memory events, by their type header. The index
writes are idempotent (see ``vectors``), so a batch that failed half-way is simply applied
again; an index that is down is retried in place with backoff, keeping the batch in progress.
An event the fold cannot read goes to ``<prefix>.dlq.vectors.<tenant>`` with the reason.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

import orjson
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from memledger_platform import logs, telemetry
from memledger_platform.bus import fetch_ready
from memledger_platform.consumer_positions import ConsumerPositions
from memledger_platform.crypto import Opener
from memledger_platform.vectorindex.factory import VECTORS_DURABLE
from memledger_platform.vectorindex.port import IndexReopened, VectorIndex
from memledger_schemas.subjects import (
    HDR_DLQ_REASON,
    HDR_DLQ_SUBJECT,
    HDR_EVENT_TYPE,
    HDR_POSITION,
    Subjects,
)
from memledger_vectors.fold import EVENT_TYPES, VectorFold, vector_event

log = logging.getLogger(__name__)
_tracer = telemetry.tracer(__name__)

DURABLE = VECTORS_DURABLE
ACK_WAIT_SECONDS = 30.0
FLUSH_SECONDS = 30.0
"""Under steady writes, how often the index is flushed. Rarely, because a flush holds the GIL
whatever it writes, stalling every request of the process (ADR 0006). What it costs is
replay: a restart re-derives the events since the last flush (idempotently)."""
OPTIMIZE_AFTER_POINTS = 1_000
MAX_RETRY_SECONDS = 10.0


class VectorProjector:
    def __init__(self, subjects: Subjects, index: VectorIndex, model: str, *,
                 batch: int = 256, durable: str = DURABLE, opener: Opener | None = None,
                 on_erased: Callable[[str, str, int, int], None] | None = None,
                 positions: ConsumerPositions | None = None) -> None:
        self._js: JetStreamContext | None = None
        self._subjects = subjects
        self._index = index
        self._fold = VectorFold(index.points, model, sessions=index.session_messages)
        self._batch = batch
        self._open = opener or Opener(None)
        self._on_erased = on_erased
        self._positions = positions
        self._next_seq = 0
        self._written_seq = 0
        self._durable_seq = 0
        self._flushed_at = time.monotonic()
        """Called with (tenant, subject, position, points removed) for an erasure receipt."""
        self._durable = durable
        self._advanced = asyncio.Condition()
        self.dead_letters = 0
        self._unoptimized = 0
        self._written = 0

    @property
    def position(self) -> int:
        """The log position every event up to which is in the index: written, not only
        folded. A search names it as its basis, and ``wait_for`` releases read-your-writes
        waiters on it, while the batch folded before it may still be on its way to the index
        (written in a worker thread, with searches served meanwhile)."""
        return self._written

    async def reached(self) -> int:
        """``position``, for a search in this process (query reads it from PostgreSQL, where
        ``positions`` records it after every batch)."""
        return self.position

    async def wait_for(self, position: int, seconds: float) -> bool:
        """Whether the index reaches ``position`` within ``seconds`` (with none to wait: whether
        it is there now)."""
        if self.position >= position:  # asyncio.wait_for with 0 s times out before looking
            return True
        async with self._advanced:
            try:
                await asyncio.wait_for(self._advanced.wait_for(
                    lambda: self.position >= position), seconds)
            except TimeoutError:
                return False
        return True

    async def run(self, js: JetStreamContext, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, in stream order from where the index got to.

        With ``positions`` the consumer is recreated at every start right after the last
        batch written: a killed process leaves its batch pending on the old consumer, which
        would redeliver it after later messages, and applying an item's older event after its
        newer ones would roll the newer back. A batch that skips messages resubscribes."""
        self._js = js
        delay = 0.5
        while not stop.is_set():
            try:
                await self._subscribed(js, stop)
            except _OutOfOrder as gap:
                log.warning("vector projector resubscribing: %s", gap)
            except IndexReopened as lost:
                log.warning("vector projector deriving again from its last flush: %s", lost)
                self._forget_unflushed()
            except Exception as error:  # never dies, as the relay does not
                # The index out of reach (IndexUnavailable), or PostgreSQL, where the
                # positions are saved (killed -9, this task ended for good and the index
                # stayed where it was until the vectors service restarted).
                log.warning("vector projector resubscribing in %.1fs: %r", delay, error)
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _subscribed(self, js: JetStreamContext, stop: asyncio.Event) -> None:
        sub = await self._subscribe(js)
        try:
            await self._consume(sub, stop)
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()

    async def _consume(self, sub: JetStreamContext.PullSubscription, stop: asyncio.Event
                       ) -> None:
        while not stop.is_set():
            msgs = await fetch_ready(sub, self._batch, wait=0.5)
            if msgs:
                await self.handle(msgs)
                if time.monotonic() - self._flushed_at > FLUSH_SECONDS:
                    await self._flush()
                continue
            await self._flush()
            if self._unoptimized >= OPTIMIZE_AFTER_POINTS:
                # Caught up: build the HNSW graph for what arrived. Small additions are
                # searched exactly until enough accumulate (Edge's optimize holds the GIL).
                self._unoptimized = 0
                await asyncio.to_thread(self._index.optimize)
        await self._flush()  # stopping: what was written is kept

    def _forget_unflushed(self) -> None:
        """The index lost what was written since the last flush: fold again from there
        (``_subscribe`` starts after the last durable batch), reading items back from the
        index. ``position`` stays where it was (it never goes back); until the log is folded
        again up to it, a search may miss what the lost writes held."""
        self._fold.forget()
        self._written_seq = self._durable_seq
        self._unoptimized = 0

    async def _flush(self) -> None:
        """Make the index durable up to the last batch written, then record that position:
        a restart resumes from the last durable batch, so writes not yet flushed when the
        process died are derived again (in order, idempotently). Flushing is coalesced (every
        ``FLUSH_SECONDS``, or when idle) because the engine's flush stalls the whole process."""
        self._flushed_at = time.monotonic()
        if self._written_seq <= self._durable_seq:
            return
        seq = self._written_seq
        await asyncio.to_thread(self._index.flush)
        if self._positions is not None:
            await asyncio.to_thread(self._positions.save, self._durable, seq)
        self._durable_seq = seq

    async def _subscribe(self, js: JetStreamContext) -> JetStreamContext.PullSubscription:
        empty = await asyncio.to_thread(self._index.count) == 0
        last = 0
        if self._positions is not None and not empty:
            last = await asyncio.to_thread(self._positions.load, self._durable)
        if empty or self._positions is not None:
            # An empty index (new, or its files were removed) is filled from the start of
            # the log, whatever an earlier consumer of that name had acknowledged.
            await _forget_consumer(js, self._subjects.events_stream, self._durable)
        if empty and self._positions is not None:
            await asyncio.to_thread(self._positions.restart_written, self._durable)
        self._next_seq = last + 1 if last else 0
        start = ({"deliver_policy": DeliverPolicy.BY_START_SEQUENCE, "opt_start_seq": last + 1}
                 if last else {"deliver_policy": DeliverPolicy.ALL})
        return await js.pull_subscribe(
            self._subjects.all_events, durable=self._durable,
            stream=self._subjects.events_stream,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_SECONDS,
                                  max_ack_pending=self._batch * 2, **start))

    async def handle(self, msgs: list[Msg]) -> None:
        """Fold a fetched batch into the index and settle every message of it. An erasure
        splits the batch: what came before it is written, then the subject's points go, so
        what the subject wrote after its erasure survives."""
        first = msgs[0].metadata.sequence.stream
        if self._next_seq and first > self._next_seq:
            raise _OutOfOrder(f"stream sequence {first} follows {self._next_seq - 1}")
        with telemetry.consuming(_tracer, "vectors", msgs):
            await self._handle_batch(msgs)

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        for msg in msgs:
            if (msg.headers or {}).get(HDR_EVENT_TYPE) == "subject.erased":
                await self._write_pending(msgs)
                await self._erase(msg)
            else:
                await self._fold_one(msg)
        await self._write_pending(msgs)
        self._written = self._fold.position
        if self._positions is not None:  # what every query process names and waits on
            await asyncio.to_thread(self._positions.record_written, self._durable,
                                    self._written)
        last = msgs[-1].metadata.sequence.stream
        self._written_seq = max(self._written_seq, last)
        self._next_seq = max(self._next_seq, last + 1)
        await asyncio.gather(*(m.ack() for m in msgs))
        async with self._advanced:
            self._advanced.notify_all()

    async def _write_pending(self, msgs: list[Msg]) -> None:
        upserts, gone = self._fold.take()
        self._unoptimized += len(upserts)
        delay = 0.5
        while True:
            try:
                await asyncio.to_thread(self._write, upserts, gone)
                return
            except IndexReopened:
                raise
            except Exception as error:  # the index is unavailable: keep the batch, retry
                log.warning("vector projector retrying a write in %.1fs: %r", delay, error)
                await asyncio.gather(*(m.in_progress() for m in msgs))
                await asyncio.sleep(delay)
                delay = min(delay * 2, MAX_RETRY_SECONDS)

    async def _erase(self, msg: Msg) -> None:
        document = self._open(orjson.loads(msg.data))
        tenant, subject = document["tenant_id"], document["payload"]["subject_id"]
        removed = await asyncio.to_thread(self._index.delete_subject, tenant, subject)
        self._fold.forget_subject(tenant, subject)
        self._fold.position = max(self._fold.position, int(document["global_position"]))
        if self._on_erased is not None:
            await asyncio.to_thread(self._on_erased, tenant, subject,
                                    int(document["global_position"]), removed)
        log.info("vector index erased subject %s of %s: %d points", subject, tenant, removed)

    def _write(self, upserts: list, gone: list[str]) -> None:  # type: ignore[type-arg]
        self._index.upsert(upserts)
        self._index.delete(gone)

    async def _fold_one(self, msg: Msg) -> None:
        headers = msg.headers or {}
        if headers.get(HDR_EVENT_TYPE) not in EVENT_TYPES:
            if HDR_POSITION in headers:
                self._fold.position = max(self._fold.position, int(headers[HDR_POSITION]))
            return
        try:
            self._fold.apply(vector_event(self._open(orjson.loads(msg.data))))
        except (ValueError, KeyError, TypeError) as error:
            await self._dead_letter(msg, f"vector fold: {error!r}")

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        head = f"{self._subjects.prefix}.evt."
        tenant = msg.subject[len(head):].split(".", 1)[0] if msg.subject.startswith(
            head) else "_invalid"
        assert self._js is not None  # dead letters only come from a running consumer
        await self._js.publish(self._subjects.dead_letter("vectors", tenant), msg.data,
                               headers={HDR_DLQ_REASON: reason[:1024],
                                        HDR_DLQ_SUBJECT: msg.subject})
        self.dead_letters += 1
        telemetry.DEAD_LETTERS.add(1, {"source": "vectors"})
        with logs.bound_event(msg.headers, msg.data, tenant=tenant):
            log.error("vector projector dead-lettered %s: %s", msg.subject, reason)


class _OutOfOrder(Exception):
    """A batch skipped messages (redelivered out of order): resubscribe."""


async def _forget_consumer(js: JetStreamContext, stream: str, durable: str) -> None:
    with contextlib.suppress(NotFoundError):
        await js.delete_consumer(stream, durable)
