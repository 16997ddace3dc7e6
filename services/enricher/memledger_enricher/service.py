"""The enricher's JetStream consumer: memory and conversation events → embeddings, extracted
preferences and entity mentions, recorded back through ingest as commands.

Acknowledgement policy (the platform consumer's, unordered): a fetched batch is embedded in
one model call (in a worker thread, so the event loop keeps the consumer's heartbeat), its
commands are sent to intake, and the events are acked once every command has a committed result
(or was refused, which intake has already dead-lettered with the reason). If ingest does not
answer in time, or the model fails, the batch is nak'd and comes back later; the commands carry
deterministic idempotency keys, so sending them again records nothing twice. Writes never wait
for any of this: the enricher runs behind the log.
"""

import asyncio
import logging
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from nats.aio.msg import Msg
from nats.js import JetStreamContext

from memledger_enricher.logged import LoggedEmbeddings
from memledger_enricher.plan import (
    EMBEDDED,
    EVENT_TYPES,
    Embedded,
    Source,
    commands_for,
    embedded_already,
    embedding_of,
    maybe_imported,
    source_of,
)
from memledger_platform import logs
from memledger_platform.consumer import Batch, Consumer, Handling, Subscription, Transient
from memledger_platform.crypto import Opener
from memledger_platform.embedding.embedder import Embedder, Vector
from memledger_platform.events import VECTOR, Event, decode
from memledger_platform.intake_client import IntakeClient
from memledger_schemas.commands import CommandBase
from memledger_schemas.subjects import Subjects

log = logging.getLogger(__name__)

DURABLE = "enricher"
ACK_WAIT_SECONDS = 120.0
RETRY_DELAY_SECONDS = 5.0


@dataclass(frozen=True)
class Reading:
    """How the enricher reads: sealed fields opened with ``opener``; an item's first version
    whose embedding is not in its batch looked up in ``logged`` (``None``, without an event
    store: an import whose two events came in two batches is embedded again)."""

    opener: Opener = field(default_factory=lambda: Opener(None))
    logged: LoggedEmbeddings | None = None


class Enricher:
    """The enricher: a ``Consumer`` of the memory and conversation events with ``Enrichment``."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, embedder: Embedder,
                 intake: IntakeClient, *, batch: int = 64, durable: str = DURABLE,
                 reading: Reading | None = None, in_flight: int = 3) -> None:
        self._enrichment = Enrichment(embedder, intake, reading or Reading())
        # Up to ``in_flight`` batches at once: while ingest records one, the next is embedded.
        # Their order does not matter: each command is keyed by the item version it is for.
        self._consumer = Consumer(js, subjects, Subscription(
            name="enricher", stream=subjects.events_stream, durable=durable,
            subject=subjects.all_events,
            filter_subjects=tuple(subjects.events_of_type(t)
                                  for t in (*EVENT_TYPES, EMBEDDED)),
            batch=batch, ack_wait=ACK_WAIT_SECONDS, ordered=False, in_flight=in_flight,
            nak_delay=RETRY_DELAY_SECONDS), self._enrichment)

    @property
    def enriched(self) -> int:
        return self._enrichment.enriched

    @property
    def refused(self) -> int:
        return self._enrichment.refused

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set (a batch still waiting on ingest is then given back,
        to be enriched again, with the same idempotency keys, after the restart)."""
        await self._consumer.run(stop)

    async def handle(self, msgs: list[Msg]) -> None:
        """Enrich fetched messages and settle every one of them."""
        await self._consumer.handle(msgs)


class Enrichment(Handling):
    """Embeds and extracts what a batch of events holds, and records it through ingest (the
    consumer's handler). The commands it sends carry the batch's span."""

    def __init__(self, embedder: Embedder, intake: IntakeClient, reading: Reading) -> None:
        self._embedder = embedder
        self._intake = intake
        self._open = reading.opener
        self._logged = reading.logged
        # One model call at a time: two at once would only share the same cores.
        self._model = asyncio.Lock()
        self.enriched = 0
        self.refused = 0

    async def handle(self, batch: Batch) -> None:
        model = self._embedder.model_id
        events = [e for e in (_event(m, self._open) for m in batch.pending) if e is not None]
        embedded = {found for e in events if (found := embedding_of(e, model)) is not None}
        sources = [source for source in (source_of(e) for e in events if e.event_type != EMBEDDED)
                   if source is not None]
        try:
            commands = await self._commands(sources, embedded)
            for tenant, grouped in _by_tenant(commands).items():
                self._count(await self._intake.send(tenant, grouped))
        except Exception as error:  # the model or ingest failed: all of it comes back later
            raise Transient(f"enricher: {error!r}") from error
        self.enriched += len(sources)

    async def _commands(self, sources: list[Source], embedded: set[Embedded]
                        ) -> list[tuple[str, CommandBase]]:
        # an import's item version comes with its embedding: not embedded again
        embedding = [s for s in sources if s.embeds and not embedded_already(s, embedded)]
        unsure = [s for s in embedding if maybe_imported(s)]
        if unsure and self._logged is not None:
            # its embedding, committed with it, may have come in another batch
            logged = await asyncio.to_thread(self._logged.of, unsure, self._embedder.model_id)
            embedding = [s for s in embedding if not embedded_already(s, logged)]
        vectors: list[Vector] = []
        if embedding:
            async with self._model:
                vectors = await asyncio.to_thread(self._embedder.embed_documents,
                                                  [s.embedded_text for s in embedding])
        by_source = {id(s): v for s, v in zip(embedding, vectors, strict=True)}
        model = self._embedder.model_id
        return [(s.tenant, command) for s in sources
                for command in commands_for(s, by_source.get(id(s)), model)]

    def _count(self, results: list[dict[str, Any]]) -> None:
        for result in results:
            if "error" in result:
                # Intake has dead-lettered it with the reason; nothing to retry.
                self.refused += 1
                log.error("enricher command refused: %s", result["error"].get("message"))


def _event(msg: Msg, opener: Opener) -> Event | None:
    try:
        return decode(msg.data, opener=opener, skip=VECTOR)
    except (ValueError, KeyError, TypeError) as error:
        # Undecodable here means the projector dead-letters it too; enrichment skips it.
        with logs.bound_event(msg.headers, msg.data):
            log.error("enricher skipped an undecodable event on %s: %r", msg.subject, error)
        return None


def _by_tenant(commands: list[tuple[str, CommandBase]]) -> dict[str, list[CommandBase]]:
    grouped: dict[str, list[CommandBase]] = defaultdict(list)
    for tenant, command in commands:
        grouped[tenant].append(command)
    return grouped
