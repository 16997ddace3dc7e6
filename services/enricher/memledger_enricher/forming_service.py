"""The enricher's second consumer: conversations → derived memories, recorded through ingest.

What a user says is read by the extractor (facts, preferences, entities, relations); every
``summary_every`` turns of a session, those turns are summed up, and when the session ends, all
of it. Its own durable consumer (``forming-<extractor>``), apart from the embeddings', so a slow
model never holds up embedding, and switching extractors reads the log again with the new one.

Acknowledgement policy, one message at a time, in order (a later statement must supersede an
earlier one, not the other way round): its commands sent to intake, wave after wave
(``forming.Waves``), then ack. A transient failure (the model timed out or is rate limited,
ingest did not answer) is tried again in place, with a growing delay, up to
``max_deliveries`` attempts (a nak would let later messages overtake it); then, like any
answer the model got wrong, the message is dead-lettered with the reason (subject
``<prefix>.dlq.enricher.<tenant>``) and terminated: never silently dropped, never retried
forever. Writes never wait for any of this: it runs behind the log.
"""

import asyncio
import logging
from dataclasses import dataclass
from typing import Any
from uuid import UUID

import orjson
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from memledger_enricher import forming
from memledger_enricher.extractor import ExtractionFailed, Extractor
from memledger_enricher.session_turns import MESSAGE, SessionTurns, turn_of
from memledger_platform import logs, telemetry
from memledger_platform.bus import fetch_ready
from memledger_platform.crypto import Opener
from memledger_platform.intake_client import IntakeClient
from memledger_schemas.subjects import HDR_DLQ_REASON, HDR_DLQ_SUBJECT, Subjects

log = logging.getLogger(__name__)

DURABLE = "forming"
ENDED = "session.ended"
EVENT_TYPES = (MESSAGE, ENDED)
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


class Forming:
    def __init__(self, js: JetStreamContext, subjects: Subjects, extractor: Extractor,
                 intake: IntakeClient, *, turns: SessionTurns | None = None,
                 opener: Opener | None = None, summary_every: int = 50,
                 delivery: Delivery = Delivery()) -> None:
        """``turns``: a session's messages, for summaries (``None``: no summaries);
        ``summary_every``: turns per summary of a running session (0: only at its end)."""
        max_deliveries, batch = delivery.max_deliveries, delivery.batch
        durable, retry_delay = delivery.durable, delivery.retry_delay
        self._js = js
        self._subjects = subjects
        self._extractor = extractor
        self._intake = intake
        self._turns = turns
        self._open = opener or Opener(None)
        self._every = summary_every
        self._max_deliveries = max_deliveries
        self._retry_delay = retry_delay
        self._batch = batch
        self._durable = durable
        self.derived = 0
        self.refused = 0
        self.dead_lettered = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set."""
        filters = [f"{self._subjects.prefix}.evt.*.*.{t}" for t in EVENT_TYPES]
        sub = await self._js.pull_subscribe(
            self._subjects.all_events, durable=self._durable, stream=self._subjects.events_stream,
            config=ConsumerConfig(ack_policy=AckPolicy.EXPLICIT, ack_wait=ACK_WAIT_SECONDS,
                                  deliver_policy=DeliverPolicy.ALL, filter_subjects=filters,
                                  max_ack_pending=self._batch * 2))
        while not stop.is_set():
            for msg in await fetch_ready(sub, self._batch, wait=0.5):
                if stop.is_set():
                    await msg.nak()  # given back, to be read again after the restart
                    continue
                await self.settle(msg, stop)

    async def settle(self, msg: Msg, stop: asyncio.Event | None = None) -> None:
        """Derive what one event holds, record it, and ack it; a transient failure is tried
        again in place (so what was said later is never recorded first), up to
        ``max_deliveries`` attempts, then dead-lettered like any other failure."""
        reason = ""
        for attempt in range(1, self._max_deliveries + 1):
            try:
                await self._derive(msg)
            except ExtractionFailed as failure:
                if not failure.transient:
                    await self._dead_letter(msg, failure.reason)
                    return
                reason = failure.reason
            except TimeoutError:
                reason = "ingest did not answer in time"
            except (ValueError, KeyError, TypeError) as error:
                await self._dead_letter(msg, f"undecodable event: {error!r}")
                return
            else:
                await msg.ack()
                return
            if attempt < self._max_deliveries:
                log.warning("forming will try %s again (attempt %d of %d): %s", msg.subject,
                            attempt, self._max_deliveries, reason)
                if await _stopped(stop, self._retry_delay * 2 ** (attempt - 1)):
                    await msg.nak()  # given back, to be read again after the restart
                    return
        await self._dead_letter(msg, f"gave up after {self._max_deliveries} attempts: {reason}")

    async def _derive(self, msg: Msg) -> None:
        document = self._open(orjson.loads(msg.data))
        waves = await asyncio.to_thread(self.waves, document)
        for wave in waves:
            self._count(await self._intake.send(document["tenant_id"], wave))

    def waves(self, document: dict[str, Any]) -> forming.Waves:
        """The commands one event calls for (the extractor is called here: in a thread)."""
        origin = _origin(document)
        version = int(document["stream_version"])
        if document["event_type"] == ENDED:
            return self._summary(document, origin, version, None, "session")
        turn = turn_of(document)
        if turn is None:
            return []  # erased before it was read: nothing left to learn from
        waves = forming.from_turn(origin, turn, self._extractor.extract(turn),
                                  self._extractor) if turn.role == "user" else []
        # The session stream's first event starts it: message n is at version n + 1.
        number = version - 1
        if self._every and number % self._every == 0:
            waves += self._summary(document, origin, version, self._every,
                                   f"{number - self._every + 1}-{number}")
        return waves

    def _summary(self, document: dict[str, Any], origin: forming.Origin, version: int,
                 last: int | None, span: str) -> forming.Waves:
        if self._turns is None:
            return []
        turns = self._turns.turns(origin.tenant, UUID(str(document["stream_id"])), version)
        turns = turns[-last:] if last else turns
        # Sealed under one subject's key: another subject's words stay out of it.
        turns = [t for t in turns if t.subject_id == origin.subject]
        summary = self._extractor.summarise(turns) if turns else None
        if summary is None:
            return []
        return [[forming.from_summary(origin, summary, span, turns[-1].said_at,
                                      self._extractor)]]

    async def _dead_letter(self, msg: Msg, reason: str) -> None:
        tenant = _tenant_of(msg.subject, self._subjects)
        await self._js.publish(self._subjects.dead_letter("enricher", tenant), msg.data,
                               headers={HDR_DLQ_REASON: reason[:1024],
                                        HDR_DLQ_SUBJECT: msg.subject})
        self.dead_lettered += 1
        telemetry.DEAD_LETTERS.add(1, {"source": "enricher"})
        with logs.bound_event(msg.headers, msg.data, tenant=tenant):
            log.error("forming dead-lettered %s: %s", msg.subject, reason)
        await msg.term()

    def _count(self, results: list[dict[str, Any]]) -> None:
        for result in results:
            if "error" in result:
                # Intake has dead-lettered it with the reason; nothing to retry.
                self.refused += 1
                log.error("forming command refused: %s", result["error"].get("message"))
            else:
                self.derived += 1


async def _stopped(stop: asyncio.Event | None, seconds: float) -> bool:
    """Wait ``seconds``, or until ``stop`` is set (then ``True``)."""
    if stop is None:
        await asyncio.sleep(seconds)
        return False
    try:
        await asyncio.wait_for(stop.wait(), seconds)
    except TimeoutError:
        return False
    return True


def _origin(document: dict[str, Any]) -> forming.Origin:
    return forming.Origin(
        document["tenant_id"], document["space_id"],
        UUID(str(document["payload"]["session_id"])),
        str(document.get("correlation_id") or document["event_id"]),
        document.get("subject_id"), document.get("key_id"))


def _tenant_of(subject: str, subjects: Subjects) -> str:
    # <prefix>.evt.<tenant>.<space>.<event_type>
    parts = subject[len(subjects.prefix) + 1:].split(".")
    return parts[1] if len(parts) > 1 else "-"
