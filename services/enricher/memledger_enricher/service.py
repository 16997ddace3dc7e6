"""The enricher's JetStream consumer: memory and conversation events → embeddings, extracted
preferences and entity mentions, recorded back through ingest as commands.

Acknowledgement policy: a fetched batch is embedded in one model call (in a worker thread, so
the event loop keeps the consumer's heartbeat), its commands are sent to intake, and the events
are acked once every command has a committed result (or was refused, which intake has already
dead-lettered with the reason). If ingest does not answer in time, or the model fails, the batch
is nak'd and comes back later; the commands carry deterministic idempotency keys, so sending them
again records nothing twice. Writes never wait for any of this: the enricher runs behind the log.
"""

import asyncio
import logging
from collections import defaultdict
from typing import Any

import orjson
from nats.aio.msg import Msg
from nats.js import JetStreamContext
from nats.js.api import AckPolicy, ConsumerConfig, DeliverPolicy

from memledger_enricher.plan import (
    EMBEDDED,
    EVENT_TYPES,
    Embedded,
    Source,
    commands_for,
    embedded_already,
    embedding_of,
    source_of,
)
from memledger_platform import logs, telemetry
from memledger_platform.bus import fetch_ready
from memledger_platform.crypto import Opener
from memledger_platform.embedding.embedder import Embedder, Vector
from memledger_platform.intake_client import IntakeClient
from memledger_schemas.commands import CommandBase
from memledger_schemas.subjects import HDR_EVENT_TYPE, Subjects

log = logging.getLogger(__name__)
_tracer = telemetry.tracer(__name__)

DURABLE = "enricher"
ACK_WAIT_SECONDS = 120.0
RETRY_DELAY_SECONDS = 5.0


class Enricher:
    def __init__(self, js: JetStreamContext, subjects: Subjects, embedder: Embedder,
                 intake: IntakeClient, *, batch: int = 64, durable: str = DURABLE,
                 opener: Opener | None = None, in_flight: int = 3) -> None:
        self._js = js
        self._subjects = subjects
        self._embedder = embedder
        self._intake = intake
        self._batch = batch
        self._in_flight = in_flight
        # One model call at a time: two at once would only share the same cores.
        self._model = asyncio.Lock()
        self._durable = durable
        self._open = opener or Opener(None)
        self.enriched = 0
        self.refused = 0

    async def run(self, stop: asyncio.Event) -> None:
        """Consume until ``stop`` is set."""
        sub = await self._subscribe()
        # Up to ``in_flight`` batches at once: while ingest records one, the next is embedded.
        # Their order does not matter: each command is keyed by the item version it is for.
        under_way: set[asyncio.Task[None]] = set()
        held: list[Msg] = []
        try:
            while not stop.is_set():
                if len(under_way) >= self._in_flight:
                    await asyncio.wait(under_way, return_when=asyncio.FIRST_COMPLETED)
                    continue
                msgs, held = _keep_pairs(held, await fetch_ready(sub, self._batch, wait=0.5))
                if msgs:
                    task = asyncio.create_task(self._handle_unless_stopped(msgs, stop))
                    under_way.add(task)
                    task.add_done_callback(under_way.discard)
        finally:
            await asyncio.gather(*under_way, return_exceptions=True)
            await asyncio.gather(*(m.nak() for m in held), return_exceptions=True)

    async def _subscribe(self) -> JetStreamContext.PullSubscription:
        # Created or updated: a consumer made before memory.embedded was read is widened.
        filters = [f"{self._subjects.prefix}.evt.*.*.{t}" for t in (*EVENT_TYPES, EMBEDDED)]
        await self._js.add_consumer(self._subjects.events_stream, ConsumerConfig(
            name=self._durable, durable_name=self._durable, ack_policy=AckPolicy.EXPLICIT,
            ack_wait=ACK_WAIT_SECONDS, deliver_policy=DeliverPolicy.ALL,
            filter_subjects=filters, max_ack_pending=self._batch * (self._in_flight + 2)))
        return await self._js.pull_subscribe_bind(durable=self._durable,
                                                  stream=self._subjects.events_stream)

    async def _handle_unless_stopped(self, msgs: list[Msg], stop: asyncio.Event) -> None:
        # A batch waiting on ingest must not hold up a shutdown: give it back (nak) instead,
        # to be enriched again, with the same idempotency keys, after the restart.
        handling = asyncio.ensure_future(self.handle(msgs))
        stopping = asyncio.ensure_future(stop.wait())
        await asyncio.wait({handling, stopping}, return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
        if not handling.done():
            handling.cancel()
            await asyncio.gather(handling, return_exceptions=True)
            await asyncio.gather(*(m.nak() for m in msgs), return_exceptions=True)

    async def handle(self, msgs: list[Msg]) -> None:
        """Enrich a fetched batch and settle every message of it. The commands it sends carry
        the batch's span (the child of the one event's, or linked to each)."""
        with telemetry.consuming(_tracer, "enricher", msgs):
            await self._handle_batch(msgs)

    async def _handle_batch(self, msgs: list[Msg]) -> None:
        model = self._embedder.model_id
        embedded = {found for m in msgs if _type_of(m) == EMBEDDED
                    and (found := _embedding(m, model)) is not None}
        sources = [source for source in (_source(m, self._open) for m in msgs
                                         if _type_of(m) != EMBEDDED) if source is not None]
        try:
            commands = await self._commands(sources, embedded)
            for tenant, batch in _by_tenant(commands).items():
                self._count(await self._intake.send(tenant, batch))
        except Exception as error:  # the model or ingest failed: all of it comes back later
            log.warning("enricher will retry %d events in %.0fs: %r", len(msgs),
                        RETRY_DELAY_SECONDS, error)
            await asyncio.gather(*(m.nak(delay=RETRY_DELAY_SECONDS) for m in msgs))
            return
        self.enriched += len(sources)
        await asyncio.gather(*(m.ack() for m in msgs))

    async def _commands(self, sources: list[Source], embedded: set[Embedded]
                        ) -> list[tuple[str, CommandBase]]:
        embedding = [s for s in sources if s.embeds and not embedded_already(s, embedded)]
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


def _keep_pairs(held: list[Msg], fetched: list[Msg]) -> tuple[list[Msg], list[Msg]]:
    """(what to enrich now, what to hold for the next fetch). An assertion that ends a fetch
    is held back, so that an import's embedding, committed and published just after it, is in
    the same batch and the item is not embedded again; a fetch that brings nothing releases
    it (an assertion without one, at the end of the log)."""
    msgs = held + fetched
    if fetched and _type_of(msgs[-1]) == "memory.asserted":
        return msgs[:-1], msgs[-1:]
    return msgs, []


def _type_of(msg: Msg) -> str | None:
    return (msg.headers or {}).get(HDR_EVENT_TYPE)


def _embedding(msg: Msg, model: str) -> Embedded | None:
    try:
        return embedding_of(orjson.loads(msg.data), model)
    except (ValueError, KeyError, TypeError) as error:
        log.error("enricher skipped an undecodable event on %s: %r", msg.subject, error)
        return None


def _source(msg: Msg, opener: Opener) -> Source | None:
    try:
        return source_of(opener(orjson.loads(msg.data)))
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
