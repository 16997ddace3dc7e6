"""How the platform consumer settles messages: a ``Batch`` records how far each fetched
message is settled (acked, dead-lettered, given back); ``DeadLetters`` publishes the poison
ones with their reason."""

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from memledger_platform import logs, telemetry
from memledger_schemas.subjects import HDR_DLQ_REASON, HDR_DLQ_SUBJECT, Subjects

log = logging.getLogger(__name__)


@dataclass
class DeadLetters:
    """Where a consumer's poison messages go."""

    js: JetStreamContext | None
    """``None`` until the consumer runs (a handler driven without it dead-letters nothing)."""
    subjects: Subjects
    source: str
    level: int = logging.ERROR
    count: int = 0

    async def send(self, msg: Msg, reason: str, *, tenant: str | None = None,
                   data: bytes | None = None) -> None:
        """Publish ``msg`` (or ``data`` in its place) with the reason, and count it."""
        tenant = tenant or tenant_of(msg.subject, self.subjects)
        assert self.js is not None, "dead letters come from a running consumer"
        await self.js.publish(self.subjects.dead_letter(self.source, tenant),
                              msg.data if data is None else data,
                              headers={HDR_DLQ_REASON: reason[:1024],
                                       HDR_DLQ_SUBJECT: msg.subject})
        self.count += 1
        telemetry.DEAD_LETTERS.add(1, {"source": self.source})
        with logs.bound_event(msg.headers, msg.data if data is None else data, tenant=tenant):
            log.log(self.level, "%s dead-lettered %s: %s", self.source, msg.subject, reason)


@dataclass
class Batch:
    """Fetched messages and how far each is settled. Messages left unsettled when the handler
    returns are acked."""

    msgs: list[Msg]
    dead_letters: DeadLetters
    acks: bool = True
    settled: set[int] = field(default_factory=set)

    @property
    def pending(self) -> list[Msg]:
        """The messages not settled yet, in order."""
        return [m for m in self.msgs if id(m) not in self.settled]

    async def ack(self, msgs: Sequence[Msg] | None = None) -> None:
        """Ack ``msgs`` (default: every pending message), their effect committed."""
        done = self._settle(self.pending if msgs is None else msgs)
        if self.acks:
            # One after another: an ack only queues a publish for the client's flusher, so a
            # task each (``gather``) would cost more than the acks themselves.
            for msg in done:
                await msg.ack()

    async def dead_letter(self, msg: Msg, reason: str, *, tenant: str | None = None,
                          data: bytes | None = None) -> None:
        """Send ``msg`` to the dead letters with ``reason`` and terminate it."""
        if not self._settle([msg]):
            return
        await self.dead_letters.send(msg, reason, tenant=tenant, data=data)
        if self.acks:
            await msg.term()

    async def nak(self, delay: float | None = None) -> None:
        """Give every pending message back, to be redelivered (after ``delay``)."""
        done = self._settle(self.pending)
        if self.acks:
            await asyncio.gather(*(m.nak(delay=delay) for m in done), return_exceptions=True)

    async def keep(self) -> None:
        """Keep every pending message in progress (its ack wait starts again)."""
        if self.acks:
            await asyncio.gather(*(m.in_progress() for m in self.pending))

    def _settle(self, msgs: Sequence[Msg]) -> list[Msg]:
        done = [m for m in msgs if id(m) not in self.settled]
        self.settled.update(id(m) for m in done)
        return done


def tenant_of(subject: str, subjects: Subjects) -> str:
    """The tenant of an event subject (``<prefix>.evt.<tenant>.…``), else ``_invalid``."""
    return subjects.event_tenant(subject) or "_invalid"
