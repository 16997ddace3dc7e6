"""The lifecycle scheduler: folds the events stream (``fold``) and, once caught
up, every ``lifecycle_interval_seconds`` sends ingest what the space policies decide at that
moment (``archive_memory`` with the policy version and reason) and what consolidation found
(``merge_memories`` or ``suggest_merge``), the themes of the spaces that ask for them
(``record_theme``) and the importance learned from signals (``learn_importance``:
``forming_fold``), each under a deterministic idempotency key.

It is a client of ingest like the enricher (only ingest writes the event store).
Its state is rebuilt by folding the stream from the start at every start (a fresh consumer),
so it keeps nothing of its own: a restart decides what the log and the clock say.
"""

import asyncio
import logging
from dataclasses import dataclass
from uuid import UUID

from nats.js import JetStreamContext

from memledger_lifecycle import forming_fold
from memledger_lifecycle.fold import (
    CHUNK,
    EVENT_TYPES,
    Archive,
    Consolidation,
    LifecycleFold,
)
from memledger_lifecycle.forming_fold import FormingFold
from memledger_platform.clock import Clock, SystemClock
from memledger_platform.consumer import Batch, Consumer, Handling, Subscription
from memledger_platform.crypto import Opener
from memledger_platform.events import decode
from memledger_platform.intake_client import IntakeClient
from memledger_schemas import commands as c
from memledger_schemas.subjects import Subjects

log = logging.getLogger(__name__)

DURABLE = "lifecycle"
ACTOR = "memledger:lifecycle"
_BATCH = 500
_SEND = 100
"""Commands per intake round trip."""


@dataclass
class Tally:
    archived: int = 0
    merged: int = 0
    suggested: int = 0
    themes: int = 0
    learned: int = 0
    refused: int = 0
    ticks: int = 0


class Scheduler(Handling):
    """Folds the stream (the platform consumer's handler, acking nothing: the fold is made
    again at every start) and ticks once caught up."""

    def __init__(self, js: JetStreamContext, subjects: Subjects, intake: IntakeClient, *,
                 interval_seconds: float, clock: Clock | None = None,
                 opener: Opener | None = None, chunk: int = CHUNK) -> None:
        """``chunk``: archive decisions made at a time in a tick."""
        self._intake = intake
        self.chunk = chunk
        self._interval = interval_seconds
        self._clock = clock or SystemClock()
        self._open = opener or Opener(None)
        self._next_tick = 0.0
        self.fold = LifecycleFold()
        self.forming = FormingFold()
        self.caught_up = False
        self.tally = Tally()
        self._consumer = Consumer(js, subjects, Subscription(
            name="lifecycle", stream=subjects.events_stream, durable=DURABLE,
            subject=subjects.all_events,
            filter_subjects=tuple(subjects.events_of_type(t) for t in dict.fromkeys(
                (*EVENT_TYPES, *forming_fold.EVENT_TYPES))),
            batch=_BATCH, acks=False, start=_from_the_first, traced=False), self)

    async def run(self, stop: asyncio.Event) -> None:
        await self._consumer.run(stop)

    async def handle(self, batch: Batch) -> None:
        for msg in batch.pending:
            event = decode(msg.data, opener=self._open)
            if event.event_type in EVENT_TYPES:
                self.fold.apply(event)
            self.forming.apply(event)
        # Decide only on the whole log: a policy or a hold further on must not be missed.
        self.caught_up = batch.msgs[-1].metadata.num_pending == 0
        await self._tick_when_due()

    async def idle(self) -> None:
        self.caught_up = True
        await self._tick_when_due()

    async def _tick_when_due(self) -> None:
        loop = asyncio.get_running_loop()
        if self.caught_up and loop.time() >= self._next_tick:
            await self.tick()
            self._next_tick = loop.time() + self._interval

    async def tick(self) -> None:
        """Send what the fold decides now (the same command again is answered, not
        written again). Sent as decided, ``_SEND`` a round trip: a tick holds a chunk of
        decisions at a time (``chunk``), never every item's."""
        self.tally.ticks += 1
        waiting: dict[str, list[c.CommandBase]] = {}
        for chunk in self.fold.archive_chunks(self._clock.now(), self.chunk):
            for archive in chunk:
                await self._queue(waiting, archive.tenant, _archive(archive))
        for found in self.fold.take_consolidations():
            await self._queue(waiting, found.tenant, _consolidation(found))
        # Themes and importance are what the fold holds now: decided after the archives.
        for tenant, theme in self.forming.themes(self.fold):
            await self._queue(waiting, tenant, theme)
        for tenant, learned in self.forming.importance(self.fold):
            await self._queue(waiting, tenant, learned)
        for tenant, batch in waiting.items():
            await self._send(tenant, batch)

    async def _queue(self, waiting: dict[str, list[c.CommandBase]], tenant: str,
                     command: c.CommandBase) -> None:
        """Add ``command`` to its tenant's next round trip, sent once it is full."""
        batch = waiting.setdefault(tenant, [])
        batch.append(command)
        if len(batch) >= _SEND:
            del waiting[tenant]
            await self._send(tenant, batch)

    async def _send(self, tenant: str, batch: list[c.CommandBase]) -> None:
        try:
            results = await self._intake.send(tenant, batch)
        except TimeoutError:
            log.warning("ingest did not answer %d lifecycle commands; the next tick sends "
                        "them again", len(batch))
            return
        for command, result in zip(batch, results, strict=True):
            if "error" in result:
                self.tally.refused += 1
                log.info("lifecycle command refused: %s", result["error"].get("message"))
            elif not result.get("duplicate"):
                self._count(command)

    def _count(self, command: c.CommandBase) -> None:
        match command:
            case c.ArchiveMemory():
                self.tally.archived += 1
            case c.MergeMemories():
                self.tally.merged += 1
            case c.SuggestMerge():
                self.tally.suggested += 1
            case c.RecordTheme():
                self.tally.themes += 1
            case c.LearnImportance():
                self.tally.learned += 1


async def _from_the_first() -> int:
    """A fresh consumer from the first event at every start: the fold lives in memory."""
    return 0


def _archive(a: Archive) -> c.ArchiveMemory:
    return c.ArchiveMemory(space_id=a.space, item_id=UUID(a.item_id), reason=a.reason,
                           policy_version=a.policy_version, idempotency_key=a.idempotency_key,
                           actor=ACTOR)


def _consolidation(found: Consolidation) -> c.CommandBase:
    if found.action == "merge":
        return c.MergeMemories(
            space_id=found.space, item_id=UUID(found.survivor),
            merged_item_ids=(UUID(found.duplicate),), similarity=found.similarity,
            reason=f"near-duplicate (cosine {found.similarity:.3f}, policy "
                   f"v{found.policy_version})", idempotency_key=found.idempotency_key,
            actor=ACTOR)
    return c.SuggestMerge(space_id=found.space, item_id=UUID(found.duplicate),
                          similar_to=UUID(found.survivor), similarity=found.similarity,
                          policy_version=found.policy_version,
                          idempotency_key=found.idempotency_key, actor=ACTOR)
