"""The vector projector: events in stream order → the vector index, ack after the write.

The platform consumer (``memledger_platform.consumer``) settles the messages; ``IndexWriter``
folds them. It reads every event (its position is then the log's, so a read with
``min_position`` from any write can wait on it) but decodes only memory events, by their type
header. The index writes are idempotent (see ``fold``), so a batch that failed half-way is
simply applied again; an index that is down is ``Transient``: the batch is retried in place,
kept in progress. An event the fold cannot read goes to ``<prefix>.dlq.vectors.<tenant>``
with the reason.

With ``positions`` the consumer is recreated at every start right after the last batch made
durable: a killed process leaves its batch pending on the old consumer, which would redeliver
it after later messages, and applying an item's older event after its newer ones would roll
the newer back. A batch that skips messages resubscribes.
"""

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from memledger_platform.consumer import (
    Batch,
    Consumer,
    Handling,
    Resubscribe,
    Subscription,
    Transient,
)
from memledger_platform.consumer_positions import ConsumerPositions
from memledger_platform.crypto import Opener
from memledger_platform.events import decode
from memledger_platform.vectorindex.factory import VECTORS_DURABLE
from memledger_platform.vectorindex.port import IndexedPoint, IndexReopened, VectorIndex
from memledger_schemas.event_types import EventType
from memledger_schemas.subjects import HDR_EVENT_TYPE, HDR_POSITION, Subjects
from memledger_vectors.fold import EVENT_TYPES, VectorFold

log = logging.getLogger(__name__)

DURABLE = VECTORS_DURABLE
ACK_WAIT_SECONDS = 30.0
FLUSH_SECONDS = 30.0
"""Under steady writes, how often the index is flushed. Rarely, because a flush holds the GIL
whatever it writes, stalling every request of the process (ADR 0006). What it costs is
replay: a restart re-derives the events since the last flush (idempotently)."""
OPTIMIZE_AFTER_POINTS = 1_000

Erased = Callable[[str, str, int, int], None]
"""Called with (tenant, subject, position, points removed) for an erasure receipt."""


@dataclass(frozen=True)
class Batching:
    """How the projector takes events: up to ``size`` at once and, under a stream of writes,
    a batch at most every ``pace`` seconds (``Subscription.pace_seconds``): each batch costs an
    index write, a position record and a fetch whatever it holds."""

    size: int = 256
    pace: float = 0.0


class VectorProjector:
    """The vector projector: a ``Consumer`` of the events stream with an ``IndexWriter``."""

    def __init__(self, subjects: Subjects, index: VectorIndex, model: str, *,
                 batching: Batching | None = None, durable: str = DURABLE,
                 opener: Opener | None = None,
                 on_erased: Erased | None = None,
                 positions: ConsumerPositions | None = None) -> None:
        self._subjects = subjects
        batching = batching or Batching()
        self._writer = IndexWriter(subjects, index, model, durable=durable,
                                   opener=opener or Opener(None), on_erased=on_erased,
                                   positions=positions)
        self._spec = Subscription(
            name="vectors", stream=subjects.events_stream, durable=durable,
            subject=subjects.all_events, batch=batching.size, ack_wait=ACK_WAIT_SECONDS,
            max_ack_pending=batching.size * 2, pace_seconds=batching.pace,
            start=self._writer.start)
        self._consumer = Consumer(None, subjects, self._spec, self._writer)

    @property
    def position(self) -> int:
        """The log position every event up to which is in the index: written, not only
        folded. A search names it as its basis, and ``wait_for`` releases read-your-writes
        waiters on it, while the batch folded before it may still be on its way to the index
        (written in a worker thread, with searches served meanwhile)."""
        return self._writer.written

    @property
    def dead_letters(self) -> int:
        return self._consumer.dead_letters.count

    async def reached(self) -> int:
        """``position``, for a search in this process (query reads it from PostgreSQL, where
        ``positions`` records it after every batch)."""
        return self.position

    async def wait_for(self, position: int, seconds: float) -> bool:
        """Whether the index reaches ``position`` within ``seconds``."""
        return await self._writer.wait_for(position, seconds)

    async def run(self, js: JetStreamContext, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, in stream order from where the index got to."""
        self._consumer = Consumer(js, self._subjects, self._spec, self._writer)
        await self._consumer.run(stop)

    async def handle(self, msgs: list[Msg]) -> None:
        """Fold fetched messages into the index and settle every one of them."""
        await self._consumer.handle(msgs)


class IndexWriter(Handling):
    """Folds batches of events into the index (the consumer's handler)."""

    def __init__(self, subjects: Subjects, index: VectorIndex, model: str, *, durable: str,
                 opener: Opener, on_erased: Erased | None,
                 positions: ConsumerPositions | None) -> None:
        self._subjects = subjects
        self._index = index
        self._fold = VectorFold(index.points, model, sessions=index.session_messages,
                                vectors=index.vectors)
        self._open = opener
        self._on_erased = on_erased
        self._positions = positions
        self._durable = durable
        self._written_seq = 0
        self._durable_seq = 0
        self._flushed_at = time.monotonic()
        self._advanced = asyncio.Condition()
        self._unoptimized = 0
        self.written = 0

    async def wait_for(self, position: int, seconds: float) -> bool:
        """Whether the index reaches ``position`` within ``seconds`` (with none to wait: whether
        it is there now)."""
        if self.written >= position:  # asyncio.wait_for with 0 s times out before looking
            return True
        async with self._advanced:
            try:
                await asyncio.wait_for(self._advanced.wait_for(
                    lambda: self.written >= position), seconds)
            except TimeoutError:
                return False
        return True

    async def start(self) -> int | None:
        """Where the consumer starts: after the last durable batch (with ``positions``), from
        the start of the log for an empty index (new, or its files were removed: whatever an
        earlier consumer of that name had acknowledged), else where the durable left off."""
        empty = await asyncio.to_thread(self._index.count) == 0
        if empty and self._positions is not None:
            await asyncio.to_thread(self._positions.restart_written, self._durable)
        if empty:
            return 0
        if self._positions is None:
            return None
        return await asyncio.to_thread(self._positions.load, self._durable)

    async def handle(self, batch: Batch) -> None:
        """Fold a batch into the index. An erasure splits the batch: what came before it is
        written, then the subject's points go, so what the subject wrote after its erasure
        survives."""
        try:
            await self._handle(batch)
        except IndexReopened as lost:
            self._forget_unflushed()
            raise Resubscribe(f"deriving again from the last flush: {lost}") from lost

    async def _handle(self, batch: Batch) -> None:
        msgs = batch.pending
        for index, msg in enumerate(msgs):
            if (msg.headers or {}).get(HDR_EVENT_TYPE) == EventType.SUBJECT_ERASED:
                await self._write_pending()
                await self._erase(msg)
                await batch.ack(msgs[:index + 1])  # done: a retry does not erase again
            else:
                await self._fold_one(batch, msg)
        # what every query process names and waits on, recorded in the same worker-thread
        # trip as the index write: a thread handoff is a fixed cost of every small batch
        await self._write_pending(recording=self._fold.position)
        self.written = self._fold.position
        self._written_seq = max(self._written_seq, msgs[-1].metadata.sequence.stream)
        await batch.ack()
        async with self._advanced:
            self._advanced.notify_all()
        if time.monotonic() - self._flushed_at > FLUSH_SECONDS:
            await self._flush()

    async def idle(self) -> None:
        await self._flush()
        if self._unoptimized >= OPTIMIZE_AFTER_POINTS:
            # Caught up: have the HNSW graph built for what arrived (aside, in the index's
            # builder). Small additions are searched exactly until enough accumulate.
            self._unoptimized = 0
            await asyncio.to_thread(self._index.optimize)

    async def stopping(self) -> None:
        try:
            await self._flush()  # what was written is kept
        except Exception as error:
            log.warning("vector projector could not flush as it stopped: %r", error)

    def _forget_unflushed(self) -> None:
        """The index lost what was written since the last flush: fold again from there
        (``start`` names the last durable batch), reading items back from the index.
        ``position`` stays where it was (it never goes back); until the log is folded again
        up to it, a search may miss what the lost writes held."""
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

    async def _write_pending(self, recording: int | None = None) -> None:
        """Write what was folded; then, with ``recording``, record that position as written
        (with ``positions``)."""
        upserts, gone = self._fold.take()
        self._unoptimized += len(upserts)
        await asyncio.to_thread(self._write, upserts, gone, recording)

    async def _erase(self, msg: Msg) -> None:
        erased = decode(msg.data, opener=self._open)
        tenant, subject = erased.tenant_id, str(erased.payload["subject_id"])
        removed = await asyncio.to_thread(self._index.delete_subject, tenant, subject)
        self._fold.forget_subject(tenant, subject)
        self._fold.position = max(self._fold.position, erased.position)
        if self._on_erased is not None:
            await asyncio.to_thread(self._on_erased, tenant, subject, erased.position, removed)
        log.info("vector index erased subject %s of %s: %d points", subject, tenant, removed)

    def _write(self, upserts: list[IndexedPoint], gone: list[str], recording: int | None
               ) -> None:
        try:
            self._index.upsert(upserts)
            self._index.delete(gone)
        except IndexReopened:
            raise
        except Exception as error:  # the index is unavailable: keep the batch, retry
            raise Transient(f"vector index write: {error!r}") from error
        if recording is not None and self._positions is not None:
            self._positions.record_written(self._durable, recording)

    async def _fold_one(self, batch: Batch, msg: Msg) -> None:
        headers = msg.headers or {}
        if headers.get(HDR_EVENT_TYPE) not in EVENT_TYPES:
            if HDR_POSITION in headers:
                self._fold.position = max(self._fold.position, int(headers[HDR_POSITION]))
            return
        try:
            self._fold.apply(decode(msg.data, opener=self._open))
        except (ValueError, KeyError, TypeError) as error:
            await batch.dead_letter(msg, f"vector fold: {error!r}")
