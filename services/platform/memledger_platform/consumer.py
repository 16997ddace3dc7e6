"""One JetStream pull consumer for every service that reads a stream, with its acknowledgement
policy in one place (the faststream model: a handler holds only its own logic; how a message is
settled follows from what the handler did or raised).

The policy, per fetched batch (``Batch``):

- the handler returns                  → every message it left unsettled is acked (the handler
  returns only after its effect is committed: ack after commit);
- the handler raises ``Transient``     → ordered: the batch is kept in progress and handled again
  in place after a growing delay (a nak would let later messages overtake it); after
  ``max_attempts`` (if set) its unsettled messages are dead-lettered. Unordered: nak'd with
  ``nak_delay``, to come back later;
- the handler raises ``Poison``        → its unsettled messages are dead-lettered with the reason
  and terminated (a handler dead-letters one message of a batch with ``Batch.dead_letter``);
- a batch that skips messages (ordered, unfiltered) → ``OutOfOrder``: resubscribe from the
  handler's position;
- the handler raises ``Resubscribe``   → resubscribe from the handler's position;
- anything else                         → logged, and resubscribed after a growing delay.

Dead letters go to ``<prefix>.dlq.<source>.<tenant>`` with the reason and the original subject.
Each batch is handled inside the consumer's telemetry span and log fields.
"""

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol

from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy
from nats.js.errors import NotFoundError

from memledger_platform import telemetry
from memledger_platform.bus import fetch_ready
from memledger_platform.settle import Batch, DeadLetters, tenant_of
from memledger_schemas.subjects import Subjects

__all__ = ["Batch", "Consumer", "DeadLetters", "Handler", "Handling", "OutOfOrder", "Poison",
           "Resubscribe", "StartPosition", "Subscription", "Transient", "tenant_of"]

log = logging.getLogger(__name__)
_tracer = telemetry.tracer(__name__)

StartPosition = Callable[[], Awaitable[int | None]]
"""The stream sequence a consumer has handled up to, read at every (re)subscription: ``n``
recreates the consumer to deliver from ``n + 1`` (``0``: from the first message); ``None``
keeps the durable consumer where its acks left it."""


class Transient(Exception):
    """The batch could not be handled now (a database or model out of reach): try again."""


class Poison(Exception):
    """The batch can never be handled: dead-letter it with this reason."""


class Resubscribe(Exception):
    """Start again from the handler's position (e.g. its state was lost)."""


class OutOfOrder(Resubscribe):
    """A batch skipped messages (redelivered out of order)."""


@dataclass(frozen=True)
class Subscription:
    """What a consumer reads, and how."""

    name: str
    """The consumer's name in logs, spans and dead-letter subjects (``dlq.<name>.<tenant>``)."""
    stream: str
    durable: str
    subject: str
    """The stream's subject filter; ``filter_subjects``, if any, narrow it."""
    filter_subjects: tuple[str, ...] = ()
    batch: int = 256
    ack_wait: float = 30.0
    max_ack_pending: int | None = None
    """Default: ``batch`` (ordered) or ``batch`` per in-flight batch and one more."""
    ordered: bool = True
    """Messages are handled in stream order: one batch at a time, transient failures retried
    in place, a batch that skips messages resubscribes (without ``filter_subjects``)."""
    in_flight: int = 1
    """Unordered: how many batches are handled at once."""
    pace_seconds: float = 0.0
    """A batch whose first message comes within ``pace_seconds`` of the previous batch waits
    out the rest and takes what arrived meanwhile too, so that a stream of small deliveries
    shares each batch's fixed cost; a message after a quiet spell is taken at once (0: never
    waits)."""
    each: bool = False
    """Each message is a batch of its own (fetched together, settled one by one)."""
    acks: bool = True
    """``False``: nothing is acked (a consumer that folds the whole stream at every start)."""
    queue: bool = False
    """Bind to a work-queue consumer, created or updated (its messages leave once acked)."""
    start: StartPosition | None = None
    max_attempts: int | None = None
    """Ordered: attempts at a batch before its messages are dead-lettered (``None``: no end)."""
    retry_seconds: float = 0.5
    max_retry_seconds: float = 10.0
    nak_delay: float = 5.0
    traced: bool = True
    dead_letter_level: int = logging.ERROR


class Handler(Protocol):
    async def handle(self, batch: "Batch") -> None:
        """Apply the batch's messages (``batch.pending``), committing their effect."""

    async def idle(self) -> None:
        """Called when a fetch found nothing (caught up)."""

    async def stopping(self) -> None:
        """Called once, when the consumer stops."""


class Handling:
    """A ``Handler`` base whose hooks do nothing."""

    async def idle(self) -> None:
        return None

    async def stopping(self) -> None:
        return None


class Consumer:
    """Runs ``handler`` on a ``Subscription`` until stopped, settling every batch by the
    policy above."""

    def __init__(self, js: JetStreamContext | None, subjects: Subjects, spec: Subscription,
                 handler: Handler) -> None:
        """``js``: ``None`` for a consumer only driven by ``handle`` (tests)."""
        self._js = js
        self._spec = spec
        self._handler = handler
        self.dead_letters = DeadLetters(js, subjects, spec.name, spec.dead_letter_level)
        self._next_seq = 0
        """The stream sequence the next batch must start at (0: not known)."""
        self._taken_at = -float("inf")
        """When the last batch was taken (``time.monotonic``), for ``pace_seconds``."""

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set, resubscribing as the policy says."""
        delay = self._spec.retry_seconds
        try:
            while not stop.is_set():
                if await self._subscribed(stop):
                    delay = self._spec.retry_seconds
                    continue
                await _stopped(stop, delay)
                delay = min(delay * 2, self._spec.max_retry_seconds)
        finally:
            await self._handler.stopping()

    async def _subscribed(self, stop: asyncio.Event) -> bool:
        """One subscription's life; ``False`` if it ended on an error (to wait before the
        next)."""
        try:
            sub = await self._subscribe()
        except Exception as error:
            log.warning("%s could not subscribe: %r", self._spec.name, error)
            return False
        try:
            await self._consume(sub, stop)
        except Resubscribe as why:
            log.warning("%s resubscribing: %s", self._spec.name, why)
        except Exception as error:  # never dies: the next subscription starts over
            log.warning("%s resubscribing after an error: %r", self._spec.name, error)
            return False
        finally:
            with contextlib.suppress(Exception):
                await sub.unsubscribe()
        return True

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        spec, js = self._spec, self._js
        assert js is not None, "a consumer without NATS only handles what it is given"
        if spec.queue:
            await js.add_consumer(spec.stream, self._config(durable_name=spec.durable,
                                                            name=spec.durable))
            return await js.pull_subscribe_bind(durable=spec.durable, stream=spec.stream)
        position = await spec.start() if spec.start is not None else None
        start: dict[str, object] = {"deliver_policy": DeliverPolicy.ALL}
        if position is not None:
            with contextlib.suppress(NotFoundError):
                await js.delete_consumer(spec.stream, spec.durable)
            if position:
                start = {"deliver_policy": DeliverPolicy.BY_START_SEQUENCE,
                         "opt_start_seq": position + 1}
        self._next_seq = position + 1 if position else 0
        return await js.pull_subscribe(spec.subject, durable=spec.durable,
                                             stream=spec.stream, config=self._config(**start))

    def _config(self, **more: object) -> ConsumerConfig:
        spec = self._spec
        if not spec.acks:
            return ConsumerConfig(ack_policy=AckPolicy.NONE,
                                  filter_subjects=list(spec.filter_subjects) or None,
                                  **more)  # type: ignore[arg-type]
        pending = spec.max_ack_pending or spec.batch * (
            1 if spec.ordered else spec.in_flight + 1)
        return ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=spec.ack_wait,
                              max_ack_pending=pending,
                              filter_subjects=list(spec.filter_subjects) or None,
                              **more)  # type: ignore[arg-type]

    async def _consume(self, sub: JetStreamContext.PullSubscription, stop: asyncio.Event
                       ) -> None:
        under_way: set[asyncio.Task[None]] = set()
        try:
            while not stop.is_set():
                if len(under_way) >= self._spec.in_flight:
                    await asyncio.wait(under_way, return_when=asyncio.FIRST_COMPLETED)
                    continue
                msgs = await fetch_ready(sub, self._spec.batch, wait=0.5,
                                         until=self._taken_at + self._spec.pace_seconds)
                if not msgs:
                    await self._handler.idle()
                    continue
                self._taken_at = time.monotonic()
                if self._spec.ordered:
                    await self._ordered(msgs, stop)
                else:
                    task = asyncio.create_task(self._unordered(msgs, stop))
                    under_way.add(task)
                    task.add_done_callback(under_way.discard)
        finally:
            await asyncio.gather(*under_way, return_exceptions=True)

    async def _ordered(self, msgs: list[Msg], stop: asyncio.Event) -> None:
        first = msgs[0].metadata.sequence.stream
        # (A filtered consumer skips the stream's other messages: no gap tells it anything.)
        if self._next_seq and not self._spec.filter_subjects and first > self._next_seq:
            raise OutOfOrder(f"stream sequence {first} follows {self._next_seq - 1}")
        for batch in self._batches(msgs):
            if stop.is_set():
                await batch.nak()  # given back, to be read again after the restart
                continue
            await self.settle(batch, stop)
        self._next_seq = max(self._next_seq, msgs[-1].metadata.sequence.stream + 1)

    async def _unordered(self, msgs: list[Msg], stop: asyncio.Event) -> None:
        await asyncio.gather(*(self._unless_stopped(b, stop) for b in self._batches(msgs)))

    async def _unless_stopped(self, batch: Batch, stop: asyncio.Event) -> None:
        # A batch waiting on another service must not hold up a shutdown: give it back.
        handling = asyncio.ensure_future(self.settle(batch, stop))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({handling, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not handling.done():
            handling.cancel()
            await asyncio.gather(handling, return_exceptions=True)
            await batch.nak()

    def _batches(self, msgs: list[Msg]) -> list[Batch]:
        groups = [[m] for m in msgs] if self._spec.each else [msgs]
        return [Batch(group, self.dead_letters, self._spec.acks) for group in groups]

    async def settle(self, batch: Batch, stop: asyncio.Event | None = None) -> None:
        """Handle ``batch`` and settle each of its messages by the policy."""
        spec, delay, attempt = self._spec, self._spec.retry_seconds, 0
        while True:
            attempt += 1
            try:
                await self._handle(batch)
            except Transient as failure:
                if not spec.ordered:
                    log.warning("%s will retry %d messages in %.0fs: %s", spec.name,
                                len(batch.pending), spec.nak_delay, failure)
                    await batch.nak(spec.nak_delay)
                    return
                if spec.max_attempts is not None and attempt >= spec.max_attempts:
                    await _dead_letter_all(batch, f"gave up after {attempt} attempts: "
                                                  f"{failure}")
                    return
                log.warning("%s retrying a batch in %.1fs: %s", spec.name, delay, failure)
                await batch.keep()
                if await _stopped(stop, delay):
                    await batch.nak()  # given back, to be read again after the restart
                    return
                delay = min(delay * 2, spec.max_retry_seconds)
                continue
            except Poison as poison:
                await _dead_letter_all(batch, str(poison))
                return
            await batch.ack()
            return

    async def _handle(self, batch: Batch) -> None:
        if not batch.pending:
            return
        if not self._spec.traced:
            await self._handler.handle(batch)
            return
        with telemetry.consuming(_tracer, self._spec.name, batch.pending):
            await self._handler.handle(batch)

    async def handle(self, msgs: list[Msg]) -> None:
        """Handle and settle fetched messages as ``run`` would (for callers that fetch)."""
        if self._spec.ordered:
            await self._ordered(msgs, asyncio.Event())
        else:
            await self._unordered(msgs, asyncio.Event())


async def _dead_letter_all(batch: Batch, reason: str) -> None:
    for msg in batch.pending:
        await batch.dead_letter(msg, reason)


async def _stopped(stop: asyncio.Event | None, seconds: float) -> bool:
    """Wait ``seconds``, or until ``stop`` is set (then ``True``)."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stop.wait(), seconds)
    return stop.is_set()
