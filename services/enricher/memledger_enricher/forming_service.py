"""The enricher's second consumer: conversations → derived memories, recorded through ingest.

What a user says is read by the extractor (facts, preferences, entities, relations); every
``summary_every`` turns of a session, those turns are summed up, and when the session ends, all
of it. Its own durable consumer (``forming-<extractor>``), apart from the embeddings', so a slow
model never holds up embedding, and switching extractors reads the log again with the new one.

Acknowledgement policy (the platform consumer's, ordered, one message at a time: a later
statement must supersede an earlier one, not the other way round): its commands sent to
intake, wave after wave (``forming.Waves``), then ack. A transient failure (the model timed
out or is rate limited, ingest did not answer) is tried again in place, with a growing delay,
up to ``max_deliveries`` attempts (a nak would let later messages overtake it); then, like any
answer the model got wrong, the message is dead-lettered with the reason (subject
``<prefix>.dlq.enricher.<tenant>``) and terminated: never silently dropped, never retried
forever. Writes never wait for any of this: it runs behind the log.
"""

import asyncio
import logging
from dataclasses import dataclass
from typing import Any
from uuid import UUID

from nats.js import JetStreamContext

from memledger_enricher import forming
from memledger_enricher.extractor import ExtractionFailed, Extractor
from memledger_enricher.session_turns import SessionTurns, turn_of
from memledger_platform.consumer import (
    Batch,
    Consumer,
    Handling,
    Poison,
    Subscription,
    Transient,
)
from memledger_platform.crypto import Opener
from memledger_platform.events import Event, decode
from memledger_platform.intake_client import IntakeClient
from memledger_schemas.event_types import EventType
from memledger_schemas.subjects import Subjects

log = logging.getLogger(__name__)

DURABLE = "forming"
EVENT_TYPES = (EventType.MESSAGE_APPENDED, EventType.SESSION_ENDED)
ACK_WAIT_SECONDS = 600.0
"""Long enough for every attempt at one message (their timeouts and delays)."""
RETRY_DELAY_SECONDS = 2.0
"""The delay before the second attempt; it doubles for each one after."""


@dataclass(frozen=True)
class Delivery:
    """How the consumer takes its messages: ``batch`` at a time from the durable consumer
    ``durable``, each tried ``max_deliveries`` times, ``retry_delay`` seconds apart (doubling)."""

    max_deliveries: int = 5
    batch: int = 16
    durable: str = DURABLE
    retry_delay: float = RETRY_DELAY_SECONDS


class Forming(Handling):
    """Derives memories from conversations (the platform consumer's handler)."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, extractor: Extractor,
                 intake: IntakeClient, *, turns: SessionTurns | None = None,
                 opener: Opener | None = None, summary_every: int = 50,
                 delivery: Delivery = Delivery()) -> None:
        """``turns``: a session's messages, for summaries (``None``: no summaries);
        ``summary_every``: turns per summary of a running session (0: only at its end)."""
        max_deliveries, batch = delivery.max_deliveries, delivery.batch
        durable, retry_delay = delivery.durable, delivery.retry_delay
        self._extractor = extractor
        self._intake = intake
        self._turns = turns
        self._open = opener or Opener(None)
        self._every = summary_every
        self.derived = 0
        self.refused = 0
        self._consumer = Consumer(js, subjects, Subscription(
            name="enricher", stream=subjects.events_stream, durable=durable,
            subject=subjects.all_events,
            filter_subjects=tuple(subjects.events_of_type(t) for t in EVENT_TYPES),
            batch=batch, ack_wait=ACK_WAIT_SECONDS, max_ack_pending=batch * 2, each=True,
            max_attempts=max_deliveries, retry_seconds=retry_delay,
            max_retry_seconds=retry_delay * 2 ** max_deliveries, traced=False), self)

    @property
    def dead_lettered(self) -> int:
        return self._consumer.dead_letters.count

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set."""
        await self._consumer.run(stop)

    async def handle(self, batch: Batch) -> None:
        """Derive what each event holds and record it; a model that cannot answer for now,
        or ingest not answering, is ``Transient``; an answer it got wrong, ``Poison``."""
        for msg in batch.pending:
            try:
                await self._derive(msg.data)
            except ExtractionFailed as failure:
                raise (Transient if failure.transient else Poison)(failure.reason) from failure
            except TimeoutError as error:
                raise Transient("ingest did not answer in time") from error
            except (ValueError, KeyError, TypeError) as error:
                raise Poison(f"undecodable event: {error!r}") from error

    async def _derive(self, data: bytes) -> None:
        event = decode(data, opener=self._open)
        waves = await asyncio.to_thread(self.waves, event)
        for wave in waves:
            self._count(await self._intake.send(event.tenant_id, wave))

    def waves(self, event: Event) -> forming.Waves:
        """The commands one event calls for (the extractor is called here: in a thread)."""
        origin = _origin(event)
        version = event.stream_version
        if event.event_type == EventType.SESSION_ENDED:
            return self._summary(event, origin, version, None, "session")
        turn = turn_of(event)
        if turn is None:
            return []  # erased before it was read: nothing left to learn from
        waves = forming.from_turn(origin, turn, self._extractor.extract(turn),
                                  self._extractor) if turn.role == "user" else []
        # The session stream's first event starts it: message n is at version n + 1.
        number = version - 1
        if self._every and number % self._every == 0:
            waves += self._summary(event, origin, version, self._every,
                                   f"{number - self._every + 1}-{number}")
        return waves

    def _summary(self, event: Event, origin: forming.Origin, version: int,
                 last: int | None, span: str) -> forming.Waves:
        if self._turns is None:
            return []
        turns = self._turns.turns(origin.tenant, UUID(str(event.stream_id)), version)
        turns = turns[-last:] if last else turns
        # Sealed under one subject's key: another subject's words stay out of it.
        turns = [t for t in turns if t.subject_id == origin.subject]
        summary = self._extractor.summarise(turns) if turns else None
        if summary is None:
            return []
        return [[forming.from_summary(origin, summary, span, turns[-1].said_at,
                                      self._extractor)]]

    def _count(self, results: list[dict[str, Any]]) -> None:
        for result in results:
            if "error" in result:
                # Intake has dead-lettered it with the reason; nothing to retry.
                self.refused += 1
                log.error("forming command refused: %s", result["error"].get("message"))
            else:
                self.derived += 1


def _origin(event: Event) -> forming.Origin:
    return forming.Origin(
        event.tenant_id, event.space_id, UUID(str(event.payload["session_id"])),
        event.correlation_id or event.event_id, event.subject_id, event.key_id)
