"""``memledger bench embed``: texts/s through the enricher's path beside the bare model.

The path is ``Enricher.handle`` on fetched batches of ``memory.asserted`` events (the
enricher's batch size): decoding, planning (extraction rules, entity mentions), the embedding
call, building the commands, serialising them as intake would receive them, and settling the
messages. Only the bus is faked (messages and an intake that answers at once), so what is
measured is the enricher's own work. The raw engine is ``LocalMiniLmEmbedder.embed_documents``
on the same batches of the same texts; the two alternate batch by batch, so load from other
processes falls on both alike. CPU time (all threads of this process) is reported beside wall
time, being steadier on a shared machine.
"""

import argparse
import functools
import os
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any, cast

from memledger_cli.bench import corpus
from memledger_cli.bench.common import Scenario, Steps, measured
from memledger_enricher.service import Enricher
from memledger_platform.embedding.embedder import LocalMiniLmEmbedder
from memledger_platform.intake_client import IntakeClient
from memledger_platform.settings import Settings
from memledger_schemas.commands import CommandBase, RecordEmbedding
from memledger_schemas.envelope import EventEnvelope
from memledger_schemas.event_types import EventType
from memledger_schemas.subjects import HDR_EVENT_TYPE, HDR_POSITION, Subjects

SPACE = "bench"
_TAILS = (".", ". I prefer short status updates in the morning.",
          ". Remind me to check the dashboards on Monday.", ". Ada from the SRE team confirmed it.")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--texts", type=int, default=2_000)


def texts(count: int) -> list[str]:
    """Distinct memory contents; some carry a preference, a reminder or a name, so the
    extraction rules and entity mentions have work to do as they would in real use."""
    bases = corpus.base_sentences(count)
    return [f"{base}{_TAILS[i % len(_TAILS)]}" for i, base in enumerate(bases)]


class _Message:
    """What ``Enricher.handle`` uses of a fetched JetStream message."""

    def __init__(self, data: bytes, position: int) -> None:
        self.data = data
        self.subject = f"memledger.evt.default.{SPACE}.memory.asserted"
        self.headers = {HDR_EVENT_TYPE: EventType.MEMORY_ASSERTED, HDR_POSITION: str(position)}
        self.settled = False

    async def ack(self) -> None:
        self.settled = True

    async def nak(self, delay: float | None = None) -> None:
        raise RuntimeError("the enricher gave a batch back")


class _Intake:
    """Answers every command at once, after serialising it as the real client does."""

    def __init__(self) -> None:
        self.commands = 0
        self.embedded: set[uuid.UUID] = set()

    async def send(self, tenant: str, commands: list[CommandBase]) -> list[dict[str, Any]]:
        self.commands += len(commands)
        for command in commands:
            command.model_dump_json(exclude_none=True).encode()
            if isinstance(command, RecordEmbedding):
                self.embedded.add(command.item_id)
        return [{"position": self.commands} for _ in commands]


def _event(text: str, position: int) -> bytes:
    """A committed ``memory.asserted`` as the relay publishes it (made by the envelope's own
    model, so the bench cannot drift from what the enricher decodes)."""
    item = uuid.UUID(int=position)
    return EventEnvelope(
        event_id=uuid.uuid4(), event_type=EventType.MEMORY_ASSERTED, schema_version=1,
        stream_id=item, stream_version=1, global_position=position,
        recorded_at=datetime.now(UTC), tenant_id="default", space_id=SPACE, actor="http",
        payload={"item_id": str(item), "kind": "fact", "content": text, "tags": [],
                 "importance": 0.5, "confidence": 1.0}).model_dump_json().encode()


async def _measure(args: argparse.Namespace) -> dict[str, Any]:
    with Steps(total=2) as steps:
        steps.step("loading the local model")
        model = LocalMiniLmEmbedder()
        intake, batch = _Intake(), Settings().enricher_batch
        enricher = Enricher(cast(Any, None), Subjects(), model, cast(IntakeClient, intake),
                            batch=batch)
        docs = texts(args.texts)
        batches = [docs[i:i + batch] for i in range(0, len(docs), batch)]
        steps.step(f"{len(docs)} texts in batches of {batch}: enricher path and bare model")
        await enricher.handle(cast(Any, _messages(batches[0], 0)))  # warm-up: first runs allocate
        intake.commands, intake.embedded = 0, set()
        path = raw = (0.0, 0.0)
        for n, chunk in enumerate(batches):
            raw = _add(raw, _timed(functools.partial(model.embed_documents, chunk)))
            msgs = _messages(chunk, n * batch)
            started = _clocks()
            await enricher.handle(cast(Any, msgs))
            path = _add(path, _since(started))
            if not all(m.settled for m in msgs):
                raise RuntimeError("the enricher left messages unsettled")
        _every_text_embedded(intake, len(docs))
    return {"scenario": "embed", "texts": len(docs), "batch": batch,
            "texts_per_s": round(len(docs) / path[0], 1),
            "raw_model_texts_per_s": round(len(docs) / raw[0], 1),
            "ratio": round(raw[0] / path[0], 3),
            "cpu_ms_per_text": round(path[1] * 1000 / len(docs), 3),
            "raw_cpu_ms_per_text": round(raw[1] * 1000 / len(docs), 3),
            "ratio_cpu": round(raw[1] / path[1], 3), "commands": intake.commands,
            "model": model.model_id, "cpus": os.cpu_count(),
            "loadavg_1m": round(os.getloadavg()[0], 2)}


def _messages(chunk: list[str], first: int) -> list[_Message]:
    return [_Message(_event(text, position), position)
            for position, text in enumerate(chunk, start=first + 2)]


def _every_text_embedded(intake: _Intake, texts: int) -> None:
    """A text the enricher skipped (an event it could not decode) costs it nothing: a run
    that embedded fewer texts than it was given measured something else, and fails."""
    if len(intake.embedded) != texts:
        raise RuntimeError(f"the enricher embedded {len(intake.embedded)} of {texts} texts "
                           "(its log says why it skipped the others)")


def _clocks() -> tuple[float, float]:
    return time.perf_counter(), time.process_time()


def _since(started: tuple[float, float]) -> tuple[float, float]:
    now = _clocks()
    return now[0] - started[0], now[1] - started[1]


def _timed(work: Callable[[], object]) -> tuple[float, float]:
    started = _clocks()
    work()
    return _since(started)


def _add(a: tuple[float, float], b: tuple[float, float]) -> tuple[float, float]:
    return a[0] + b[0], a[1] + b[1]


SCENARIO = Scenario("embed", "texts/s through the enricher (planning, embedding, commands) "
                    "beside the bare local model", add_arguments, measured(_measure))
